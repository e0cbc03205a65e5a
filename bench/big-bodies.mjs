// Drain of large bodies: how much memory one `webhook-inbox work` process needs to drain a
// backlog of ~1 MiB events with a handler that parses every body (workers.maxInFlightBodyBytes).
//
//   node bench/big-bodies.mjs sqlite|postgres [events=600] [workers JSON] [server main.js]
//
// Accepts the events through a `serve` with the workers off (signed Stripe-style, 8 at a time),
// stops it, then starts one `work` process with bench/reading-handlers.mjs and reports the drain
// time and the process's peak RSS (VmHWM). Prints one JSON line. Run `npm run build` first (or
// pass another build's dist/cli/main.js to compare). PostgreSQL: a throwaway database at
// BENCH_PG_ADMIN_URL (default postgres://postgres@127.0.0.1:5432/postgres).
import { spawn } from 'node:child_process';
import { createHmac, randomBytes } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import Database from 'better-sqlite3';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..');
const [store = 'sqlite', nArg = '600', workersArg = '{}', main = join(ROOT, 'dist/cli/main.js')] = process.argv.slice(2);
const n = Number(nArg);
const SECRET = 'whsec_big_bodies';
const dir = mkdtempSync(join(tmpdir(), 'wi-big-'));
const admin = process.env.BENCH_PG_ADMIN_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres';
const dbName = `wi_big_${process.pid}`;

async function adminQuery(sql) {
  const c = new pg.Client({ connectionString: admin });
  await c.connect();
  try {
    await c.query(sql);
  } finally {
    await c.end();
  }
}

let database;
if (store === 'sqlite') database = `sqlite:${join(dir, 'big.db')}`;
else if (store === 'postgres') {
  await adminQuery(`CREATE DATABASE ${dbName}`);
  const u = new URL(admin);
  u.pathname = `/${dbName}`;
  database = u.toString();
} else throw new Error(`store: sqlite or postgres, not "${store}"`);

const config = (workers) => ({
  listen: { host: '127.0.0.1', port: 0 }, database, log: { level: 'warn' }, workers,
  payloadKeys: { current: 'k', keys: { k: randomBytes(32).toString('base64') } },
  endpoints: [{ id: 'stripe-big', provider: 'stripe', secrets: [{ version: 'v1', value: SECRET }] }],
});
const base = config({});
writeFileSync(join(dir, 'serve.json'), JSON.stringify({ ...base, workers: { enabled: false } }));
writeFileSync(join(dir, 'work.json'), JSON.stringify({ ...base, workers: { pollMs: 100, ...JSON.parse(workersArg) } }));

/** Resolves with the URL the child prints when it listens (or its first line, for `work`). */
function start(args, ready) {
  const child = spawn(process.execPath, [main, ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
  const up = new Promise((resolve, reject) => {
    const seen = (d) => {
      const m = ready.exec(String(d));
      if (m) resolve(m[1] ?? m[0]);
    };
    child.stdout.on('data', seen);
    child.stderr.on('data', seen);
    child.on('exit', (code) => reject(new Error(`${args[0]} exited with ${code}`)));
  });
  return { child, up };
}
const stopped = (child) => new Promise((r) => (child.exitCode !== null ? r() : child.on('exit', r)));

const serve = start(['serve', '--config', join(dir, 'serve.json')], /listening on (http:\/\/127\.0\.0\.1:\d+)/);
const url = await serve.up;
const pad = 'x'.repeat(1024 * 1024 - 200); // under the 1 MiB default maxBodyBytes with the JSON around it
for (let i = 0; i < n; i += 8) {
  await Promise.all(Array.from({ length: Math.min(8, n - i) }, async (_, k) => {
    const id = `evt_big_${i + k}`;
    const body = JSON.stringify({ id, object: 'event', type: 'payment_intent.succeeded', created: 1700000000, data: { object: { id: `pi_${id}` } }, pad });
    const t = Math.floor(Date.now() / 1000);
    const v1 = createHmac('sha256', SECRET).update(`${t}.${body}`).digest('hex');
    const r = await fetch(`${url}/webhooks/stripe-big`, { method: 'POST', body, headers: { 'content-type': 'application/json', 'stripe-signature': `t=${t},v1=${v1}` } });
    const text = await r.text();
    if (r.status !== 200) throw new Error(`accept ${id}: ${r.status} ${text}`);
  }));
}
serve.child.kill('SIGTERM');
await stopped(serve.child);

const UNPROCESSED = "SELECT count(*) AS n FROM webhook_inbox WHERE status IN ('PENDING', 'PROCESSING')";
const sqliteDb = store === 'sqlite' ? new Database(database.slice('sqlite:'.length), { readonly: true }) : undefined;
const pgPool = store === 'postgres' ? new pg.Pool({ connectionString: database, max: 1 }) : undefined;
const unprocessed = async () => (sqliteDb ? sqliteDb.prepare(UNPROCESSED).get().n : Number((await pgPool.query(UNPROCESSED)).rows[0].n));

const t0 = Date.now();
const work = start(['work', '--config', join(dir, 'work.json'), '--handlers', join(ROOT, 'bench/reading-handlers.mjs')], /workers running/);
await work.up;
let peakKiB = 0;
for (;;) {
  await new Promise((r) => setTimeout(r, 100));
  peakKiB = Number(/VmHWM:\s+(\d+)/.exec(readFileSync(`/proc/${work.child.pid}/status`, 'utf8'))[1]);
  if ((await unprocessed()) === 0) break;
}
const drainS = (Date.now() - t0) / 1000;
work.child.kill('SIGTERM');
await stopped(work.child);
console.log(JSON.stringify({ store, events: n, bodyBytes: 1024 * 1024 - 200 + 130, workers: JSON.parse(workersArg), drainS, peakRssMiB: Math.round(peakKiB / 1024) }));
sqliteDb?.close();
await pgPool?.end();
rmSync(dir, { recursive: true, force: true });
if (store === 'postgres') await adminQuery(`DROP DATABASE ${dbName} WITH (FORCE)`);
process.exit(0);
