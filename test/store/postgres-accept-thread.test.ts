import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { openStore } from '../../src/store/open.js';
import type { InboxStore } from '../../src/store/port.js';
import { cipher, record } from '../helpers/records.js';
import { pgAvailable } from '../helpers/pg.js';
import { freshDatabase, type TestDatabase } from '../helpers/stores.js';

/** PostgreSQL's large accept batches run on their own thread (postgres/accept-worker.ts): what the shared contract cannot see. */
describe.runIf(await pgAvailable())('PostgreSQL accept thread', () => {
  let db: TestDatabase;
  let store: InboxStore;
  beforeEach(async () => {
    db = await freshDatabase('postgres');
    store = openStore(db.url);
    await store.migrate();
  });
  afterEach(async () => {
    await store?.close();
    await db?.cleanup();
  });

  const thread = () => (store as unknown as { acceptLane: { worker?: { terminate(): Promise<number> } } }).acceptLane.worker;
  /** 16 records: a batch large enough for the thread (smaller ones run on the event loop). */
  const batch = (tag: string, first = record(`${tag}_0`)) => [first, ...Array.from({ length: 15 }, (_, i) => record(`${tag}_${i + 1}`))];

  it('stores the exact sealed bytes it was handed (moved, not copied, to the thread) and answers winners and duplicates on either path', async () => {
    const body = `{"id":"evt_moved","pad":"${'é'.repeat(5000)}"}`;
    const a = record('evt_moved', body);
    const sealed = Buffer.from(a.payload.ciphertext); // the store may take the original's memory
    const again = record('evt_moved', body);
    const results = await store.acceptBatch(batch('evt_b', a));
    expect(thread()).toBeDefined();
    expect(results).toHaveLength(16);
    expect(results[0]).toEqual({ inboxId: a.inboxId, duplicate: false });
    expect(results.every((r) => !r.duplicate)).toBe(true);
    // A copy in a thread-sized batch, and alone (a small batch runs on the event loop): both duplicates of the one row.
    const copies = await store.acceptBatch(batch('evt_c', record('evt_moved', body)));
    expect(copies[0]).toEqual({ inboxId: a.inboxId, duplicate: true });
    expect(await store.acceptBatch([again])).toEqual([{ inboxId: a.inboxId, duplicate: true }]);
    expect((await store.countRows()).inbox).toBe(31);
    const stored = await store.getPayload(a.payloadId);
    expect(stored?.ciphertext.equals(sealed)).toBe(true);
    expect(cipher.open(stored!, { provider: 'stripe', endpointId: 'ep', providerEventId: 'evt_moved' }).toString()).toBe(body);
  });

  it('a thread that dies fails the batch it held (storage_unavailable, outcome unknown) and the next batch starts a new one', async () => {
    const kept = record('evt_before_crash');
    await store.acceptBatch(batch('evt_before', kept));
    const dying = thread()!.terminate();
    const lost = store.acceptBatch(batch('evt_during'));
    await expect(lost).rejects.toMatchObject({ name: 'StorageUnavailableError', message: expect.stringMatching(/accept thread stopped.*outcome is unknown/) });
    await dying;
    const after = record('evt_after_crash');
    expect((await store.acceptBatch(batch('evt_after', after)))[0]).toEqual({ inboxId: after.inboxId, duplicate: false });
    expect((await store.getInbox(kept.inboxId))?.providerEventId).toBe('evt_before_crash');
    // The lost batch may or may not have committed before the thread died (its outcome is unknown), but never in part.
    const counts = await store.countRows();
    expect([32, 48]).toContain(counts.inbox);
    expect(counts.outbox).toBe(counts.inbox);
    expect(counts.payload).toBe(counts.inbox);
  });

  it('PostgreSQL unreachable: a large batch fails as storage_unavailable from the thread, nothing is acknowledged', async () => {
    const down = openStore('postgres://postgres@127.0.0.1:1/none');
    try {
      await expect(down.acceptBatch(batch('evt_down'))).rejects.toMatchObject({ name: 'StorageUnavailableError', message: expect.stringMatching(/^PostgreSQL: .*ECONNREFUSED/) });
      expect((down as unknown as { acceptLane: { worker?: unknown } }).acceptLane.worker).toBeDefined(); // it was the thread that answered
    } finally {
      await down.close();
    }
  });

  it('small batches start no thread; a large one does, and close ends it', async () => {
    expect(thread()).toBeUndefined();
    await store.acceptBatch([record('evt_small')]);
    expect(thread()).toBeUndefined();
    await store.acceptBatch(batch('evt_start'));
    expect(thread()).toBeDefined();
    await store.close();
    expect(thread()).toBeUndefined();
    await expect(store.acceptBatch(batch('evt_after_close'))).rejects.toMatchObject({ name: 'StorageUnavailableError', message: 'store is closed' });
    expect(thread()).toBeUndefined();
  });
});
