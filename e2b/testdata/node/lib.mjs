// The checks of the SDK programs: each prints "ok - NAME" or
// "not ok - NAME: WHY", and the Go test fails on any "not ok".
let passed = 0
let failed = 0

export async function check(name, fn) {
  try {
    await fn()
    passed++
    console.log(`ok - ${name}`)
  } catch (err) {
    failed++
    const why = (err && err.stack) ? err.stack.split('\n').slice(0, 4).join(' | ') : String(err)
    console.log(`not ok - ${name}: ${why}`)
  }
}

export function done() {
  console.log(`# ${passed} passed, ${failed} failed`)
  process.exitCode = failed > 0 ? 1 : 0
}

export function assert(cond, msg) {
  if (!cond) throw new Error(msg || 'assertion failed')
}

// canon renders a value as JSON with object keys sorted.
function canon(v) {
  return JSON.stringify(v, (k, x) => (x && typeof x === 'object' && !Array.isArray(x) && !(x instanceof Uint8Array))
    ? Object.fromEntries(Object.keys(x).sort().map((key) => [key, x[key]])) : x)
}

export function eq(got, want, msg) {
  const g = canon(got)
  const w = canon(want)
  if (g !== w) throw new Error(`${msg || 'value'}: got ${g}, want ${w}`)
}

// rejects runs fn and returns what it threw, failing when it did not.
export async function rejects(fn, msg) {
  try {
    await fn()
  } catch (err) {
    return err
  }
  throw new Error(`${msg || 'call'}: did not throw`)
}

export function isA(err, cls, msg) {
  if (!(err instanceof cls)) {
    throw new Error(`${msg || 'error'}: got ${err && err.constructor && err.constructor.name}: ${err && err.message}, want ${cls.name}`)
  }
}

export const env = {
  url: process.env.AIRLOCK_URL,
  alice: process.env.ALICE_KEY,
  bob: process.env.BOB_KEY,
}

// v1 calls airlock's own API with a tenant's key.
export async function v1(method, path, key, body) {
  const res = await fetch(`${env.url}${path}`, {
    method,
    headers: { Authorization: `Bearer ${key}`, 'Content-Type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  })
  const text = await res.text()
  let json
  try { json = JSON.parse(text) } catch { json = text }
  return { status: res.status, body: json }
}

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms))
