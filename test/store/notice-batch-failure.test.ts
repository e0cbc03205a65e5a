import { afterEach, expect, it } from 'vitest';
import { openStore } from '../../src/store/open.js';
import type { InboxStore } from '../../src/store/port.js';
import { record } from '../helpers/records.js';
import { describeEachStore, freshDatabase, type TestDatabase } from '../helpers/stores.js';

/**
 * A batch that fails is answered 503 to every caller in it (group-commit.ts), and a 503 says
 * "not stored, send it again". So a failing batch that holds unsigned notices must store none of
 * its records. On PostgreSQL each notice committed in a transaction of its own, one after the
 * other, before the events' statement: a batch whose second notice (or whose events) then failed
 * had committed the first notice, and its sender was told 503 for a row that was there (its
 * retry answered `duplicate: true`, the row's fate and the answer disagreeing).
 */
describeEachStore('an accept batch with notices that fails after its first notice', (kind) => {
  let db: TestDatabase | undefined;
  let store: InboxStore | undefined;
  afterEach(async () => {
    await store?.close();
    await db?.cleanup();
    store = db = undefined;
  });

  const notice = (resource: string, id: string) => record(id, '{}', { provider: 'mollie', coalesceKey: resource });

  it.each([['its second notice', 'tr_2@x2'], ['an event beside the notices', 'evt_beside']])('%s refused by the database: nothing of the batch is stored', async (_what, refused) => {
    db = await freshDatabase(kind);
    store = openStore(db.url, {});
    await store.migrate();
    // A failure inside the batch, after the first notice (a store trigger refusing one row).
    const refuse = kind === 'postgres'
      ? [`CREATE FUNCTION refuse() RETURNS trigger AS $$ BEGIN IF NEW.provider_event_id = '${refused}' THEN RAISE EXCEPTION 'refused by a trigger'; END IF; RETURN NEW; END $$ LANGUAGE plpgsql`,
        'CREATE TRIGGER refuse BEFORE INSERT ON webhook_inbox FOR EACH ROW EXECUTE FUNCTION refuse()']
      : [`CREATE TRIGGER refuse BEFORE INSERT ON webhook_inbox WHEN NEW.provider_event_id = '${refused}' BEGIN SELECT RAISE(ABORT, 'refused by a trigger'); END`];
    for (const s of refuse) await store.transaction((tx) => tx.query(s));

    const first = notice('tr_1', 'tr_1@x1');
    await expect(store.acceptBatch([first, notice('tr_2', 'tr_2@x2'), record('evt_beside')])).rejects.toThrow();
    expect(await store.countRows()).toEqual({ inbox: 0, outbox: 0, payload: 0 });
    // Sent again (Mollie retries on a 503), the first notice makes its row now.
    const again = notice('tr_1', 'tr_1@x3');
    expect(await store.acceptBatch([again])).toEqual([{ inboxId: again.inboxId, duplicate: false }]);
  });
});
