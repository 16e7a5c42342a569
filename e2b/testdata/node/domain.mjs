// E2B_DOMAIN alone (no E2B_API_URL, no E2B_SANDBOX_URL): the SDKs reach
// https://api.DOMAIN and https://PORT-ID.DOMAIN, and airlock routes by the
// Host. Wildcard DNS is stood in for by dns-shim.cjs.
import { Sandbox } from 'e2b'
import { check, done, assert, eq } from './lib.mjs'

await check('only E2B_DOMAIN is set', async () => {
  assert(process.env.E2B_DOMAIN && !process.env.E2B_API_URL && !process.env.E2B_SANDBOX_URL, 'the environment')
})

await check('create, run, write, read, a signed download by host, kill', async () => {
  const s = await Sandbox.create('base', { timeoutMs: 60_000 })
  eq((await s.commands.run('echo by-host')).stdout, 'by-host\n', 'stdout')
  await s.files.write('d.txt', 'domain routed')
  eq(await s.files.read('d.txt'), 'domain routed', 'read')
  const url = await s.downloadUrl('d.txt')
  assert(new URL(url).hostname === `49983-${s.sandboxId}.${process.env.E2B_DOMAIN}`, url)
  const res = await fetch(url)
  eq([res.status, await res.text()], [200, 'domain routed'], 'signed download')
  assert(await s.isRunning(), 'isRunning')
  assert(await s.kill(), 'kill')
})

done()
