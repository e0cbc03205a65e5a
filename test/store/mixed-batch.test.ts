import { expect, it } from 'vitest';
import { openStore } from '../../src/store/open.js';
import { describeEachStore, freshDatabase } from '../helpers/stores.js';
import { record } from '../helpers/records.js';

/** One batch holding new events, in-batch copies, a copy of an earlier event and notices (PostgreSQL: notices and events in one transaction). */
describeEachStore('a mixed accept batch', (kind) => {
  it('events, copies and notices in one batch', async () => {
    const db = await freshDatabase(kind);
    const store = openStore(db.url, {});
    try {
      await store.migrate();
      const prior = await store.acceptBatch([record('evt_prior')]);
      const n = (k: string, id: string) => record(id, '{}', { provider: 'mollie', coalesceKey: k });
      const batch = [record('evt_a'), n('tr_1', 'tr_1@x1'), record('evt_prior'), record('evt_a'), n('tr_1', 'tr_1@x2'), n('tr_2', 'tr_2@x3'), record('evt_b')];
      const res = await store.acceptBatch(batch);
      expect(res[2]).toEqual({ inboxId: prior[0]!.inboxId, duplicate: true });
      expect(res[3]).toEqual({ inboxId: batch[0]!.inboxId, duplicate: true });
      expect(res[4]).toEqual({ inboxId: batch[1]!.inboxId, duplicate: true });
      for (const i of [0, 1, 5, 6]) expect(res[i]).toEqual({ inboxId: batch[i]!.inboxId, duplicate: false });
      const again = await store.acceptBatch([n('tr_1', 'tr_1@x9'), record('evt_b')]);
      expect(again).toEqual([{ inboxId: batch[1]!.inboxId, duplicate: true }, { inboxId: batch[6]!.inboxId, duplicate: true }]);
      expect(await store.countRows()).toEqual({ inbox: 5, outbox: 5, payload: 5 });
    } finally {
      await store.close();
      await db.cleanup();
    }
  });
});
