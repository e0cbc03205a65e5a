/**
 * Drain of large bodies: how much memory one `webhook-inbox work` process needs to drain a
 * backlog of ~1 MiB events with a handler that parses every body (workers.maxInFlightBodyBytes).
 *
 *   node --import tsx bench/big-bodies.ts sqlite|postgres [events=600] [workers JSON] [server main.js]
 *
 * Accepts the events through a `serve` with the workers off (signed Stripe-style, 8 at a time),
 * stops it, then starts one `work` process with bench/reading-handlers.mjs and reports the drain
 * time and the process's peak RSS (VmHWM). Prints one JSON line. Run `npm run build` first (or
 * pass another build's dist/cli/main.js to compare). PostgreSQL: a throwaway database made
 * through BENCH_PG_ADMIN_URL (bench/databases.ts).
 */
import { randomBytes } from 'node:crypto';
import { readFileSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import Database from 'better-sqlite3';
import pg from 'pg';
import { launch, RUN_DIR } from './children.js';
import { dropDb, recreateDb } from './databases.js';
import { stripeSignature } from './events.js';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..');
const [store = 'sqlite', nArg = '600', workersArg = '{}', main = join(ROOT, 'dist/cli/main.js')] = process.argv.slice(2);
const n = Number(nArg);
const SECRET = 'whsec_big_bodies';
const dbName = `wi_big_${process.pid}`;
if (store !== 'sqlite' && store !== 'postgres') throw new Error(`store: sqlite or postgres, not "${store}"`);
const database = store === 'sqlite' ? `sqlite:${join(RUN_DIR, 'big.db')}` : await recreateDb(dbName);

const base = {
  listen: { host: '127.0.0.1', port: 0 }, database, log: { level: 'warn' },
  payloadKeys: { current: 'k', keys: { k: randomBytes(32).toString('base64') } },
  endpoints: [{ id: 'stripe-big', provider: 'stripe', secrets: [{ version: 'v1', value: SECRET }] }],
};
writeFileSync(join(RUN_DIR, 'serve.json'), JSON.stringify({ ...base, workers: { enabled: false } }));
writeFileSync(join(RUN_DIR, 'work.json'), JSON.stringify({ ...base, workers: { pollMs: 100, ...JSON.parse(workersArg) } }));
const env = { DATABASE_URL: database };
const nothing = async () => undefined;

const serve = await launch([main, 'serve', '--config', join(RUN_DIR, 'serve.json')], env, 'big-serve', nothing);
const pad = 'x'.repeat(1024 * 1024 - 200); // under the 1 MiB default maxBodyBytes with the JSON around it
for (let i = 0; i < n; i += 8) {
  await Promise.all(Array.from({ length: Math.min(8, n - i) }, async (_, k) => {
    const id = `evt_big_${i + k}`;
    const body = Buffer.from(JSON.stringify({ id, object: 'event', type: 'payment_intent.succeeded', created: 1700000000, data: { object: { id: `pi_${id}` } }, pad }));
    const sig = stripeSignature(SECRET, body, Math.floor(Date.now() / 1000));
    const r = await fetch(`${serve.url}/webhooks/stripe-big`, { method: 'POST', body, headers: { 'content-type': 'application/json', 'stripe-signature': sig } });
    const text = await r.text();
    if (r.status !== 200) throw new Error(`accept ${id}: ${r.status} ${text}`);
  }));
}
await serve.stop();

const UNPROCESSED = "SELECT count(*) AS n FROM webhook_inbox WHERE status IN ('PENDING', 'PROCESSING')";
const sqliteDb = store === 'sqlite' ? new Database(database.slice('sqlite:'.length), { readonly: true }) : undefined;
const pgPool = store === 'postgres' ? new pg.Pool({ connectionString: database, max: 1 }) : undefined;
const unprocessed = async (): Promise<number> =>
  sqliteDb ? (sqliteDb.prepare(UNPROCESSED).get() as { n: number }).n : Number((await pgPool!.query<{ n: string }>(UNPROCESSED)).rows[0]!.n);

const t0 = Date.now();
const work = await launch([main, 'work', '--config', join(RUN_DIR, 'work.json'), '--handlers', join(ROOT, 'bench/reading-handlers.mjs')], env, 'big-work', nothing, /workers running/);
let peakKiB = 0;
for (;;) {
  await new Promise((r) => setTimeout(r, 100));
  peakKiB = Number(/VmHWM:\s+(\d+)/.exec(readFileSync(`/proc/${work.pid}/status`, 'utf8'))![1]);
  if ((await unprocessed()) === 0) break;
}
const drainS = (Date.now() - t0) / 1000;
await work.stop();
console.log(JSON.stringify({ store, events: n, bodyBytes: 1024 * 1024 - 200 + 130, workers: JSON.parse(workersArg), drainS, peakRssMiB: Math.round(peakKiB / 1024) }));
sqliteDb?.close();
await pgPool?.end();
if (store === 'postgres') await dropDb(dbName);
rmSync(RUN_DIR, { recursive: true, force: true });
process.exit(0);
