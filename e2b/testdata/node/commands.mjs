// commands.run through the official SDK: foreground with envs, cwd, user,
// timeout and streaming; non-zero exits; background commands with wait,
// kill, sendStdin, closeStdin, list and connect(pid).
import { Sandbox, CommandExitError, TimeoutError, SandboxError } from 'e2b'
import { check, done, assert, eq, rejects, isA, sleep } from './lib.mjs'

const sbx = await Sandbox.create('base', { timeoutMs: 300_000, envs: { FROM_CREATE: 'c' } })

await check('run a command, stdout and exit code', async () => {
  const r = await sbx.commands.run('echo hello; echo oops >&2')
  eq(r.exitCode, 0, 'exit code')
  eq(r.stdout, 'hello\n', 'stdout')
  assert(r.stderr.includes('oops'), `stderr ${JSON.stringify(r.stderr)}`)
})

await check('node -v runs in the image', async () => {
  const r = await sbx.commands.run('node -v')
  assert(/^v\d+\./.test(r.stdout), r.stdout)
})

await check('envs: per command, on top of the sandbox\'s', async () => {
  const r = await sbx.commands.run('echo "$FROM_CREATE $FROM_RUN"', { envs: { FROM_RUN: 'r' } })
  eq(r.stdout, 'c r\n', 'stdout')
})

await check('cwd: the default is HOME, and cwd moves it', async () => {
  const home = (await sbx.commands.run('pwd')).stdout.trim()
  const h = (await sbx.commands.run('echo $HOME')).stdout.trim()
  eq(home, h, 'the default working folder is HOME')
  await sbx.files.makeDir('/tmp/work')
  eq((await sbx.commands.run('pwd', { cwd: '/tmp/work' })).stdout, '/tmp/work\n', 'cwd')
})

await check('user: "user" runs, "root" is refused', async () => {
  const r = await sbx.commands.run('id -u', { user: 'user' })
  eq(r.stdout.trim(), '1000', 'uid')
  const err = await rejects(() => sbx.commands.run('id -u', { user: 'root' }))
  isA(err, SandboxError, 'root')
  assert(/root/.test(err.message), err.message)
})

await check('a non-zero exit is a CommandExitError with the output', async () => {
  const err = await rejects(() => sbx.commands.run('echo out; echo err >&2; exit 3'))
  isA(err, CommandExitError, 'exit 3')
  eq(err.exitCode, 3, 'exit code')
  eq(err.stdout, 'out\n', 'stdout')
  assert(err.stderr.includes('err'), err.stderr)
  assert(/exit status 3/.test(err.error), err.error)
})

await check('timeoutMs kills a command that runs past it: TimeoutError', async () => {
  const t0 = Date.now()
  const err = await rejects(() => sbx.commands.run('sleep 30', { timeoutMs: 1500 }))
  isA(err, TimeoutError, 'timeout')
  const took = Date.now() - t0
  assert(took < 10_000, `took ${took} ms`)
  // The SDK gives up at its own timer; the kill on the server side lands
  // a moment later.
  let left
  for (let i = 0; i < 30; i++) {
    left = await sbx.commands.list()
    if (!left.some((p) => p.args.includes('sleep 30'))) break
    await sleep(100)
  }
  assert(!left.some((p) => p.args.includes('sleep 30')), 'the timed-out command is gone: ' + JSON.stringify(left))
})

await check('onStdout and onStderr stream output as it comes', async () => {
  const chunks = []
  const t0 = Date.now()
  const r = await sbx.commands.run('for i in 1 2 3; do echo out$i; echo err$i >&2; sleep 0.4; done', {
    onStdout: (d) => chunks.push(['out', d, Date.now() - t0]),
    onStderr: (d) => chunks.push(['err', d, Date.now() - t0]),
  })
  const outs = chunks.filter((c) => c[0] === 'out').map((c) => c[1]).join('')
  const errs = chunks.filter((c) => c[0] === 'err').map((c) => c[1]).join('')
  eq(outs, 'out1\nout2\nout3\n', 'stdout chunks')
  assert(errs.includes('err1') && errs.includes('err3'), errs)
  eq(r.stdout, outs, 'the result keeps stdout')
  // out1 is written 0.8 s and more before the command ends: streamed, it
  // arrives well before the answer.
  const first = chunks.find((c) => c[1].includes('out1'))[2]
  const end = Date.now() - t0
  assert(end - first >= 400, `out1 at ${first} ms, the command ended at ${end} ms: not streamed`)
})

await check('background: wait() returns the result', async () => {
  const h = await sbx.commands.run('sleep 0.5; echo bg done', { background: true })
  assert(h.pid > 0, `pid ${h.pid}`)
  const r = await h.wait()
  eq(r.stdout, 'bg done\n', 'stdout')
})

await check('background: list() shows it, kill() ends it, wait() throws', async () => {
  const h = await sbx.commands.run('sleep 60', { background: true, timeoutMs: 0 })
  const list = await sbx.commands.list()
  const p = list.find((x) => x.pid === h.pid)
  assert(p, `pid ${h.pid} in ${JSON.stringify(list)}`)
  eq(p.cmd, '/bin/bash', 'cmd')
  assert(p.args.includes('sleep 60'), JSON.stringify(p.args))
  eq(await h.kill(), true, 'kill')
  const err = await rejects(() => h.wait())
  isA(err, CommandExitError, 'wait after kill')
  assert(/killed/.test(err.error), err.error)
  eq(await sbx.commands.kill(h.pid), false, 'kill of an ended process')
  assert(!(await sbx.commands.list()).some((x) => x.pid === h.pid), 'gone from the list')
})

await check('background: sendStdin feeds it, closeStdin ends its input', async () => {
  const got = []
  const h = await sbx.commands.run('while read line; do echo "got $line"; done; echo eof', {
    background: true, stdin: true, onStdout: (d) => got.push(d),
  })
  await h.sendStdin('one\n')
  await sbx.commands.sendStdin(h.pid, 'two\n')
  await h.closeStdin()
  const r = await h.wait()
  eq(r.stdout, 'got one\ngot two\neof\n', 'stdout')
  eq(got.join(''), r.stdout, 'streamed')
})

await check('a command started without stdin refuses input', async () => {
  const h = await sbx.commands.run('sleep 5', { background: true })
  const err = await rejects(() => h.sendStdin('x'))
  assert(/stdin/.test(err.message), err.message)
  await h.kill()
})

await check('connect(pid) from another client follows the output, and a client that leaves does not kill it', async () => {
  const h = await sbx.commands.run('for i in $(seq 1 12); do echo tick$i; sleep 0.25; done', { background: true, timeoutMs: 0 })
  await h.disconnect()
  const other = await Sandbox.connect(sbx.sandboxId)
  const seen = []
  const h2 = await other.commands.connect(h.pid, { onStdout: (d) => seen.push(d) })
  eq(h2.pid, h.pid, 'pid')
  const r = await h2.wait()
  eq(r.exitCode, 0, 'exit code')
  assert(seen.join('').includes('tick12'), `seen ${JSON.stringify(seen)}`)
  const err = await rejects(() => other.commands.connect(h.pid))
  assert(err.name === 'NotFoundError' || /not found/i.test(err.message), `connect to an ended process: ${err}`)
})

await check('commands run as the unprivileged user with a read-only root', async () => {
  const r = await sbx.commands.run('touch /etc/x 2>&1; echo $?; touch /usr/x 2>&1; echo $?')
  assert(/Read-only file system|Permission denied/.test(r.stdout), r.stdout)
})

await sbx.kill()
done()
