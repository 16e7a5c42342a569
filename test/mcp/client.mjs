// The MCP end-to-end client: the official TypeScript SDK drives airlock's
// MCP server over stdio or streamable HTTP and checks what comes back.
//
//   node client.mjs stdio COMMAND [ARG...]   (the server's command; its
//                                            environment is this one's)
//   node client.mjs http URL [KEY]
//
// It prints one JSON line, {"ok": true, "checks": [...]}, and exits 0, or
// prints what failed and exits 1.
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';

const [mode, target, ...rest] = process.argv.slice(2);
const checks = [];

function check(what, ok, detail) {
  if (!ok) {
    throw new Error(what + ': ' + (typeof detail === 'string' ? detail : JSON.stringify(detail)));
  }
  checks.push(what);
}

function text(res) {
  return (res.content || []).filter((c) => c.type === 'text').map((c) => c.text).join('\n');
}

async function main() {
  let transport;
  if (mode === 'stdio') {
    transport = new StdioClientTransport({ command: target, args: rest, env: process.env, stderr: 'inherit' });
  } else if (mode === 'http') {
    const headers = rest[0] ? { Authorization: 'Bearer ' + rest[0] } : {};
    transport = new StreamableHTTPClientTransport(new URL(target), { requestInit: { headers } });
  } else {
    throw new Error('usage: client.mjs stdio COMMAND [ARG...] | http URL [KEY]');
  }
  const client = new Client({ name: 'airlock-e2e', version: '1.0.0' });
  await client.connect(transport);
  const call = (name, args, opts) => client.callTool({ name, arguments: args }, undefined, opts);

  const { tools } = await client.listTools();
  const names = tools.map((t) => t.name).sort();
  const want = ['create_session', 'destroy_session', 'fetch_artifact', 'list_artifacts', 'list_files', 'read_file', 'run_code', 'run_command', 'write_file'];
  check('lists the tools', JSON.stringify(names) === JSON.stringify(want), names);
  const create = tools.find((t) => t.name === 'create_session');
  check('the tools say what the sandbox has and refuses', /No network/.test(create.description) && /pandas/.test(create.description) &&
    /refused/.test(create.description), create.description);
  check('the tools take session_id', tools.filter((t) => t.name !== 'create_session').every((t) => t.inputSchema.required.includes('session_id')),
    tools.map((t) => t.inputSchema));

  const created = await call('create_session', {});
  const sid = created.structuredContent && created.structuredContent.session_id;
  check('creates a session', !created.isError && /^[0-9a-f]{32}$/.test(sid || ''), created);

  let res = await call('run_code', { session_id: sid, code: 'import math\nx = 21' });
  check('runs code', !res.isError, res);
  res = await call('run_code', { session_id: sid, code: 'print(x * 2, math.pi > 3)' });
  check('keeps state across calls', !res.isError && /42 True/.test(text(res)), res);
  res = await call('run_code', { session_id: sid, code: 'x * 2' });
  check('returns the last expression', /result: 42/.test(text(res)), res);

  res = await call('run_code', { session_id: sid, code: 'import matplotlib.pyplot as plt\nplt.plot([1, 3, 2])\nplt.title("e2e")\nplt.show()' });
  const img = (res.content || []).find((c) => c.type === 'image');
  check('gives a PNG back as image content', !res.isError && img && img.mimeType === 'image/png' &&
    Buffer.from(img.data, 'base64').subarray(0, 8).toString('hex') === '89504e470d0a1a0a', res);

  res = await call('write_file', { session_id: sid, path: 'output/notes.md', content: '# notes\nfrom the e2e client\n' });
  check('writes a file', !res.isError && /wrote \/workspace\/output\/notes.md/.test(text(res)), res);
  res = await call('run_command', { session_id: sid, command: 'printf "a,b\\n=1+1,2\\n" > output/t.csv && ln -s /etc/passwd output/link.txt && echo done' });
  check('runs a command', !res.isError && /exit 0/.test(text(res)) && /done/.test(text(res)), res);
  res = await call('read_file', { session_id: sid, path: 'output/t.csv' });
  check('reads a file', /=1\+1,2/.test(text(res)), res);
  res = await call('list_artifacts', { session_id: sid });
  const links = (res.content || []).filter((c) => c.type === 'resource_link').map((c) => c.uri);
  check('lists artifacts as resources', links.includes('airlock://sessions/' + sid + '/artifacts/notes.md') && /link.txt .*rejected/.test(text(res)) &&
    !links.some((u) => u.endsWith('link.txt')), res);
  const read = await client.readResource({ uri: 'airlock://sessions/' + sid + '/artifacts/notes.md' });
  check('reads an artifact resource', read.contents.length === 1 && read.contents[0].text === '# notes\nfrom the e2e client\n', read);
  const csv = await client.readResource({ uri: 'airlock://sessions/' + sid + '/artifacts/t.csv' });
  check('an artifact resource passed the filter', /'=1\+1/.test(csv.contents[0].text), csv);
  res = await call('fetch_artifact', { session_id: sid, path: 'link.txt' });
  check('refuses a rejected artifact', res.isError && /rejected/.test(text(res)), res);
  let failed = false;
  try {
    await client.readResource({ uri: 'airlock://sessions/' + sid + '/artifacts/link.txt' });
  } catch (e) {
    failed = true;
  }
  check('a rejected artifact cannot be read as a resource', failed, 'it was read');

  const start = Date.now();
  res = await call('run_code', { session_id: sid, code: 'while True:\n    pass', timeout_seconds: 2 });
  check('fails cleanly on a timeout', res.isError && /interrupted/.test(text(res)) && Date.now() - start < 20000, res);
  res = await call('run_command', { session_id: sid, command: 'sleep 30', timeout_seconds: 1 });
  check('a command fails cleanly on a timeout', res.isError && /timed out/.test(text(res)), res);
  res = await call('run_code', { session_id: sid, code: 'print("alive")' });
  check('the session works after a timeout', !res.isError && /alive/.test(text(res)), res);

  res = await call('destroy_session', { session_id: sid });
  check('destroys the session', !res.isError, res);
  res = await call('run_command', { session_id: sid, command: 'true' });
  check('a destroyed session is gone', res.isError && /session/.test(text(res)), res);

  await client.close();
  console.log(JSON.stringify({ ok: true, mode, checks }));
}

main().catch((e) => {
  console.log(JSON.stringify({ ok: false, mode, checks, error: String(e && e.stack || e) }));
  process.exit(1);
});
