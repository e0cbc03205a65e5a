import { expect, it } from 'vitest';
import { openStore } from '../../src/store/open.js';
import { describeEachStore } from '../helpers/stores.js';
import { startTestApp } from '../helpers/app.js';
import { post } from '../helpers/http.js';
import { stripeEvent, stripeHeaders } from '../helpers/events.js';

/**
 * close() while copies of 50 events are being accepted: every 2xx sent names the stored row of its
 * event (one per event), and each stored event has its inbox, outbox and payload rows.
 */
describeEachStore('close() during accepts', (kind) => {
  it('every 2xx names a stored row of its event, after close', async () => {
    const app = await startTestApp(kind, { groupCommit: { maxBatch: 8 } });
    try {
      const n = 150;
      let firstAccepted!: () => void;
      const accepting = new Promise<void>((resolve) => (firstAccepted = resolve));
      const sends = Array.from({ length: n }, (_, i) => {
        const body = stripeEvent(`evt_close_${i % 50}`, { size: 2048 });
        return post(`${app.url}/webhooks/stripe`, body, stripeHeaders(body)).then((r) => {
          if (r.status === 200) firstAccepted();
          return { i: i % 50, r };
        }, () => null);
      });
      // Closed while the rest are still on their way (or in a commit).
      await accepting;
      const closing = app.close();
      const answers = (await Promise.all(sends)).filter((a) => a !== null);
      await closing;
      const store = openStore(app.db.url, {});
      try {
        const ok = answers.filter((a) => a!.r.status === 200);
        expect(ok.length).toBeGreaterThan(0);
        const bad = answers.filter((a) => a!.r.status !== 200 && a!.r.status !== 503);
        expect(bad.map((a) => a!.r.status)).toEqual([]);
        const byEvent = new Map<number, Set<string>>();
        for (const a of ok) {
          const id = a!.r.json().inbox_id as string;
          const row = await store.getInbox(id);
          expect(row, `2xx ${id}`).not.toBeNull();
          expect(row!.providerEventId).toBe(`evt_close_${a!.i}`);
          (byEvent.get(a!.i) ?? byEvent.set(a!.i, new Set()).get(a!.i)!).add(id);
        }
        for (const s of byEvent.values()) expect(s.size).toBe(1);
        const c = await store.countRows();
        expect(c.inbox).toBe(c.outbox);
        expect(c.inbox).toBe(c.payload);
      } finally {
        await store.close();
      }
    } finally {
      await app.db.cleanup();
    }
  });
});
