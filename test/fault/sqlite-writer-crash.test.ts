import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { openStore } from '../../src/store/open.js';
import type { InboxStore } from '../../src/store/port.js';
import { record } from '../helpers/records.js';
import { freshDatabase, type TestDatabase } from '../helpers/stores.js';

const T = Date.UTC(2026, 0, 1);
describe('SQLite writer thread dies inside a transaction', () => {
  let db: TestDatabase;
  let store: InboxStore;
  beforeEach(async () => {
    db = await freshDatabase('sqlite');
    store = openStore(`${db.url}?txTimeoutMs=2000&busyTimeoutMs=500`);
    await store.migrate();
    await store.transaction((tx) => tx.query('CREATE TABLE notes (id INTEGER PRIMARY KEY, note TEXT NOT NULL)'));
  });
  afterEach(async () => { await store?.close(); await db?.cleanup(); });

  it('a handler transaction open (write lock held) when the thread dies: the next writer can write', async () => {
    const writer = () => (store as unknown as { writer: { worker: { terminate(): Promise<number> } } }).writer.worker;
    const inTx = store.transaction(async (tx) => {
      await tx.query('INSERT INTO notes (id, note) VALUES (?, ?)', [1, 'x']);
      await writer().terminate();
      await tx.query('INSERT INTO notes (id, note) VALUES (?, ?)', [2, 'y']);
    });
    await expect(inTx).rejects.toThrow();
    const after = record('evt_after_crash', undefined, { receivedAtMs: T });
    expect(await store.acceptBatch([after])).toEqual([{ inboxId: after.inboxId, duplicate: false }]);
    expect(await store.transaction((tx) => tx.query('SELECT id FROM notes'))).toEqual([]);
  });
});
