import pg from 'pg';
import { afterEach, describe, expect, it } from 'vitest';
import { openStore } from '../../src/store/open.js';
import type { InboxStore } from '../../src/store/port.js';
import { pgAvailable, PG_REQUIRED } from '../helpers/pg.js';
import { record } from '../helpers/records.js';
import { freshDatabase, type TestDatabase } from '../helpers/stores.js';

/**
 * PostgreSQL: an unsigned notice takes its key's advisory lock in its batch's transaction (store.ts
 * acceptWithNotices). Another process's notice for the same key, stalled with that lock held (a paused
 * `serve`), makes this one time out, and its group-commit batch is answered 503, every caller in
 * it. The events beside the notice must then not be stored: a 503 says "not stored, send it again",
 * and the copy sent again must be the one answered `duplicate: false`.
 */
describe.runIf(PG_REQUIRED || (await pgAvailable()))('a mixed accept batch whose notice is blocked by another process [postgres]', () => {
  let db: TestDatabase | undefined;
  let store: InboxStore | undefined;
  let other: pg.Client | undefined;
  afterEach(async () => {
    await other?.end();
    await store?.close();
    await db?.cleanup();
    other = store = db = undefined;
  });

  it('fails whole and stores none of its events; sent again, the event is new', async () => {
    db = await freshDatabase('postgres');
    store = openStore(db.url, { queryTimeoutMs: 500 });
    await store.migrate();
    other = new pg.Client({ connectionString: db.url });
    await other.connect();
    // The other process's notice transaction for (mollie, ep, tr_1), stalled with its lock held.
    await other.query('BEGIN');
    await other.query("SELECT pg_advisory_xact_lock(hashtextextended('mollie' || '/' || 'ep' || '/' || 'tr_1', 0))");
    const event = record('evt_beside_notice');
    const notice = record('tr_1@x1', '{}', { provider: 'mollie', coalesceKey: 'tr_1' });
    await expect(store.acceptBatch([event, notice])).rejects.toThrow();
    expect(await store.getInbox(event.inboxId)).toBeNull();
    await other.query('ROLLBACK');
    const again = record('evt_beside_notice');
    expect(await store.acceptBatch([again])).toEqual([{ inboxId: again.inboxId, duplicate: false }]);
  });
});
