import { expect, it } from 'vitest';
import { openStore } from '../../src/store/open.js';
import { describeEachStore, freshDatabase } from '../helpers/stores.js';
import { record } from '../helpers/records.js';

/** Concurrent batches holding overlapping keys in different orders (PostgreSQL: 4 at once, sorted by key). */
describeEachStore('overlapping concurrent batches', (kind) => {
  it('no deadlock, one row per key, every answer names it', async () => {
    const db = await freshDatabase(kind);
    const store = openStore(db.url, {});
    try {
      await store.migrate();
      const keys = Array.from({ length: 40 }, (_, i) => `evt_${i}`);
      const shuffled = () => [...keys].sort(() => Math.random() - 0.5).slice(0, 30).map((k) => record(k));
      const batches = Array.from({ length: 12 }, shuffled);
      const results = await Promise.all(batches.map((b) => store.acceptBatch(b)));
      const winner = new Map<string, string>();
      const fresh = new Map<string, number>();
      batches.forEach((b, j) => b.forEach((r, i) => {
        const res = results[j]![i]!;
        if (!res.duplicate) fresh.set(r.providerEventId, (fresh.get(r.providerEventId) ?? 0) + 1);
        const w = winner.get(r.providerEventId);
        if (w) expect(res.inboxId).toBe(w); else winner.set(r.providerEventId, res.inboxId);
      }));
      for (const v of fresh.values()) expect(v).toBe(1);
      const c = await store.countRows();
      expect(c.inbox).toBe(winner.size);
      for (const [k, id] of winner) expect((await store.getInbox(id))!.providerEventId).toBe(k);
    } finally {
      await store.close();
      await db.cleanup();
    }
  });
});
