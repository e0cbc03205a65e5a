import pg from 'pg';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { uuidv7 } from '../../src/crypto/ids.js';
import { openStore } from '../../src/store/open.js';
import type { InboxStore } from '../../src/store/port.js';
import { pgAvailable } from '../helpers/pg.js';
import { record } from '../helpers/records.js';
import { freshDatabase, type TestDatabase } from '../helpers/stores.js';

/** In the past: a row received after the database's now() is due at that now (sql.ts DUE_AT_ONCE). */
const T = 1_750_000_000_000;

/**
 * A worker's lease heartbeat (extendInboxLeases) runs on its own connection while the same
 * worker settles the batch (finishBatch, on its own when no handler opened the transaction).
 * Both lock the batch's rows; locked in different orders, the two can deadlock, and PostgreSQL
 * aborts one of them (40P01) after deadlock_timeout: a failed settle or a missed heartbeat.
 */
describe.runIf(await pgAvailable())('PostgreSQL heartbeat and settle lock rows in one order', () => {
  let db: TestDatabase;
  let store: InboxStore;
  let holder: pg.Client;
  beforeEach(async () => {
    db = await freshDatabase('postgres');
    store = openStore(db.url);
    await store.migrate();
    holder = new pg.Client({ connectionString: db.url });
    await holder.connect();
  });
  afterEach(async () => {
    await holder?.end();
    await store?.close();
    await db?.cleanup();
  });

  /** Sessions of this database waiting for a row lock (afresh: a transaction keeps its first view of pg_stat_activity). */
  const lockWaiters = async () => {
    await holder.query('SELECT pg_stat_clear_snapshot()');
    return Number((await holder.query(`SELECT count(*) AS n FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'`)).rows[0].n);
  };
  const untilWaiters = async (n: number) => {
    for (let i = 0; i < 500 && (await lockWaiters()) < n; i++) await new Promise((r) => setTimeout(r, 10));
    expect(await lockWaiters()).toBe(n);
  };

  it('a settle listing its rows in any order queues behind a heartbeat instead of deadlocking with it', async () => {
    const a = record('evt_a', undefined, { inboxId: uuidv7(T), receivedAtMs: T });
    const b = record('evt_b', undefined, { inboxId: uuidv7(T + 1), receivedAtMs: T + 1 });
    await store.acceptBatch([a, b]);
    // An inbox of some size, as in production: on a handful of rows PostgreSQL scans the table
    // (physical order) instead of probing the key once per listed row (the list's order).
    for (let i = 0; i < 10; i++) await store.acceptBatch(Array.from({ length: 100 }, (_, j) => record(`evt_other_${i}_${j}`, undefined, { receivedAtMs: T + 1000 })));
    await holder.query('ANALYZE webhook_inbox');
    expect((await store.claimInbox(10, 'w1', 30_000, T + 10)).map((r) => r.inboxId).sort()).toEqual([a.inboxId, b.inboxId]);

    // Row a is held elsewhere (a reader's FOR UPDATE, an operator's transaction), so both
    // statements are caught mid-way: the heartbeat waits for a, the settle then comes.
    await holder.query('BEGIN');
    await holder.query('SELECT 1 FROM webhook_inbox WHERE inbox_id = $1 FOR UPDATE', [a.inboxId]);
    const heartbeat = store.extendInboxLeases([a.inboxId, b.inboxId], 'w1', T + 60_000);
    await untilWaiters(1);
    // The engine lists settlements in its own order; here b before a.
    const settle = store.transaction((tx) => tx.finishBatch('w1', {
      markers: [], effects: [],
      settlements: [b, a].map((r) => ({ inboxId: r.inboxId, s: { status: 'PROCESSED' as const, handlerVersion: 'h1', nowMs: T + 20 } })),
    }));
    await untilWaiters(2);
    await holder.query('COMMIT');

    // The heartbeat takes a then b; a settle that had locked b first would now wait for a
    // while the heartbeat waits for b.
    await expect(heartbeat).resolves.toBeUndefined();
    await expect(settle).resolves.toBe(2);
    expect(await store.getInbox(a.inboxId)).toMatchObject({ status: 'PROCESSED' });
    expect(await store.getInbox(b.inboxId)).toMatchObject({ status: 'PROCESSED' });
  });
});
