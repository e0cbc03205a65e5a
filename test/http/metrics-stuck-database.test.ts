import Database from 'better-sqlite3';
import pg from 'pg';
import { afterEach, expect, it } from 'vitest';
import { startTestApp, type TestApp } from '../helpers/app.js';
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
    expect(valueOf(during, pending)).toBe(1); // the last value read

    await release();
    release = undefined;
    const after = await scrape(app.url);
    expect(valueOf(after, pending)).toBe(kind === 'sqlite' ? 2 : 1); // SQLite: the request that waited was accepted
  });
});
