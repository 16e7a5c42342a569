// The SDKs over HTTPS, trusting the server's certificate
// (NODE_EXTRA_CA_CERTS), as a user of airlock serve --tls-cert would.
import { Sandbox } from 'e2b'
import { check, done, assert, eq } from './lib.mjs'

await check('E2B_API_URL and E2B_SANDBOX_URL are https', async () => {
  assert(process.env.E2B_API_URL.startsWith('https://') && process.env.E2B_SANDBOX_URL.startsWith('https://'), process.env.E2B_API_URL)
})

await check('create, run, write, read and kill over HTTPS', async () => {
  const s = await Sandbox.create('base', { timeoutMs: 60_000 })
  const out = []
  const r = await s.commands.run('echo over; echo tls', { onStdout: (d) => out.push(d) })
  eq(r.stdout, 'over\ntls\n', 'stdout')
  eq(out.join(''), r.stdout, 'streamed')
  await s.files.write('t.txt', 'secret over the wire')
  eq(await s.files.read('t.txt'), 'secret over the wire', 'read')
  assert(await s.kill(), 'kill')
})

done()
