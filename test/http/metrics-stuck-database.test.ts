import Database from 'better-sqlite3';
import pg from 'pg';
import { afterEach, expect, it } from 'vitest';
import { startTestApp, STRIPE_SECRET, type TestApp } from '../helpers/app.js';
import { stripeEvent, stripeHeaders } from '../helpers/events.js';
import { post } from '../helpers/http.js';
import { scrape, series, valueOf } from '../helpers/metric-samples.js';
import { describeEachStore } from '../helpers/stores.js';

/**
 * /metrics reads its queue gauges (inbox rows, oldest unprocessed age, outbox, effects) from the
 * database at each scrape. While the database is stuck (PostgreSQL: a table lock held by a
 * migration or an operator's session; SQLite: another process holding the write lock, a commit
 * waiting for it on the store's one thread) those reads do not answer, and the scrape waited for
 * them: commitTimeoutMs on PostgreSQL (10 s, Prometheus' default scrape_timeout), the busy timeout
 * on SQLite. The scraper gave up and every series went missing, the ones that describe the outage
 * (webhook_requests_total{outcome="unavailable"}, webhook_commit_failures_total) included. The
 * scrape must answer promptly with what this process knows, the queue gauges at their last values.
 */
describeEachStore('/metrics while the database is stuck', (kind) => {
  let app: TestApp | undefined;
  let release: (() => Promise<void>) | undefined;
  afterEach(async () => {
    await release?.();
    release = undefined;
    await app?.stop();
    app = undefined;
  });

  /** Makes the store's queue reads wait (as shipped: default timeouts); returns what ends it. */
  async function stall(a: TestApp): Promise<() => Promise<void>> {
    if (kind === 'postgres') {
      const c = new pg.Client(a.db.url);
      await c.connect();
      await c.query('BEGIN');
      await c.query('LOCK TABLE webhook_inbox IN ACCESS EXCLUSIVE MODE');
      return async () => {
        await c.query('ROLLBACK');
        await c.end();
      };
    }
    const other = new Database(a.db.url.slice('sqlite:'.length));
    other.exec('BEGIN IMMEDIATE');
    // A commit of ours now waits for that lock on the store's thread, and every read behind it.
    const body = stripeEvent('evt_stuck_behind_lock');
    const waiting = post(`${a.url}/webhooks/stripe`, body, stripeHeaders(body));
    await new Promise((r) => setTimeout(r, 200));
    return async () => {
      other.exec('ROLLBACK');
      other.close();
      await waiting;
    };
  }

  it('answers within 3 s with the counters and the last queue gauges, and fresh gauges once the database answers again', async () => {
    app = await startTestApp(kind, {});
    const body = stripeEvent('evt_before_stall');
    expect((await post(`${app.url}/webhooks/stripe`, body, stripeHeaders(body))).status).toBe(200);
    const pending = series('webhook_inbox_rows', { status: 'PENDING' });
    expect(valueOf(await scrape(app.url), pending)).toBe(1);

    release = await stall(app);
    const t0 = performance.now();
    const during = await scrape(app.url);
    const ms = performance.now() - t0;
    expect(ms, `the scrape took ${Math.round(ms)} ms`).toBeLessThan(3000);
    expect(valueOf(during, series('webhook_requests_total', { endpoint: 'stripe', outcome: 'accepted' }))).toBe(1);
    expect(valueOf(during, pending)).toBe(1); // the last value read (SQLite: read now, beside the lock, by the store's reader thread)

    await release();
    release = undefined;
    const after = await scrape(app.url);
    expect(valueOf(after, pending)).toBe(kind === 'sqlite' ? 2 : 1); // SQLite: the request that waited was accepted
  });

  // The oldest unprocessed row as last read is still waiting, or was processed since; its age
  // stood still at the last read for as long as the database did not answer, so an alert on it
  // (a backlog nobody drains) stayed quiet through the outage.
  it('the oldest unprocessed age and the relay lag go on growing from the last read while the database does not answer', async () => {
    // Routed to a broker (never reached: the workers and the relay are off here), so the event
    // also leaves an unpublished outbox row behind.
    app = await startTestApp(kind, {
      destinations: [{ id: 'bus', type: 'nats', url: 'nats://127.0.0.1:1', subject: 'wi.{provider}.{type}', timeoutMs: 1000 }],
      endpoints: [{ id: 'stripe', provider: 'stripe', secrets: [{ version: 'v1', value: STRIPE_SECRET }], routes: [{ events: ['*'], destination: 'bus' }] }],
    });
    const body = stripeEvent('evt_aging');
    expect((await post(`${app.url}/webhooks/stripe`, body, stripeHeaders(body))).status).toBe(200);
    const age = series('webhook_inbox_oldest_unprocessed_age_seconds', { endpoint: 'stripe', type: 'payment_intent.succeeded' });
    const lag = series('webhook_outbox_relay_lag_seconds');
    await new Promise((r) => setTimeout(r, 100));
    const before = await scrape(app.url);
    expect(valueOf(before, age)).toBeGreaterThan(0);
    expect(valueOf(before, lag)).toBeGreaterThan(0);

    release = await stall(app);
    const first = await scrape(app.url);
    await new Promise((r) => setTimeout(r, 1500));
    const second = await scrape(app.url);
    for (const s of [age, lag]) {
      expect(valueOf(second, s) - valueOf(first, s), `${s}: ${valueOf(first, s)} s, then ${valueOf(second, s)} s`).toBeGreaterThanOrEqual(1.4);
    }
  });
});
