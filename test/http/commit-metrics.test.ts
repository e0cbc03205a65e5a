import Database from 'better-sqlite3';
import pg from 'pg';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { startTestApp, type TestApp } from '../helpers/app.js';
import { stripeEvent, stripeHeaders } from '../helpers/events.js';
import { post } from '../helpers/http.js';
import { changes, scrape, series, valueOf, type Samples } from '../helpers/metric-samples.js';
import { describeEachStore } from '../helpers/stores.js';

/**
 * The group-commit histograms (app.ts observes both once per batch the committer runs):
 * `webhook_db_commit_latency_seconds` one observation per commit transaction, and
 * `webhook_commit_batch_size` the records that transaction carried. So, exactly:
 *   latency _count = batch-size _count = commits;  batch-size _sum = records submitted,
 * where a retried (duplicate) delivery is submitted too (its INSERT … ON CONFLICT finds the
 * winner), and a request refused before step 8 commits nothing.
 */
const LATENCY = 'webhook_db_commit_latency_seconds';
const BATCH = 'webhook_commit_batch_size';

/** The deltas of one histogram's _count, _sum and +Inf bucket between two scrapes. */
function histogramDelta(before: Samples, after: Samples, name: string) {
  const d = (key: string) => valueOf(after, key) - valueOf(before, key);
  return { count: d(`${name}_count`), sum: d(`${name}_sum`), inf: d(series(`${name}_bucket`, { le: '+Inf' })) };
}

describeEachStore('group-commit metrics', (kind) => {
  let app: TestApp;
  const url = () => `${app.url}/webhooks/stripe`;
  beforeAll(async () => {
    // A batch of fewer than 8 lingers 50 ms for company: a burst sent together shares commits.
    app = await startTestApp(kind, { groupCommit: { maxWaitMs: 50 } });
  });
  afterAll(async () => {
    await app?.stop();
  });

  it('one commit per request answered before the next is sent (accepted or duplicate); refusals commit nothing', async () => {
    const rows = await app.store.countRows();
    const before = await scrape(app.url);
    const first = stripeEvent('evt_cm_seq_0');
    for (let i = 0; i < 3; i++) {
      const body = i === 0 ? first : stripeEvent(`evt_cm_seq_${i}`);
      const r = await post(url(), body, stripeHeaders(body));
      expect(r.json(), r.text).toEqual({ inbox_id: expect.any(String), duplicate: false });
    }
    const again = await post(url(), first, stripeHeaders(first));
    expect(again.json(), again.text).toMatchObject({ duplicate: true });
    // Refused at steps 5 and 7: never submitted.
    expect((await post(url(), first, stripeHeaders(first, 'whsec_wrong'))).status).toBe(401);
    const notJson = Buffer.from('{"id":"evt_cm_broken",');
    expect((await post(url(), notJson, stripeHeaders(notJson))).status).toBe(400);
    const after = await scrape(app.url);

    const latency = histogramDelta(before, after, LATENCY);
    const batch = histogramDelta(before, after, BATCH);
    expect(latency.count).toBe(4);
    expect(latency.inf).toBe(4);
    expect(latency.sum).toBeGreaterThan(0);
    expect(batch).toEqual({ count: 4, sum: 4, inf: 4 });
    // Every batch of one: the le="1" bucket took all four.
    expect(valueOf(after, series(`${BATCH}_bucket`, { le: '1' })) - valueOf(before, series(`${BATCH}_bucket`, { le: '1' }))).toBe(4);
    expect(changes(before, after, 'webhook_commit_failures_total')).toEqual({});
    expect((await app.store.countRows()).inbox).toBe(rows.inbox + 3);
  });

  it('a burst of distinct events: batch-size _sum = events = rows stored; fewer commits than events, both histograms counting each commit', async () => {
    const N = 6;
    const rows = await app.store.countRows();
    const before = await scrape(app.url);
    const bodies = Array.from({ length: N }, (_, i) => stripeEvent(`evt_cm_burst_${i}`));
    const answers = await Promise.all(bodies.map((b) => post(url(), b, stripeHeaders(b))));
    for (const r of answers) expect(r.json(), r.text).toEqual({ inbox_id: expect.any(String), duplicate: false });
    const after = await scrape(app.url);

    const latency = histogramDelta(before, after, LATENCY);
    const batch = histogramDelta(before, after, BATCH);
    expect(batch.sum).toBe(N);
    expect((await app.store.countRows()).inbox - rows.inbox).toBe(N);
    expect(batch.count).toBe(latency.count);
    expect(batch.inf).toBe(batch.count);
    expect(latency.inf).toBe(latency.count);
    expect(batch.count).toBeGreaterThanOrEqual(1);
    expect(batch.count).toBeLessThan(N); // group commit: they shared at least one transaction
  });

  it('a commit held up ~200 ms by another connection\'s lock is observed in seconds: at least 0.15 s, at most the client\'s round trip', async () => {
    // Another connection blocks writes (SQLite: the write lock; PostgreSQL: a SHARE lock on the inbox), then lets go.
    let release: () => Promise<void>;
    if (kind === 'sqlite') {
      const blocker = new Database(app.db.url.slice('sqlite:'.length));
      blocker.exec('BEGIN IMMEDIATE');
      release = async () => { blocker.exec('ROLLBACK'); blocker.close(); };
    } else {
      const blocker = new pg.Client({ connectionString: app.db.url });
      await blocker.connect();
      await blocker.query('BEGIN');
      await blocker.query('LOCK TABLE webhook_inbox IN SHARE MODE');
      release = async () => { await blocker.query('COMMIT'); await blocker.end(); };
    }
    const before = await scrape(app.url);
    const body = stripeEvent('evt_cm_held');
    const started = performance.now();
    const answer = post(url(), body, stripeHeaders(body));
    await new Promise((r) => setTimeout(r, 250));
    await release();
    const r = await answer;
    const roundTrip = (performance.now() - started) / 1000;
    expect(r.json(), r.text).toEqual({ inbox_id: expect.any(String), duplicate: false });
    const latency = histogramDelta(before, await scrape(app.url), LATENCY);
    expect(latency.count).toBe(1);
    expect(latency.sum).toBeGreaterThanOrEqual(0.15);
    expect(latency.sum).toBeLessThanOrEqual(roundTrip);
  });
});

/**
 * `webhook_ack_latency_seconds{endpoint,outcome}`: one observation per request, in seconds, from the
 * request's start to its answer. An accept waits out the 50 ms linger before its commit, so its
 * ack latency is at least 0.05 s and at most the round trip the client itself measured.
 */
describeEachStore('ack latency metric', (kind) => {
  let app: TestApp;
  beforeAll(async () => {
    app = await startTestApp(kind, { groupCommit: { maxWaitMs: 50 } });
  });
  afterAll(async () => {
    await app?.stop();
  });

  it('an accepted request is observed once, in seconds: at least the linger before its commit, at most the client\'s round trip', async () => {
    const name = 'webhook_ack_latency_seconds';
    const before = await scrape(app.url);
    const body = stripeEvent('evt_ack_latency');
    const started = performance.now();
    const r = await post(`${app.url}/webhooks/stripe`, body, stripeHeaders(body));
    const roundTrip = (performance.now() - started) / 1000;
    expect(r.json(), r.text).toEqual({ inbox_id: expect.any(String), duplicate: false });
    const after = await scrape(app.url);
    const d = (key: string) => valueOf(after, key) - valueOf(before, key);
    expect(d(series(`${name}_count`, { endpoint: 'stripe', outcome: 'accepted' }))).toBe(1);
    const observed = d(series(`${name}_sum`, { endpoint: 'stripe', outcome: 'accepted' }));
    expect(observed).toBeGreaterThanOrEqual(0.045);
    expect(observed).toBeLessThanOrEqual(roundTrip);
  });
});
