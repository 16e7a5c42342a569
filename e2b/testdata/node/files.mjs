// envd's filesystem through the official SDK: write one and many, text
// and binary; read text, bytes and a stream; list, exists, getInfo,
// makeDir, remove, rename; signed URLs; the artifact filter on reads.
import { Sandbox, FileNotFoundError, SandboxError, InvalidArgumentError } from 'e2b'
import { check, done, assert, eq, rejects, isA, sleep } from './lib.mjs'

const sbx = await Sandbox.create('base', { timeoutMs: 300_000 })
// A 1x1 PNG.
const png = Uint8Array.from(Buffer.from('iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==', 'base64'))

await check('write and read text; relative paths lead to HOME', async () => {
  const info = await sbx.files.write('notes/hello.txt', 'hello, airlock\n')
  eq(info.name, 'hello.txt', 'name')
  eq(info.path, '/tmp/notes/hello.txt', 'path')
  eq(await sbx.files.read('/tmp/notes/hello.txt'), 'hello, airlock\n', 'read back')
  eq((await sbx.commands.run('cat notes/hello.txt')).stdout, 'hello, airlock\n', 'the code sees it at the same relative path')
})

await check('write and read binary (bytes, blob, stream)', async () => {
  await sbx.files.write('/workspace/output/pixel.png', png)
  const bytes = await sbx.files.read('/workspace/output/pixel.png', { format: 'bytes' })
  eq(Buffer.from(bytes).toString('base64'), Buffer.from(png).toString('base64'), 'bytes')
  const blob = await sbx.files.read('/workspace/output/pixel.png', { format: 'blob' })
  eq(blob.size, png.length, 'blob size')
  const stream = await sbx.files.read('/workspace/output/pixel.png', { format: 'stream' })
  const parts = []
  for await (const c of stream) parts.push(Buffer.from(c))
  eq(Buffer.concat(parts).toString('base64'), Buffer.from(png).toString('base64'), 'stream')
})

await check('write many files at once, into new folders', async () => {
  const res = await sbx.files.write([
    { path: '/tmp/many/a.txt', data: 'A' },
    { path: 'many/deep/b.csv', data: 'x,y\n1,2\n' },
    { path: '/workspace/input/c.json', data: '{"c": 3}' },
  ])
  eq(res.map((r) => r.path), ['/tmp/many/a.txt', '/tmp/many/deep/b.csv', '/workspace/input/c.json'], 'paths')
  eq((await sbx.commands.run('cat /tmp/many/a.txt /tmp/many/deep/b.csv /workspace/input/c.json')).stdout, 'Ax,y\n1,2\n{"c": 3}', 'contents')
})

await check('a file put in /workspace/input is read-only to the code', async () => {
  const r = await sbx.commands.run('{ echo x >> /workspace/input/c.json; } 2>&1; echo "status $?"')
  assert(/Read-only|Permission denied/.test(r.stdout) && /status 1/.test(r.stdout), r.stdout)
  eq(await sbx.files.read('/workspace/input/c.json'), '{"c": 3}', 'unchanged')
})

await check('write a stream and a gzip-encoded body (octet-stream uploads)', async () => {
  const s = new ReadableStream({ start(c) { c.enqueue(new TextEncoder().encode('streamed ')); c.enqueue(new TextEncoder().encode('body')); c.close() } })
  await sbx.files.write('streamed.txt', s)
  eq(await sbx.files.read('streamed.txt'), 'streamed body', 'streamed')
  await sbx.files.write('zipped.txt', 'gzip on the wire', { gzip: true })
  eq(await sbx.files.read('zipped.txt'), 'gzip on the wire', 'gzip')
})

await check('list: depth 1 and 2, entry types and sizes', async () => {
  const l1 = await sbx.files.list('/tmp/many')
  eq(l1.map((e) => [e.name, e.type]), [['a.txt', 'file'], ['deep', 'dir']], 'depth 1')
  const a = l1.find((e) => e.name === 'a.txt')
  eq(a.size, 1, 'size')
  eq(a.path, '/tmp/many/a.txt', 'path')
  assert(a.modifiedTime instanceof Date && !isNaN(a.modifiedTime), 'modified time')
  eq(a.owner, 'user', 'owner')
  const l2 = await sbx.files.list('/tmp/many', { depth: 2 })
  eq(l2.map((e) => e.path).sort(), ['/tmp/many/a.txt', '/tmp/many/deep', '/tmp/many/deep/b.csv'], 'depth 2')
})

await check('exists and getInfo', async () => {
  eq(await sbx.files.exists('/tmp/many/a.txt'), true, 'a file')
  eq(await sbx.files.exists('/tmp/many'), true, 'a folder')
  eq(await sbx.files.exists('/tmp/nothing-here'), false, 'nothing')
  const i = await sbx.files.getInfo('/tmp/many/deep/b.csv')
  eq([i.name, i.type, i.size], ['b.csv', 'file', 8], 'info')
  eq((await sbx.files.getInfo('/tmp/many')).type, 'dir', 'folder info')
  isA(await rejects(() => sbx.files.getInfo('/tmp/nothing-here')), FileNotFoundError, 'missing')
})

await check('makeDir: true, then false when it exists', async () => {
  eq(await sbx.files.makeDir('/tmp/made/deeper'), true, 'made')
  eq(await sbx.files.makeDir('/tmp/made/deeper'), false, 'exists')
  eq((await sbx.files.getInfo('/tmp/made/deeper')).type, 'dir', 'a folder')
})

await check('rename and remove', async () => {
  const e = await sbx.files.rename('/tmp/many/a.txt', '/tmp/many/renamed.txt')
  eq(e.path, '/tmp/many/renamed.txt', 'new path')
  eq(await sbx.files.exists('/tmp/many/a.txt'), false, 'old path gone')
  eq(await sbx.files.read('/tmp/many/renamed.txt'), 'A', 'content kept')
  await sbx.files.remove('/tmp/many')
  eq(await sbx.files.exists('/tmp/many'), false, 'folder removed with what it held')
  await sbx.files.remove('/tmp/many')
})

await check('reading a missing file is a FileNotFoundError', async () => {
  isA(await rejects(() => sbx.files.read('/tmp/none.txt')), FileNotFoundError, 'read')
})

await check('paths outside the sandbox\'s folders are refused', async () => {
  isA(await rejects(() => sbx.files.write('/etc/evil.txt', 'x')), SandboxError, 'write /etc')
  isA(await rejects(() => sbx.files.list('/')), InvalidArgumentError, 'list /')
  isA(await rejects(() => sbx.files.read('/tmp/../etc/passwd')), SandboxError, 'read /etc/passwd')
})

await check('reads pass the artifact filter: active HTML is sanitized, a shell script refused', async () => {
  await sbx.commands.run(`printf '<html><body><p>hi</p><script>alert(1)</script></body></html>' > /workspace/output/page.html`)
  const page = await sbx.files.read('/workspace/output/page.html')
  assert(page.includes('<p>hi</p>') && !page.includes('<script'), page)
  await sbx.commands.run(`printf '#!/bin/sh\\necho hi\\n' > /workspace/output/run.sh`)
  const err = await rejects(() => sbx.files.read('/workspace/output/run.sh'))
  assert(/artifact filter rejected/.test(err.message), err.message)
})

await check('signed download and upload URLs', async () => {
  await sbx.files.write('signed.txt', 'signed content')
  const url = await sbx.downloadUrl('signed.txt')
  assert(url.includes('signature='), url)
  const res = await fetch(url)
  eq(res.status, 200, 'download status')
  eq(await res.text(), 'signed content', 'downloaded')
  const bad = await fetch(url.replace('signed.txt', 'other.txt'))
  eq(bad.status, 401, 'the signature does not open another path')
  const up = await sbx.uploadUrl('uploaded.txt', { useSignatureExpiration: 60 })
  const form = new FormData()
  form.append('file', new Blob(['via signed url']), 'uploaded.txt')
  const ures = await fetch(up, { method: 'POST', body: form })
  eq(ures.status, 200, 'upload status')
  eq(await sbx.files.read('uploaded.txt'), 'via signed url', 'uploaded')
  const readUrl = await sbx.downloadUrl('uploaded.txt', { useSignatureExpiration: -10 })
  eq((await fetch(readUrl)).status, 401, 'an expired signature')
})

await check('watchDir: create, write, rename and remove events, recursive; the watcher is no listed command', async () => {
  await sbx.files.makeDir('/tmp/watched/sub')
  const events = []
  const handle = await sbx.files.watchDir('/tmp/watched', (e) => events.push(e), { recursive: true, timeoutMs: 0 })
  const listed = await sbx.commands.list()
  assert(!listed.some((p) => p.args.some((a) => a.includes('inotify'))), 'the watcher is listed: ' + JSON.stringify(listed))
  await sbx.files.write('/tmp/watched/new.txt', 'one')
  await sbx.commands.run('echo more >> /tmp/watched/new.txt; mv /tmp/watched/new.txt /tmp/watched/moved.txt; echo deep > /tmp/watched/sub/deep.txt; rm /tmp/watched/moved.txt')
  const want = [['new.txt', 'create'], ['new.txt', 'write'], ['new.txt', 'rename'], ['moved.txt', 'create'], ['sub/deep.txt', 'create'], ['moved.txt', 'remove']]
  for (let i = 0; i < 50 && !want.every(([n, t]) => events.some((e) => e.name === n && e.type === t)); i++) await sleep(100)
  await handle.stop()
  for (const [n, t] of want) assert(events.some((e) => e.name === n && e.type === t), `no ${t} of ${n} in ${JSON.stringify(events.map((e) => [e.name, e.type]))}`)
  const n = events.length
  await sbx.files.write('/tmp/watched/after-stop.txt', 'x')
  await sleep(300)
  eq(events.length, n, 'no events after stop')
})

await check('watchDir of a missing folder is a FileNotFoundError', async () => {
  isA(await rejects(() => sbx.files.watchDir('/tmp/no-such-folder', () => {})), FileNotFoundError, 'missing')
})

await sbx.kill()
done()
