import { afterAll, beforeAll, expect, it } from 'vitest';
import { describeEachStore } from '../helpers/stores.js';
import { startTestApp, type TestApp } from '../helpers/app.js';
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
