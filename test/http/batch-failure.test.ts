import { captureLog } from '../helpers/log.js';
import Database from 'better-sqlite3';
import pg from 'pg';
import { afterEach, describe, expect, it } from 'vitest';
import { startApp, type RunningApp } from '../../src/app.js';
import { parseConfig } from '../../src/config/schema.js';
import { configDoc, startTestApp } from '../helpers/app.js';
import { scrapeMetrics } from '../helpers/engine.js';
import { stripeEvent, stripeHeaders } from '../helpers/events.js';
import { post, type HttpResponse } from '../helpers/http.js';
import { PG_ADMIN_URL, pgAvailable } from '../helpers/pg.js';
import { freshDatabase } from '../helpers/stores.js';

/**
 * Group commit over real HTTP: concurrent accepts share one transaction, so when that transaction
 * cannot commit, EVERY request in it must be answered 503 (none 200, none left hanging), nothing
 * may be stored, and the same events must later be accepted as new (duplicate: false).
 * The unit-level version (fake commit) is test/store/group-commit.test.ts.
 */

const N = 20;
const IDS = Array.from({ length: N }, (_, i) => `evt_batch_fail_${i}`);

const send = (url: string, id: string): Promise<HttpResponse> => {
  const body = stripeEvent(id);
  return post(`${url}/webhooks/stripe`, body, stripeHeaders(body));
};

/** The group-commit series of one /metrics scrape (a series not yet rendered, e.g. a counter never incremented, is 0). */
async function commitMetrics(url: string) {
  const scraped = await scrapeMetrics(url);
  const m = (name: string, label?: string) => {
    const v = scraped(name, label);
    return Number.isNaN(v) ? 0 : v;
  };
  return {
    batches: m('webhook_commit_batch_size_count'),
    events: m('webhook_commit_batch_size_sum'),
    singletons: m('webhook_commit_batch_size_bucket', 'le="1"'),
    failures: m('webhook_commit_failures_total'),
  };
}

/**
 * One baseline event is accepted; then, while `block()` keeps the store from committing, N distinct
 * correctly signed events are sent at once. Each must be 503 storage_unavailable with Retry-After;
 * the batch metric must show every one of them went to a store commit, in fewer commits than
 * events (so at least one failed batch held several), all of which failed. After `unblock()`
 * nothing of them is stored, and the same N events are accepted as new.
 */
async function failedBatchesThenRecovery(
  app: RunningApp,
  block: () => Promise<void>,
  unblock: () => Promise<void>,
): Promise<{ batches: number }> {
  const first = await send(app.url, 'evt_batch_baseline');
  expect(first.status, first.text).toBe(200);
  const before = await commitMetrics(app.url);
  expect(before.failures).toBe(0);

  await block();
  let answers: HttpResponse[];
  try {
    answers = await Promise.all(IDS.map((id) => send(app.url, id)));
  } finally {
    await unblock();
  }

  for (const [i, r] of answers.entries()) {
    expect(r.status, `${IDS[i]}: ${r.text}`).toBe(503);
    expect(r.json().error, IDS[i]).toBe('storage_unavailable');
    expect(r.headers['retry-after'], IDS[i]).toBe('5');
  }

  const after = await commitMetrics(app.url);
  const batches = after.batches - before.batches;
  // Every event went to the store in some commit (none was answered 503 unsent, from the queue)…
  expect(after.events - before.events).toBe(N);
  // …every commit in the window failed…
  expect(after.failures - before.failures).toBe(batches);
  // …and they were batched: fewer commits than events, so some failed batch held more than one.
  expect(batches).toBeGreaterThanOrEqual(1);
  expect(batches).toBeLessThan(N);
  expect(after.singletons - before.singletons).toBeLessThan(batches);

  // Nothing of the failed batches was stored: only the baseline event.
  expect(await app.store.countRows()).toEqual({ inbox: 1, outbox: 1, payload: 1 });

  // The store is back: the same N events are new (a committed one would answer duplicate: true).
  const again = await Promise.all(IDS.map((id) => send(app.url, id)));
  for (const [i, r] of again.entries()) {
    expect(r.status, `${IDS[i]}: ${r.text}`).toBe(200);
    expect(r.json().duplicate, IDS[i]).toBe(false);
  }
  expect(await app.store.countRows()).toEqual({ inbox: N + 1, outbox: N + 1, payload: N + 1 });
  return { batches };
}

describe('a failed group-commit batch answers 503 to all of its requests [sqlite]', () => {
  it(`${N} concurrent events while another connection holds the write lock (BEGIN IMMEDIATE, busy timeout 200 ms)`, async () => {
    const app = await startTestApp('sqlite', {}, {}, { urlSuffix: '?busyTimeoutMs=200' });
    let blocker: Database.Database | undefined;
    try {
      await failedBatchesThenRecovery(
        app,
        async () => {
          blocker = new Database(app.db.url.slice('sqlite:'.length));
          blocker.exec('BEGIN IMMEDIATE');
        },
        async () => {
          if (blocker?.inTransaction) blocker.exec('ROLLBACK');
          blocker?.close();
        },
      );
    } finally {
      await app.stop();
    }
  });
});

describe.runIf(await pgAvailable())('a failed group-commit batch answers 503 to all of its requests [postgres]', () => {
  const cleanups: (() => Promise<void>)[] = [];
  afterEach(async () => {
    for (const c of cleanups.splice(0).reverse()) await c();
  });

  it(`${N} concurrent events while another transaction holds a SHARE lock on webhook_inbox (this database's lock_timeout 300 ms)`, async () => {
    const db = await freshDatabase('postgres');
    cleanups.push(() => db.cleanup());
    // Only this throwaway database: a statement that waits 300 ms for a lock fails (55P03) instead
    // of waiting for the commit timeout. Set before the app opens its connections (warm-up).
    const dbName = new URL(db.url).pathname.slice(1);
    const admin = new pg.Client({ connectionString: PG_ADMIN_URL });
    await admin.connect();
    await admin.query(`ALTER DATABASE ${dbName} SET lock_timeout = '300ms'`);
    await admin.end();

    const lines: string[] = [];
    const config = parseConfig(configDoc(db.url, { log: { level: 'warn' } }), {});
    const app = await startApp(config, { logger: captureLog(lines, 'warn'), env: {}, workers: false, shutdownGraceMs: 200 });
    cleanups.push(() => app.close());

    const holder = new pg.Client({ connectionString: db.url });
    await holder.connect();
    cleanups.push(() => holder.end().catch(() => undefined));
    await failedBatchesThenRecovery(
      app,
      async () => {
        await holder.query('BEGIN');
        // SHARE conflicts with the ROW EXCLUSIVE lock every INSERT takes: accepts wait, then time out.
        await holder.query('LOCK TABLE webhook_inbox IN SHARE MODE');
      },
      async () => {
        await holder.query('ROLLBACK');
      },
    );
    // The 503s came from the lock, not from something else going wrong.
    const warnings = lines.map((l) => JSON.parse(l) as { msg?: string; err?: string }).filter((l) => l.msg === 'storage unavailable');
    expect(warnings.length).toBe(N);
    for (const w of warnings) expect(w.err).toMatch(/lock timeout/);
  });
});
