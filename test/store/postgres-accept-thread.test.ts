import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { openStore } from '../../src/store/open.js';
import type { InboxStore } from '../../src/store/port.js';
import { cipher, record } from '../helpers/records.js';
import { pgAvailable } from '../helpers/pg.js';
import { freshDatabase, type TestDatabase } from '../helpers/stores.js';

/** PostgreSQL batch accepts run on their own thread (postgres/accept-worker.ts): what the shared contract cannot see. */
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

  it('stores the exact sealed bytes it was handed (moved, not copied, to the thread) and answers winners and duplicates', async () => {
    const body = `{"id":"evt_moved","pad":"${'é'.repeat(5000)}"}`;
    const a = record('evt_moved', body);
    const sealed = Buffer.from(a.payload.ciphertext); // the store may take the original's memory
    const again = record('evt_moved', body);
    expect(await store.acceptBatch([a, record('evt_other')])).toEqual([
      { inboxId: a.inboxId, duplicate: false },
      expect.objectContaining({ duplicate: false }),
    ]);
    expect(await store.acceptBatch([again])).toEqual([{ inboxId: a.inboxId, duplicate: true }]);
    const stored = await store.getPayload(a.payloadId);
    expect(stored?.ciphertext.equals(sealed)).toBe(true);
    expect(cipher.open(stored!, { provider: 'stripe', endpointId: 'ep', providerEventId: 'evt_moved' }).toString()).toBe(body);
  });

  it('a thread that dies fails the batch it held (storage_unavailable, outcome unknown) and the next batch starts a new one', async () => {
    const kept = record('evt_before_crash');
    await store.acceptBatch([kept]);
    const dying = thread()!.terminate();
    const lost = store.acceptBatch([record('evt_during_crash')]);
    await expect(lost).rejects.toMatchObject({ name: 'StorageUnavailableError', message: expect.stringMatching(/accept thread stopped.*outcome is unknown/) });
    await dying;
    const after = record('evt_after_crash');
    expect(await store.acceptBatch([after])).toEqual([{ inboxId: after.inboxId, duplicate: false }]);
    expect((await store.getInbox(kept.inboxId))?.providerEventId).toBe('evt_before_crash');
    // The lost batch may or may not have committed before the thread died: a retry of it is a duplicate or new, never twice.
    const counts = await store.countRows();
    expect([2, 3]).toContain(counts.inbox);
    expect(counts.outbox).toBe(counts.inbox);
    expect(counts.payload).toBe(counts.inbox);
  });

  it('a store that never accepted starts no thread, and close ends a started one', async () => {
    expect(thread()).toBeUndefined();
    await store.acceptBatch([record('evt_start')]);
    expect(thread()).toBeDefined();
    await store.close();
    expect(thread()).toBeUndefined();
  });
});
