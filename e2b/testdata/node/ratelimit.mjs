// Rate limits as the SDK expects them: 429 with Retry-After, which it
// retries after the wait, or reports as a RateLimitError when told not to.
import { Sandbox, RateLimitError } from 'e2b'
import { check, done, assert, isA, rejects } from './lib.mjs'

await check('a burst past the limit: 429 with Retry-After, RateLimitError without retries', async () => {
  let err
  for (let i = 0; i < 10 && !err; i++) {
    try {
      await Sandbox.list({ retries: 0 }).nextItems()
    } catch (e) {
      err = e
    }
  }
  assert(err, 'no request was limited')
  isA(err, RateLimitError, 'the error')
  const res = await fetch(`${process.env.AIRLOCK_URL}/v2/sandboxes`, { headers: { 'X-API-KEY': process.env.E2B_API_KEY } })
  if (res.status === 429) assert(/^\d+$/.test(res.headers.get('retry-after')), `Retry-After ${res.headers.get('retry-after')}`)
})

await check('with retries, the SDK waits out Retry-After and succeeds', async () => {
  for (let i = 0; i < 5; i++) {
    const items = await Sandbox.list().nextItems()
    assert(Array.isArray(items), 'a listing')
  }
})

done()
