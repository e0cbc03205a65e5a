import { afterEach, beforeEach, expect, it } from 'vitest';
import { openStore } from '../../src/store/open.js';
import type { InboxStore, TransmissionBinding } from '../../src/store/port.js';
import { describeEachStore, freshDatabase, type TestDatabase } from '../helpers/stores.js';

const DAY = 86_400_000;
const NOW = Date.UTC(2026, 11, 6, 12);
const binding = (provider: string, transmissionId: string, receivedAtMs: number): TransmissionBinding => ({
  provider, endpointId: 'ep', transmissionId, payloadHash: Buffer.alloc(32, transmissionId.length), receivedAtMs,
});

describeEachStore('InboxStore.pruneTransmissions', (kind) => {
  let db: TestDatabase;
  let store: InboxStore;
  beforeEach(async () => {
    db = await freshDatabase(kind);
    store = openStore(db.url);
    await store.migrate();
  });
  afterEach(async () => {
    await store?.close();
    await db?.cleanup();
  });

  /** Whether `id` is still bound to its bytes: a binding with other bytes is refused while it is. */
  const stillBound = async (provider: string, id: string) => !(await store.bindTransmissions([{ ...binding(provider, id, NOW), payloadHash: Buffer.alloc(32, 0xee) }]))[0];

  it("deletes only the provider's bindings received before the time, oldest first, at most the limit per call", async () => {
    expect(await store.bindTransmissions([
      binding('paypal', 'old-3', NOW - 12 * DAY), binding('paypal', 'old-1', NOW - 20 * DAY), binding('paypal', 'old-2', NOW - 15 * DAY),
      binding('paypal', 'recent', NOW - 8 * DAY), binding('other', 'old-other', NOW - 20 * DAY),
    ])).toEqual([true, true, true, true, true]);

    expect(await store.pruneTransmissions('paypal', NOW - 9 * DAY, 2)).toBe(2);
    // The two oldest went first.
    expect(await stillBound('paypal', 'old-1')).toBe(false);
    expect(await stillBound('paypal', 'old-2')).toBe(false);
    expect(await stillBound('paypal', 'old-3')).toBe(true);

    expect(await store.pruneTransmissions('paypal', NOW - 9 * DAY, 2)).toBe(1);
    expect(await store.pruneTransmissions('paypal', NOW - 9 * DAY, 2)).toBe(0);
    expect(await stillBound('paypal', 'old-3')).toBe(false);
    // Newer than the time, and another provider's: kept.
    expect(await stillBound('paypal', 'recent')).toBe(true);
    expect(await stillBound('other', 'old-other')).toBe(true);
  });
});
