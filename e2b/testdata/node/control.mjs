// The control plane through the official SDK: create, connect, list with
// paging, setTimeout, getInfo, kill, and the errors it maps.
import { Sandbox, NotFoundError, SandboxNotFoundError, AuthenticationError, SandboxError } from 'e2b'
import { Sandbox as CodeSandbox } from '@e2b/code-interpreter'
import { check, done, assert, eq, rejects, isA, env, v1 } from './lib.mjs'

let sbx
await check('Sandbox.create() with the base template, timeout, envs and metadata', async () => {
  sbx = await Sandbox.create('base', { timeoutMs: 120_000, envs: { GREETING: 'hello from create' }, metadata: { suite: 'control', run: '1' } })
  assert(/^[0-9a-f]{32}$/.test(sbx.sandboxId), `sandbox id ${sbx.sandboxId}`)
  const r = await sbx.commands.run('echo "$GREETING"')
  eq(r.stdout.trim(), 'hello from create', 'the sandbox env var')
})

await check('getInfo: template, metadata, state, times, limits', async () => {
  const info = await sbx.getInfo()
  eq(info.sandboxId, sbx.sandboxId, 'id')
  eq(info.templateId, 'base', 'template')
  eq(info.metadata, { suite: 'control', run: '1' }, 'metadata')
  eq(info.state, 'running', 'state')
  const life = info.endAt - info.startedAt
  assert(life > 100_000 && life < 140_000, `endAt - startedAt = ${life} ms, want about 120 s`)
  assert(info.cpuCount >= 1 && info.memoryMB >= 16, `cpu ${info.cpuCount}, memory ${info.memoryMB}`)
  assert(/^\d+\.\d+\.\d+$/.test(info.envdVersion), `envd version ${info.envdVersion}`)
})

await check('setTimeout moves endAt', async () => {
  await sbx.setTimeout(600_000)
  const info = await sbx.getInfo()
  const left = info.endAt - Date.now()
  assert(left > 550_000 && left < 650_000, `${left} ms left, want about 600 s`)
  await sbx.setTimeout(60_000)
  const left2 = (await sbx.getInfo()).endAt - Date.now()
  assert(left2 > 40_000 && left2 < 70_000, `${left2} ms left after shortening, want about 60 s`)
})

await check('Sandbox.connect(id) reaches the same sandbox', async () => {
  await sbx.files.write('connect-marker.txt', 'same sandbox')
  const again = await Sandbox.connect(sbx.sandboxId)
  eq(again.sandboxId, sbx.sandboxId, 'id')
  eq(await again.files.read('connect-marker.txt'), 'same sandbox', 'the file written before')
  assert(await again.isRunning(), 'isRunning')
})

await check('the code-interpreter-v1 template', async () => {
  const c = await CodeSandbox.create({ timeoutMs: 60_000, metadata: { suite: 'control', run: '2' } })
  const info = await c.getInfo()
  eq(info.templateId, 'code-interpreter-v1', 'template')
  const r = await c.commands.run('python3 -c "import pandas; print(pandas.__name__)"')
  eq(r.stdout.trim(), 'pandas', 'pandas in the image')
  await c.kill()
})

await check('an unknown template is refused', async () => {
  const err = await rejects(() => Sandbox.create('no-such-template', { timeoutMs: 30_000 }))
  isA(err, SandboxError, 'unknown template')
  assert(/not found/.test(err.message), err.message)
})

const extra = []
await check('Sandbox.list() pages with limit and nextToken, and filters by metadata', async () => {
  for (let i = 0; i < 3; i++) extra.push(await Sandbox.create('base', { timeoutMs: 60_000, metadata: { suite: 'control', page: 'yes' } }))
  const seen = []
  const pager = Sandbox.list({ limit: 2, query: { metadata: { page: 'yes' } } })
  let pages = 0
  while (pager.hasNext) {
    const items = await pager.nextItems()
    pages++
    assert(items.length <= 2, `page of ${items.length}`)
    for (const it of items) {
      eq(it.state, 'running', 'state')
      eq(it.metadata.page, 'yes', 'metadata')
      seen.push(it.sandboxId)
    }
  }
  eq(pages, 2, 'pages')
  eq(seen.sort(), extra.map((s) => s.sandboxId).sort(), 'the listed sandboxes')
  const all = await Sandbox.list().nextItems()
  assert(all.some((s) => s.sandboxId === sbx.sandboxId), 'the first sandbox in the full listing')
  const paused = await Sandbox.list({ query: { state: ['paused'] } }).nextItems()
  eq(paused.length, 0, 'paused sandboxes')
})

await check('a sandbox made through E2B is a v1 session, and a v1 session is an E2B sandbox', async () => {
  const got = await v1('GET', `/v1/sessions/${sbx.sandboxId}`, env.alice)
  eq(got.status, 200, 'v1 GET of the E2B sandbox')
  eq(got.body.metadata.suite, 'control', 'its metadata')
  const made = await v1('POST', '/v1/sessions', env.alice, { image: 'python', ttl_seconds: 60, metadata: { via: 'v1' } })
  eq(made.status, 201, 'v1 create')
  const s = await Sandbox.connect(made.body.id)
  const r = await s.commands.run('echo through e2b')
  eq(r.stdout, 'through e2b\n', 'a command in the v1 session')
  const info = await s.getInfo()
  eq(info.templateId, 'python', 'a v1 session shows its image as the template')
  eq(info.metadata, { via: 'v1' }, 'metadata')
  assert(await s.kill(), 'kill the v1 session through E2B')
  eq((await v1('GET', `/v1/sessions/${made.body.id}`, env.alice)).status, 410, 'v1 sees it ended')
})

await check('the audit log of the tenant records the E2B sandbox and its commands', async () => {
  await sbx.commands.run('echo audited-command')
  // the server's audit recorder writes after the call has answered: read
  // the log until the command's record is there, for up to 30 s
  let mine = []
  for (const deadline = Date.now() + 30000; ;) {
    const recs = []
    for (let after = 0; ;) {
      const page = await v1('GET', `/v1/audit?after=${after}&limit=1000`, env.alice)
      eq(page.status, 200, 'v1 audit')
      recs.push(...page.body.records)
      if (!page.body.next) break
      after = page.body.next
    }
    mine = recs.filter((r) => r.session === sbx.sandboxId)
    if (mine.some((r) => r.kind === 'exec' && r.what.includes('audited-command')) || Date.now() > deadline) break
    await new Promise((done) => setTimeout(done, 200))
  }
  assert(mine.some((r) => r.kind === 'session_created'), 'session_created: ' + JSON.stringify(mine.map((r) => r.kind)))
  assert(mine.some((r) => r.kind === 'exec' && r.what.includes('audited-command')), 'the command: ' + JSON.stringify(mine.map((r) => r.what)))
  const bobs = await v1('GET', '/v1/audit?limit=1000', env.bob)
  assert(!bobs.body.records.some((r) => r.session === sbx.sandboxId), 'bob does not see alice\'s records')
})

await check('kill: true, then false; getInfo and connect of a killed sandbox are NotFound', async () => {
  eq(await Sandbox.kill(sbx.sandboxId), true, 'first kill')
  eq(await Sandbox.kill(sbx.sandboxId), false, 'second kill')
  isA(await rejects(() => Sandbox.getInfo(sbx.sandboxId)), SandboxNotFoundError, 'getInfo')
  isA(await rejects(() => Sandbox.connect(sbx.sandboxId)), NotFoundError, 'connect')
  isA(await rejects(() => Sandbox.setTimeout(sbx.sandboxId, 10_000)), NotFoundError, 'setTimeout')
  eq(await sbx.isRunning(), false, 'isRunning of the killed sandbox')
})

await check('a wrong API key is an AuthenticationError', async () => {
  isA(await rejects(() => Sandbox.create('base', { apiKey: 'not-a-key-of-this-server' })), AuthenticationError, 'create')
  isA(await rejects(() => Sandbox.list({ apiKey: 'not-a-key-of-this-server' }).nextItems()), AuthenticationError, 'list')
})

await check('features airlock lacks are refused clearly', async () => {
  const err = await rejects(() => Sandbox.create('base', { allowInternetAccess: true }))
  assert(/allowOut/.test(err.message), err.message)
  const err2 = await rejects(() => Sandbox.create('base', { lifecycle: { onTimeout: 'pause' } }))
  assert(/pause/.test(err2.message), err2.message)
})

await check('network.allowOut becomes the egress allowlist', async () => {
  const s = await Sandbox.create('base', { timeoutMs: 60_000, network: { allowOut: ['example.com'], denyOut: ['0.0.0.0/0'] } })
  const got = await v1('GET', `/v1/sessions/${s.sandboxId}`, env.alice)
  eq(got.status, 200, 'v1 GET')
  const r = await s.commands.run('echo "$HTTPS_PROXY$https_proxy"')
  assert(r.stdout.includes('127.0.0.1:3128'), `the proxy variables: ${r.stdout}`)
  await s.kill()
})

for (const s of extra) await s.kill()
done()
