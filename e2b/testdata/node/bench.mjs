// Sandbox.create() + commands.run('node -v') through the official E2B
// SDK, beside the same through airlock's own API (v1 over HTTP: create a
// session, exec node -v), sequential and in a burst, in one run. Prints
// one JSON line per series and a table; BENCH_N sets the count (100).
import { Sandbox } from 'e2b'

const N = Number(process.env.BENCH_N || 100)
const url = process.env.AIRLOCK_URL
const key = process.env.E2B_API_KEY

async function v1(method, path, body) {
  const res = await fetch(`${url}${path}`, {
    method, headers: { Authorization: `Bearer ${key}`, 'Content-Type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  })
  const text = await res.text()
  if (!res.ok) throw new Error(`${method} ${path}: ${res.status} ${text}`)
  return text ? JSON.parse(text) : undefined
}

// One create + node -v; returns the sandbox for killing after the clock.
const ops = {
  async e2b() {
    const s = await Sandbox.create('base', { timeoutMs: 600_000 })
    const r = await s.commands.run('node -v')
    if (!r.stdout.startsWith('v')) throw new Error(`node -v: ${r.stdout}`)
    return () => s.kill()
  },
  v1: () => viaV1(['node', '-v']),
  // The command as the SDK sends it (a login shell), through v1: what of
  // the difference is the shell's.
  'v1-login': () => viaV1(['/bin/bash', '-l', '-c', 'node -v']),
}

async function viaV1(cmd) {
  const s = await v1('POST', '/v1/sessions', { image: 'python', ttl_seconds: 600 })
  const r = await v1('POST', `/v1/sessions/${s.id}/exec`, { cmd })
  if (r.exit_code !== 0 || !r.stdout.startsWith('v')) throw new Error(`node -v: ${JSON.stringify(r)}`)
  return () => v1('DELETE', `/v1/sessions/${s.id}`)
}

function stats(ms) {
  const s = [...ms].sort((a, b) => a - b)
  const q = (p) => s[Math.min(s.length - 1, Math.floor(p * s.length))]
  return { n: s.length, mean: s.reduce((a, b) => a + b, 0) / s.length, p50: q(0.5), p95: q(0.95), max: s[s.length - 1] }
}

async function sequential(name) {
  const ms = []
  const t0 = performance.now()
  for (let i = 0; i < N; i++) {
    const t = performance.now()
    const kill = await ops[name]()
    ms.push(performance.now() - t)
    await kill()
  }
  return { series: `${name} sequential`, wall: performance.now() - t0, ...stats(ms) }
}

async function burst(name) {
  const t0 = performance.now()
  const runs = await Promise.all(Array.from({ length: N }, async () => {
    const t = performance.now()
    const kill = await ops[name]()
    return { ms: performance.now() - t, kill }
  }))
  const wall = performance.now() - t0
  await Promise.all(runs.map((r) => r.kill()))
  return { series: `${name} burst`, wall, ...stats(runs.map((r) => r.ms)) }
}

// Warm up both paths once (first image load, first connections).
for (const name of ['v1', 'e2b']) await (await ops[name]())()
const rows = []
for (const run of [() => sequential('v1'), () => sequential('e2b'), () => burst('v1'), () => burst('e2b'), () => burst('v1-login')]) {
  const r = await run()
  rows.push(r)
  console.log(JSON.stringify(r))
}
const base = Object.fromEntries(rows.filter((r) => r.series.startsWith('v1 ')).map((r) => [r.series.split(' ')[1], r]))
console.log(`\n| series | n | p50 ms | p95 ms | mean ms | wall s | p50 / v1 | wall / v1 |`)
console.log(`| --- | --- | --- | --- | --- | --- | --- | --- |`)
for (const r of rows) {
  const b = base[r.series.split(' ')[1]]
  console.log(`| ${r.series} | ${r.n} | ${r.p50.toFixed(0)} | ${r.p95.toFixed(0)} | ${r.mean.toFixed(0)} | ${(r.wall / 1000).toFixed(1)} | ${(r.p50 / b.p50).toFixed(2)} | ${(r.wall / b.wall).toFixed(2)} |`)
}
