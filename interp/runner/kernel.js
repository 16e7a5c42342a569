// airlock interp: the node kernel of a javascript context.
//
// runner.py starts it as `node --expose-internals -e <this source>
// airlock-interp-node <config JSON>` with fds 1 and 2 on the runner's
// output pipes, a request pipe and a message pipe. Code runs in one
// persistent vm context: top-level var, let, const, function and class
// declarations persist between calls, as in node's REPL (and, as there, a
// let or const cannot be declared twice). The value of the last expression
// is the result, shown with util.inspect; plain objects and arrays also
// as application/json. Top-level await goes through node's own REPL
// rewriting (internal/repl/await) where it is there.
'use strict';

const fs = require('fs');
const net = require('net');
const util = require('util');
const vm = require('vm');

const cfg = JSON.parse(process.argv[process.argv.length - 1]);
const LIMIT = cfg.output_limit;

let processTopLevelAwait = null;
try {
  ({ processTopLevelAwait } = require('internal/repl/await'));
} catch (e) {
  // without it, code with top-level await is wrapped in an async function
}

function send(obj) {
  let b = Buffer.from(JSON.stringify(obj), 'utf8');
  if (b.length > cfg.frame_limit) {
    b = Buffer.from(JSON.stringify({ type: obj.type, data: { 'text/plain': '[airlock: left out: over the frame limit]' },
      name: obj.name, value: obj.value && String(obj.value).slice(0, 4096), traceback: [] }), 'utf8');
  }
  const h = Buffer.alloc(4);
  h.writeUInt32BE(b.length, 0);
  const all = Buffer.concat([h, b]);
  let off = 0;
  while (off < all.length) {
    try {
      off += fs.writeSync(cfg.msg, all, off, all.length - off);
    } catch (e) {
      if (e.code !== 'EAGAIN') throw e;
    }
  }
}

function clip(s, n) {
  return s.length > n ? s.slice(0, n) + '…' : s;
}

function isPlainData(v) {
  if (v === null || typeof v !== 'object') return false;
  if (Array.isArray(v)) return true;
  const p = Object.getPrototypeOf(v);
  return p === null || Object.getPrototypeOf(p) === null;
}

// bundle makes the MIME bundle of a value.
function bundle(v) {
  const data = { 'text/plain': clip(util.inspect(v, { depth: 4, maxArrayLength: 200, maxStringLength: 100000, breakLength: 100 }), LIMIT) };
  if (isPlainData(v)) {
    try {
      const j = JSON.stringify(v);
      if (j !== undefined && j.length <= LIMIT) data['application/json'] = j;
    } catch (e) {
      // cycles and BigInts have no JSON form
    }
  }
  return data;
}

// display sends one display event; display.html, .png (base64 or a
// Buffer), .svg, .markdown and .json send one of that type.
function display(...values) {
  for (const v of values) send({ type: 'display', data: bundle(v) });
}
const raw = (mime) => (v) => {
  let s = v;
  if (Buffer.isBuffer(v) || v instanceof Uint8Array) s = Buffer.from(v).toString(mime.startsWith('image/png') || mime === 'image/jpeg' ? 'base64' : 'utf8');
  if (mime === 'application/json' && typeof s !== 'string') s = JSON.stringify(s);
  send({ type: 'display', data: { [mime]: String(s), 'text/plain': `<${mime}>` } });
};
display.html = raw('text/html');
display.png = raw('image/png');
display.jpeg = raw('image/jpeg');
display.svg = raw('image/svg+xml');
display.markdown = raw('text/markdown');
display.json = raw('application/json');

// The context's global object: node's globals (process, Buffer, timers,
// fetch…) on top of the context's own built-ins, plus require and display.
// The context's own built-ins (Object, Array, Promise…) are left alone, so
// that literals and instanceof agree inside.
const sandbox = { require, module, exports: module.exports, __filename: '[cell]', __dirname: process.cwd(), display, console };
const context = vm.createContext(sandbox, { name: 'airlock' });
vm.runInContext('globalThis.global = globalThis;', context);
const builtinNames = new Set(vm.runInContext('Object.getOwnPropertyNames(globalThis)', context));
for (const k of Object.getOwnPropertyNames(globalThis)) {
  if (builtinNames.has(k) || k in sandbox || k === 'globalThis' || k === 'global') continue;
  const d = Object.getOwnPropertyDescriptor(globalThis, k);
  if (d) Object.defineProperty(sandbox, k, d);
}

let current = null; // { interrupt } of the call awaiting a promise

function errorOf(e) {
  if (e && e.code === 'ERR_SCRIPT_EXECUTION_INTERRUPTED') {
    return { type: 'error', name: 'Interrupted', value: 'Script execution interrupted.', traceback: [] };
  }
  const isErr = e !== null && typeof e === 'object' && typeof e.stack === 'string';
  const name = isErr ? String(e.name || 'Error') : typeof e === 'object' ? 'Error' : 'Thrown';
  const value = isErr ? String(e.message) : util.inspect(e);
  let tb = [];
  if (isErr) {
    // the kernel's own frames and node's are not the code's
    tb = e.stack.split('\n').filter((l) => !/^\s+at /.test(l) || !/\[eval\]|\(node:|^\s+at node:|evalmachine\./.test(l));
  }
  return { type: 'error', name, value: clip(value, 65536), traceback: tb.slice(0, 200) };
}

async function run(req) {
  const filename = req.silent ? '<preload>' : `<cell-${req.count}>`;
  let script;
  let wrapped = false;
  try {
    script = new vm.Script(req.code, { filename });
  } catch (e) {
    if (!(e instanceof SyntaxError) || !/\bawait\b/.test(req.code)) throw e;
    let w = processTopLevelAwait ? processTopLevelAwait(req.code) : null;
    if (w === null && !processTopLevelAwait) w = `(async () => { ${req.code}\n })()`;
    if (w === null) throw e;
    script = new vm.Script(w, { filename });
    wrapped = true;
  }
  let value = script.runInContext(context, { breakOnSigint: true, displayErrors: false });
  if (wrapped) {
    value = await new Promise((resolve, reject) => {
      current = { interrupt: () => reject(Object.assign(new Error('interrupted'), { code: 'ERR_SCRIPT_EXECUTION_INTERRUPTED' })) };
      Promise.resolve(value).then(resolve, reject);
    });
    value = value && typeof value === 'object' && 'value' in value ? value.value : undefined;
  }
  if (value !== undefined && !req.silent) send({ type: 'result', data: bundle(value) });
}

process.on('SIGINT', () => {
  if (current) current.interrupt();
});
process.on('uncaughtException', (e) => {
  process.stderr.write('Uncaught ' + util.inspect(e) + '\n');
});
process.on('unhandledRejection', (e) => {
  process.stderr.write('Unhandled promise rejection: ' + util.inspect(e) + '\n');
});

const queue = [];
let busy = false;
async function next() {
  if (busy) return;
  busy = true;
  while (queue.length) {
    const req = queue.shift();
    try {
      await run(req);
    } catch (e) {
      send(errorOf(e));
    } finally {
      current = null;
    }
    send({ type: 'end' });
  }
  busy = false;
}

let buf = Buffer.alloc(0);
const reqs = new net.Socket({ fd: cfg.req, readable: true, writable: false });
reqs.on('data', (chunk) => {
  buf = Buffer.concat([buf, chunk]);
  while (buf.length >= 4) {
    const n = buf.readUInt32BE(0);
    if (buf.length < 4 + n) break;
    queue.push(JSON.parse(buf.subarray(4, 4 + n).toString('utf8')));
    buf = buf.subarray(4 + n);
  }
  next();
});
reqs.on('end', () => process.exit(0));
send({ type: 'hello', version: process.version });
