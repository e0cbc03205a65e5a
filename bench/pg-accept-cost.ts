/**
 * PostgreSQL's own cost of accepting events, without HTTP: `acceptBatch` from this checkout's
 * store, batches of B records from C concurrent lanes (as the group committer sends them),
 * Stripe-style bodies of 1–13 KiB sealed as the ingress seals them. Prints one JSON line: events/s,
 * CPU µs per event of all `postgres` processes and of this client, and the transactions
 * PostgreSQL counted (accept statements plus new-work NOTIFYs).
 *
 *   node --import tsx bench/pg-accept-cost.ts [events=12000] [batch=16] [variant=as-is]
 *   LANES=1 node --import tsx bench/pg-accept-cost.ts 20000 32   (one commit lane: its serial cost)
 *   COMPRESS=8192 node --import tsx bench/pg-accept-cost.ts 20000 32   (bodies of 8192+ bytes sealed
 *     brotli-compressed, as limits.compressBodyBytes does; compression itself is not in the timing)
 *
 * Variants change the schema after migrating, to price a piece of it:
 * `no-fks` (both foreign keys on the accept path), `no-payload-fk` (inbox → payload, and its
 * index). `BENCH_SRC=/other/checkout/src` measures another checkout's store code (its store
 * module is imported from there). PostgreSQL as in bench/run.ts (`BENCH_PG_ADMIN_URL`).
 */
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { PayloadCipher } from '../src/crypto/payload-cipher.js';
import type { AcceptRecord, InboxStore } from '../src/store/port.js';
import { dropDb, PG_ADMIN, recreateDb } from './databases.js';
import { EventFactory, prng } from './events.js';
import { sealedRecord } from './records.js';
import { cpuDelta, cpuOfCommand } from './sys.js';

const VARIANTS: Record<string, string[]> = {
  'as-is': [],
  'no-fks': [
    'ALTER TABLE webhook_outbox DROP CONSTRAINT webhook_outbox_inbox_id_fkey',
    'ALTER TABLE webhook_inbox DROP CONSTRAINT webhook_inbox_raw_payload_ref_fkey',
  ],
  'no-payload-fk': ['ALTER TABLE webhook_inbox DROP CONSTRAINT webhook_inbox_raw_payload_ref_fkey', 'DROP INDEX webhook_inbox_payload'],
};
/** Batches in flight at once (the accept pool's size; `LANES` to price one lane alone). */
const LANES = Number(process.env.LANES ?? 4);
const WARM = 2000;
const DB = 'wi_bench_accept_cost';

const [events = 12000, batch = 16] = process.argv.slice(2, 4).map(Number);
const variant = process.argv[4] ?? 'as-is';
const ddl = VARIANTS[variant];
if (!ddl || !(events > WARM) || !(batch >= 1)) {
  console.error(`usage: pg-accept-cost.ts [events > ${WARM}] [batch ≥ 1] [${Object.keys(VARIANTS).join('|')}]`);
  process.exit(2);
}

const url = await recreateDb(DB);
const admin = new pg.Client({ connectionString: PG_ADMIN }); // for the database's commit counter
await admin.connect();

const { openStore } = (await import(`${process.env.BENCH_SRC ?? '../src'}/store/open.js`)) as typeof import('../src/store/open.js');
const store: InboxStore = openStore(url);
await store.migrate();
const schema = new pg.Client({ connectionString: url });
await schema.connect();
for (const s of ddl) await schema.query(s);
await schema.end();

const cipher = new PayloadCipher(new Map([['bench', randomBytes(32)]]), 'bench', Number(process.env.COMPRESS ?? 0));
const factory = new EventFactory({ minBytes: 1024, maxBytes: 13 * 1024, largeBytes: 1 << 20 });
const rnd = prng(7);
const now = Date.now();
const records: AcceptRecord[] = [];
for (let j = 0; j < events; j++) {
  const id = `c${j}`;
  records.push(sealedRecord(cipher, id, factory.make(id, false, rnd, Math.floor(now / 1000)), now));
}

let next = 0;
const lane = async (limit: number) => {
  while (next < limit) {
    const i = next;
    next += batch;
    await store.acceptBatch(records.slice(i, Math.min(limit, i + batch)));
  }
};
/** Transactions committed in the bench database; PostgreSQL publishes its counters within ~1 s. */
const commits = async () => {
  await new Promise((r) => setTimeout(r, 1500));
  return Number((await admin.query('SELECT xact_commit FROM pg_stat_database WHERE datname = $1', [DB])).rows[0].xact_commit);
};

await Promise.all(Array.from({ length: LANES }, () => lane(WARM)));
const x0 = await commits();
const pg0 = cpuOfCommand('postgres');
const me0 = process.cpuUsage();
const t0 = performance.now();
await Promise.all(Array.from({ length: LANES }, () => lane(events)));
const seconds = (performance.now() - t0) / 1000;
const pgMs = cpuDelta(pg0, cpuOfCommand('postgres'));
const me = process.cpuUsage(me0);
const measured = events - WARM;
const x1 = await commits();
console.log(JSON.stringify({
  variant, batch, lanes: LANES, events: measured, perSecond: Math.round(measured / seconds),
  transactions: x1 - x0, acceptStatements: Math.ceil(measured / batch),
  pgCpuUsPerEvent: +((pgMs * 1000) / measured).toFixed(1), clientCpuUsPerEvent: +((me.user + me.system) / measured).toFixed(1),
}));
await store.close();
await admin.end();
await dropDb(DB);
