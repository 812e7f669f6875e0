// Drives pacerd with Node's ioredis and node-redis (v5 with RESP2 and RESP3,
// v4), as a bidder would: single calls, pipelines, MULTI/EXEC and
// auto-pipelining. Usage: node clients.mjs <pacerd socket>. Prints each
// check; exits 1 if any failed. compat/compat_test.go runs it against a
// real daemon; scripts/deps.sh installs the pinned clients (package.json).
import { createRequire } from 'node:module';
import Redis from 'ioredis';
import { createClient as createClient5 } from 'redis';
import { createClient as createClient4 } from 'redis4';

const require = createRequire(import.meta.url);
const sock = process.argv[2];
let failures = 0;

function check(what, ok, got) {
  console.log(`${ok ? 'ok  ' : 'FAIL'} ${what}: ${JSON.stringify(got, (k, v) => (v instanceof Map ? Object.fromEntries(v) : v))}`);
  if (!ok) failures++;
}

const decision = (v) => v === 1 || v === 0 || v === -1;

// BALANCE: a flat array under RESP2, a map (object or Map) under RESP3.
function balance(v) {
  let d = v;
  if (Array.isArray(v)) {
    d = {};
    for (let i = 0; i + 1 < v.length; i += 2) d[String(v[i])] = v[i + 1];
  } else if (v instanceof Map) {
    d = Object.fromEntries(v);
  }
  return d && String(d.state) === 'active' && ['tokens', 'reserve', 'pace'].every((k) => k in d);
}

const version = (pkg) => require(`${pkg}/package.json`).version;

async function ioredis() {
  const p = `ioredis ${version('ioredis')} RESP2: `;
  for (const auto of [false, true]) {
    const r = new Redis({ path: sock, connectionName: 'compat-node', enableAutoPipelining: auto, maxRetriesPerRequest: 0 });
    const q = p + (auto ? 'auto-pipelined ' : '');
    check(q + 'PING', (await r.ping()) === 'PONG', 'PONG');
    let v = await r.call('SPEND', 'demo', 1000);
    check(q + 'SPEND', decision(v), v);
    v = await r.call('SPEND', 'demo', 1000, 'auction-1');
    check(q + 'SPEND with auction id', decision(v), v);
    v = await r.call('SPEND', 'nosuch', 1).then(() => 'no error', (e) => e.message);
    check(q + 'SPEND of an unknown campaign rejects', v.includes('unknown campaign "nosuch"'), v);
    v = await r.call('BALANCE', 'demo');
    check(q + 'BALANCE', balance(v), v);
    v = await r.call('REFUND', 'demo', 1000, 'auction-1');
    check(q + 'REFUND', v === 1, v);
    v = await r.info();
    check(q + 'info()', v.includes('# pacer'), v.slice(0, 20));
    v = await r.client('GETNAME');
    check(q + 'CLIENT GETNAME', v === 'compat-node', v);

    for (const kind of ['pipeline', 'multi']) {
      const res = await r[kind]()
        .echo('first')
        .call('SPEND', 'demo', 1000, 'auction-2')
        .call('BALANCE', 'demo')
        .call('REFUND', 'demo', 1000, 'auction-2')
        .echo('last')
        .exec();
      const vals = res.map(([err, val]) => (err ? err.message : val));
      const ok = res.every(([err]) => !err) && vals[0] === 'first' && decision(vals[1]) && balance(vals[2]) &&
        vals[3] === 1 && vals[4] === 'last';
      check(`${q}${kind}()`, ok, vals);
    }
    // Many concurrent calls: with enableAutoPipelining they share writes.
    const many = await Promise.all(Array.from({ length: 200 }, (_, i) => r.call('SPEND', 'demo', 1, `a-${i}`)));
    check(q + '200 concurrent SPENDs', many.length === 200 && many.every(decision), `${many.length} replies`);
    r.disconnect();
  }
}

async function nodeRedis(createClient, pkg, resp) {
  const p = `node-redis ${version(pkg)} RESP${resp ?? 2}: `;
  const opts = { socket: { path: sock, reconnectStrategy: false }, name: 'compat-node' };
  if (resp) opts.RESP = resp;
  const c = createClient(opts);
  c.on('error', (e) => check(p + 'no connection error', false, e.message));
  await c.connect();
  check(p + 'PING', (await c.ping()) === 'PONG', 'PONG');
  let v = await c.sendCommand(['SPEND', 'demo', '1000']);
  check(p + 'SPEND', decision(v), v);
  v = await c.sendCommand(['SPEND', 'demo', '1000', 'auction-1']);
  check(p + 'SPEND with auction id', decision(v), v);
  v = await c.sendCommand(['SPEND', 'nosuch', '1']).then(() => 'no error', (e) => e.message);
  check(p + 'SPEND of an unknown campaign rejects', v.includes('unknown campaign "nosuch"'), v);
  v = await c.sendCommand(['BALANCE', 'demo']);
  check(p + 'BALANCE', balance(v), v);
  v = await c.sendCommand(['REFUND', 'demo', '1000', 'auction-1']);
  check(p + 'REFUND', v === 1, v);
  v = await c.info();
  check(p + 'info()', String(v).includes('# pacer'), String(v).slice(0, 20));
  v = await c.clientGetName();
  check(p + 'CLIENT GETNAME', v === 'compat-node', v);

  for (const how of ['execAsPipeline', 'exec']) {
    const m = c.multi()
      .echo('first')
      .addCommand(['SPEND', 'demo', '1000', 'auction-2'])
      .addCommand(['BALANCE', 'demo'])
      .addCommand(['REFUND', 'demo', '1000', 'auction-2'])
      .echo('last');
    const vals = await m[how]();
    const ok = vals.length === 5 && vals[0] === 'first' && decision(vals[1]) && balance(vals[2]) &&
      vals[3] === 1 && vals[4] === 'last';
    check(`${p}multi().${how}()`, ok, vals);
  }
  // node-redis pipelines every command issued in the same tick.
  const many = await Promise.all(Array.from({ length: 200 }, (_, i) => c.sendCommand(['SPEND', 'demo', '1', `a-${i}`])));
  check(p + '200 auto-pipelined SPENDs', many.length === 200 && many.every(decision), `${many.length} replies`);
  await c.quit();
}

try {
  await ioredis();
  await nodeRedis(createClient5, 'redis', undefined);
  await nodeRedis(createClient5, 'redis', 2);
  await nodeRedis(createClient5, 'redis', 3);
  await nodeRedis(createClient4, 'redis4', undefined);
} catch (e) {
  check('no exception', false, String(e && e.stack ? e.stack : e));
}
if (failures) {
  console.log(`${failures} check(s) failed`);
  process.exit(1);
}
console.log('all checks passed');
