// A sandbox id alone opens nothing: every envd and code interpreter
// request needs the sandbox's own token (or its tenant's key), and the
// control plane shows a tenant only its own sandboxes.
import { Sandbox, NotFoundError, AuthenticationError } from 'e2b'
import { Sandbox as CodeSandbox } from '@e2b/code-interpreter'
import { randomBytes } from 'node:crypto'
import { check, done, assert, eq, rejects, isA, env } from './lib.mjs'

const alice = await CodeSandbox.create({ apiKey: env.alice, timeoutMs: 120_000 })
const bob = await Sandbox.create('base', { apiKey: env.bob, timeoutMs: 120_000 })
await alice.files.write('secret.txt', 'alice only')
const guessed = randomBytes(16).toString('hex')

// raw sends one request to a sandbox's port with the given credentials.
async function raw(id, port, path, { token, key, traffic, body, method = 'POST', rpc = true } = {}) {
  const headers = { 'E2b-Sandbox-Id': id, 'E2b-Sandbox-Port': String(port) }
  if (rpc) Object.assign(headers, { 'Content-Type': 'application/json', 'Connect-Protocol-Version': '1' })
  if (token) headers['X-Access-Token'] = token
  if (traffic) headers['E2B-Traffic-Access-Token'] = traffic
  if (key) headers['X-API-KEY'] = key
  const res = await fetch(`${env.url}${path}`, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) })
  return { status: res.status, text: await res.text() }
}

const listDir = (id, creds) => raw(id, 49983, '/filesystem.Filesystem/ListDir', { ...creds, body: { path: '/tmp', depth: 1 } })
const readFile = (id, creds) => raw(id, 49983, '/files?path=/tmp/secret.txt', { ...creds, method: 'GET', rpc: false })
const execute = (id, creds) => raw(id, 49999, '/execute', { ...creds, rpc: false, body: { code: 'print(1)' } })
const contexts = (id, creds) => raw(id, 49999, '/contexts', { ...creds, rpc: false, method: 'GET' })

await check('with its own token, alice reaches her sandbox', async () => {
  const r = await listDir(alice.sandboxId, { token: alice.envdAccessToken })
  eq(r.status, 200, r.text)
  assert(r.text.includes('secret.txt'), r.text)
  const f = await readFile(alice.sandboxId, { token: alice.envdAccessToken })
  eq([f.status, f.text], [200, 'alice only'], 'file')
})

for (const [what, call] of [['envd rpc', listDir], ['envd file', readFile], ['code interpreter execute', execute], ['code interpreter contexts', contexts]]) {
  await check(`${what}: no credentials, another sandbox's token, a guessed id: all refused, nothing leaks`, async () => {
    const cases = [
      ['no credentials', await call(alice.sandboxId, {})],
      ['bob\'s token on alice\'s id', await call(alice.sandboxId, { token: bob.envdAccessToken })],
      ['bob\'s token as traffic token on alice\'s id', await call(alice.sandboxId, { traffic: bob.envdAccessToken })],
      ['alice\'s token on a guessed id', await call(guessed, { token: alice.envdAccessToken })],
      ['no credentials on a guessed id', await call(guessed, {})],
      ['a made-up token', await call(alice.sandboxId, { token: randomBytes(32).toString('hex') })],
    ]
    for (const [name, r] of cases) {
      eq(r.status, 401, `${name}: ${r.text}`)
      assert(!r.text.includes('alice only') && !r.text.includes('secret.txt'), `${name} leaked: ${r.text}`)
    }
    const bobKey = await call(alice.sandboxId, { key: env.bob })
    eq(bobKey.status, 404, `bob's API key on alice's id: ${bobKey.text}`)
    const bobKeyGuess = await call(guessed, { key: env.bob })
    eq(bobKeyGuess.status, 404, `bob's API key on a guessed id answers the same: ${bobKeyGuess.text}`)
  })
}

await check('an API key of the sandbox\'s tenant reaches it', async () => {
  eq((await listDir(alice.sandboxId, { key: env.alice })).status, 200, 'alice\'s key')
})

await check('the SDK with another tenant\'s key: connect, getInfo, kill, setTimeout find nothing', async () => {
  isA(await rejects(() => Sandbox.connect(alice.sandboxId, { apiKey: env.bob })), NotFoundError, 'connect')
  isA(await rejects(() => Sandbox.getInfo(alice.sandboxId, { apiKey: env.bob })), NotFoundError, 'getInfo')
  isA(await rejects(() => Sandbox.setTimeout(alice.sandboxId, 5000, { apiKey: env.bob })), NotFoundError, 'setTimeout')
  eq(await Sandbox.kill(alice.sandboxId, { apiKey: env.bob }), false, 'kill')
  const bobs = await Sandbox.list({ apiKey: env.bob }).nextItems()
  eq(bobs.map((s) => s.sandboxId), [bob.sandboxId], 'bob lists only his')
  assert(await alice.isRunning(), 'alice\'s sandbox still runs')
})

await check('a sandbox token is no API key, and a sandbox connected with a stolen id alone gets nowhere', async () => {
  isA(await rejects(() => Sandbox.list({ apiKey: alice.envdAccessToken }).nextItems()), AuthenticationError, 'token as API key')
  // A client that knows only the id (no connect through the control
  // plane) has no token: its envd calls are refused.
  const forged = new Sandbox({ sandboxId: alice.sandboxId, envdVersion: '0.5.7', sandboxUrl: env.url, apiKey: env.bob })
  isA(await rejects(() => forged.files.read('secret.txt')), AuthenticationError, 'read without a token')
  isA(await rejects(() => forged.commands.run('cat secret.txt')), AuthenticationError, 'run without a token')
})

await check('a killed sandbox\'s token opens nothing more', async () => {
  const tmp = await Sandbox.create('base', { apiKey: env.alice, timeoutMs: 60_000 })
  await tmp.kill()
  const r = await listDir(tmp.sandboxId, { token: tmp.envdAccessToken })
  eq(r.status, 502, r.text)
  eq(await tmp.isRunning(), false, 'isRunning')
})

await alice.kill()
await bob.kill()
done()
