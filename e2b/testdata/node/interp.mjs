// The code interpreter through the official @e2b/code-interpreter SDK:
// runCode in Python and JavaScript with streaming, results with text,
// html, png and json, errors, execution counts, and code contexts.
import { Sandbox } from '@e2b/code-interpreter'
import { TimeoutError } from 'e2b'
import { check, done, assert, eq, rejects, isA } from './lib.mjs'

const sbx = await Sandbox.create({ timeoutMs: 300_000 })

await check('runCode: the value of the last expression, and the execution count', async () => {
  const a = await sbx.runCode('x = 20\nx + 1')
  eq(a.text, '21', 'text')
  eq(a.results.length, 1, 'one result')
  assert(a.results[0].isMainResult, 'the main result')
  eq(a.error, undefined, 'no error')
  const b = await sbx.runCode('x * 2')
  eq(b.text, '40', 'state kept between calls')
  assert(b.executionCount === a.executionCount + 1, `counts ${a.executionCount}, ${b.executionCount}`)
})

await check('stdout and stderr stream as they come', async () => {
  const seen = []
  const t0 = Date.now()
  const ex = await sbx.runCode('import sys, time\nfor i in range(3):\n    print("line", i, flush=True)\n    time.sleep(0.4)\nprint("oops", file=sys.stderr)', {
    onStdout: (m) => seen.push(['out', m.line, Date.now() - t0]),
    onStderr: (m) => seen.push(['err', m.line, Date.now() - t0]),
  })
  const end = Date.now() - t0
  const outs = seen.filter((s) => s[0] === 'out')
  eq(outs.map((s) => s[1]).join(''), 'line 0\nline 1\nline 2\n', 'stdout')
  // line 0 is printed 0.8 s before the cell ends: streamed, it arrives
  // well before the answer.
  assert(end - outs[0][2] >= 400, `not streamed: ${JSON.stringify(seen)}, the call ended at ${end} ms`)
  eq(ex.logs.stdout.join(''), 'line 0\nline 1\nline 2\n', 'logs.stdout')
  assert(ex.logs.stderr.join('').includes('oops'), 'logs.stderr')
})

await check('non-ASCII text arrives whole', async () => {
  const ex = await sbx.runCode('print("héllo → 世界 🙂")\n"ünïcode ✓"')
  eq(ex.logs.stdout.join(''), 'héllo → 世界 🙂\n', 'stdout')
  eq(ex.text, "'ünïcode ✓'", 'result')
})

await check('errors: name, value, traceback', async () => {
  const seen = []
  const ex = await sbx.runCode('def f():\n    return 1 / 0\nf()', { onError: (e) => seen.push(e) })
  assert(ex.error, 'an error')
  eq(ex.error.name, 'ZeroDivisionError', 'name')
  eq(ex.error.value, 'division by zero', 'value')
  assert(typeof ex.error.traceback === 'string' && ex.error.traceback.includes('ZeroDivisionError'), `traceback ${ex.error.traceback}`)
  eq(seen.length, 1, 'onError')
})

await check('results: html, json, png (matplotlib), with display() beside the main result', async () => {
  const h = await sbx.runCode('from IPython.display import HTML, display\ndisplay(HTML("<b>bold</b>"))\n42')
  const disp = h.results.find((r) => !r.isMainResult)
  assert(disp && disp.html && disp.html.includes('<b>bold</b>'), 'html display: ' + JSON.stringify(h))
  eq(h.text, '42', 'main result beside it')
  const j = await sbx.runCode('from IPython.display import JSON\nJSON({"a": [1, 2], "b": "c"})')
  const jr = j.results.find((r) => r.json)
  assert(jr, 'json result: ' + JSON.stringify(j.results))
  eq(jr.json, { a: [1, 2], b: 'c' }, 'json')
  const p = await sbx.runCode('import matplotlib.pyplot as plt\nplt.plot([1, 3, 2])\nplt.title("t")\nplt.show()')
  const pr = p.results.find((r) => r.png)
  assert(pr, 'png result: ' + JSON.stringify(p.results.map((r) => r.formats())))
  eq(Buffer.from(pr.png, 'base64').subarray(0, 8).toString('hex'), '89504e470d0a1a0a', 'a PNG')
})

await check('JavaScript: the last value, console output, state', async () => {
  const seen = []
  const a = await sbx.runCode('const n = 40; console.log("from js"); n + 2', { language: 'js', onStdout: (m) => seen.push(m.line) })
  eq(a.text, '42', 'text')
  assert(seen.join('').includes('from js'), 'stdout ' + JSON.stringify(seen))
  const b = await sbx.runCode('n * 2', { language: 'javascript' })
  eq(b.text, '80', 'state kept')
  const c = await sbx.runCode('throw new TypeError("bad thing")', { language: 'js' })
  eq(c.error && c.error.name, 'TypeError', 'error name')
  assert(c.error.value.includes('bad thing'), c.error.value)
})

await check('code contexts: create, list, run apart, restart, remove', async () => {
  const ctx = await sbx.createCodeContext({ language: 'python', cwd: '/tmp' })
  assert(ctx.id, 'an id')
  eq(ctx.language, 'python', 'language')
  eq(ctx.cwd, '/tmp', 'cwd')
  await sbx.runCode('secret = "in ctx"', { context: ctx })
  eq((await sbx.runCode('secret', { context: ctx })).text, "'in ctx'", 'state in the context')
  eq((await sbx.runCode('import os; os.getcwd()', { context: ctx })).text, "'/tmp'", 'cwd')
  const other = await sbx.runCode('secret')
  eq(other.error && other.error.name, 'NameError', 'the default context does not see it')
  const list = await sbx.listCodeContexts()
  assert(list.some((c) => c.id === ctx.id), 'listed: ' + JSON.stringify(list))
  const before = (await sbx.runCode('1', { context: ctx })).executionCount
  await sbx.restartCodeContext(ctx)
  const after = await sbx.runCode('secret', { context: ctx })
  eq(after.error && after.error.name, 'NameError', 'state gone after restart')
  assert(after.executionCount <= before, `count after restart ${after.executionCount}, before ${before}`)
  await sbx.removeCodeContext(ctx.id)
  assert(!(await sbx.listCodeContexts()).some((c) => c.id === ctx.id), 'removed')
  const gone = await rejects(() => sbx.runCode('1', { context: ctx }))
  assert(/not found|404/i.test(gone.message), gone.message)
})

await check('envs of one runCode', async () => {
  const ex = await sbx.runCode('import os\nos.environ.get("ONLY_HERE")', { envs: { ONLY_HERE: 'yes' } })
  eq(ex.text, "'yes'", 'set for the call')
})

await check('timeoutMs: TimeoutError, and the context goes on', async () => {
  isA(await rejects(() => sbx.runCode('import time\ntime.sleep(30)', { timeoutMs: 1500 })), TimeoutError, 'timeout')
  const ex = await sbx.runCode('x + 1')
  eq(ex.text, '21', 'state survives the interrupt')
})

await sbx.kill()
done()
