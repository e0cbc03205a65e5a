import pino from 'pino';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { startApp } from '../../src/app.js';
import { parseConfig } from '../../src/config/schema.js';
import { openStore } from '../../src/store/open.js';
import type { AcceptRecord } from '../../src/store/port.js';
import { describeEachStore, freshDatabase } from '../helpers/stores.js';
import { configDoc, startTestApp, type TestApp } from '../helpers/app.js';
import { post } from '../helpers/http.js';
import { stripeEvent, stripeHeaders } from '../helpers/events.js';

describeEachStore('concurrent deliveries', (kind) => {
  let app: TestApp;
  beforeAll(async () => { app = await startTestApp(kind); });
  afterAll(async () => { await app?.stop(); });

  it('300 concurrent copies of one event: all 2xx, exactly one inbox row and one outbox row', async () => {
    const body = stripeEvent('evt_storm', { size: 4096 });
    const headers = stripeHeaders(body);
    const answers = await Promise.all(Array.from({ length: 300 }, () => post(`${app.url}/webhooks/stripe`, body, headers)));
    expect(answers.every((a) => a.status === 200)).toBe(true);
    const parsed = answers.map((a) => a.json() as { inbox_id: string; duplicate: boolean });
    expect(parsed.filter((p) => !p.duplicate)).toHaveLength(1);
    expect(new Set(parsed.map((p) => p.inbox_id)).size).toBe(1);
    expect(await app.store.countRows()).toEqual({ inbox: 1, outbox: 1, payload: 1 });
    expect(app.metrics.requests.get(['stripe', 'accepted'])).toBe(1);
    expect(app.metrics.requests.get(['stripe', 'duplicate'])).toBe(299);
  });

  it('group commit: concurrent distinct events share transactions', async () => {
    const before = await app.store.countRows();
    const n = 200;
    const answers = await Promise.all(Array.from({ length: n }, (_, i) => {
      const body = stripeEvent(`evt_group_${i}`);
      return post(`${app.url}/webhooks/stripe`, body, stripeHeaders(body));
    }));
    expect(answers.every((a) => a.status === 200 && a.json().duplicate === false)).toBe(true);
    const after = await app.store.countRows();
    expect(after.inbox - before.inbox).toBe(n);
    // Fewer commits than requests proves batching; every request was answered after its commit.
    const metrics = app.metrics.registry.render();
    const commits = Number(/webhook_commit_batch_size_count (\d+)/.exec(metrics)![1]);
    const batched = Number(/webhook_commit_batch_size_sum (\d+)/.exec(metrics)![1]);
    expect(batched).toBeGreaterThanOrEqual(n);
    expect(commits).toBeLessThan(batched);
  });
});

/**
 * The group committer takes each store's own defaults (SQLite: one batch at a time, its one
 * writer; PostgreSQL: up to 4, its accept pool) unless the config sets them. Observed at the
 * store: every batch is held for a while, and the most batches ever in flight at once is counted.
 */
describeEachStore('group commit defaults per store', (kind) => {
  async function maxConcurrentBatches(groupCommit: Record<string, unknown>): Promise<{ seen: number; defaults: number }> {
    const db = await freshDatabase(kind);
    const real = openStore(db.url);
    let inFlight = 0;
    let seen = 0;
    // The real store, with each acceptBatch held 40 ms so that batches overlap when they may.
    const store = new Proxy(real, {
      get(target, prop) {
        if (prop === 'acceptBatch') {
          return async (records: readonly AcceptRecord[]) => {
            seen = Math.max(seen, ++inFlight);
            try {
              await new Promise((r) => setTimeout(r, 40));
              return await target.acceptBatch(records);
            } finally {
              inFlight--;
            }
          };
        }
        const v = Reflect.get(target, prop, target) as unknown;
        return typeof v === 'function' ? v.bind(target) : v;
      },
    });
    const config = parseConfig(configDoc(db.url, { groupCommit: { maxBatch: 8, ...groupCommit } }));
    const app = await startApp(config, { logger: pino({ level: 'silent' }), store, workers: false });
    try {
      const answers = await Promise.all(Array.from({ length: 60 }, (_, i) => {
        const body = stripeEvent(`evt_wiring_${i}`);
        return post(`${app.url}/webhooks/stripe`, body, stripeHeaders(body));
      }));
      expect(answers.every((a) => a.status === 200)).toBe(true);
      expect((await real.countRows()).inbox).toBe(60);
      return { seen, defaults: real.groupCommitDefaults.maxInFlight };
    } finally {
      await app.close();
      await real.close();
      await db.cleanup();
    }
  }

  it('without groupCommit.maxInFlight: as many batches at once as the store allows, and no more', async () => {
    const { seen, defaults } = await maxConcurrentBatches({});
    expect(defaults).toBe(kind === 'sqlite' ? 1 : 4);
    expect(seen).toBe(defaults);
  });

  it('groupCommit.maxInFlight in the config wins over the store default', async () => {
    expect((await maxConcurrentBatches({ maxInFlight: 2 })).seen).toBe(2);
  });
});
