import Database from 'better-sqlite3';
import pino from 'pino';
import type pg from 'pg';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { startApp } from '../../src/app.js';
import { parseConfig } from '../../src/config/schema.js';
import { HandlerRegistry } from '../../src/engine/handlers.js';
import { startWorkers } from '../../src/workers.js';
import { configDoc, startTestApp, type TestApp } from '../helpers/app.js';
import { waitFor } from '../helpers/engine.js';
import { sendStripeEvent } from '../helpers/events.js';
import { pgAvailable, PG_REQUIRED } from '../helpers/pg.js';
import { proxiedPostgres } from '../helpers/tcp-proxy.js';

/**
 * The database failing for a moment while the engine settles a batch (its link frozen or cut, a
 * backend restarted, SQLite's write lock held by another process) is no failure of the events:
 * their handlers are fine. They must end PROCESSED, each mutation applied once, without spending
 * attempts on it — not FAILED `attempts_abandoned` ("its worker crashed, hung past its lease").
 */

const ledgerHandler = (before?: (eventId: string) => Promise<void>) => new HandlerRegistry().on('payment_intent.*', async (event, ctx) => {
  await ctx.tx.query(ctx.tx.kind === 'postgres' ? 'INSERT INTO ledger (event_id) VALUES ($1)' : 'INSERT INTO ledger (event_id) VALUES (?)', [event.providerEventId]);
  await before?.(event.providerEventId);
}, { version: '1', name: 'ledger' });

describe.runIf(PG_REQUIRED || (await pgAvailable()))('the store failing while a batch settles [postgres]', () => {
  const cleanups: (() => Promise<void>)[] = [];
  afterAll(async () => { for (const c of cleanups.reverse()) await c(); });

  /** The app on the proxied database (its workers on or off), its config, and an empty ledger table. */
  const ledgerApp = async (url: string, direct: pg.Client, over: Record<string, unknown>, opts: { workers: boolean; handlers: HandlerRegistry }) => {
    const config = parseConfig(configDoc(url, over), {});
    const app = await startApp(config, { logger: pino({ level: 'silent' }), env: {}, shutdownGraceMs: 200, ...opts });
    cleanups.push(() => app.close());
    await direct.query('CREATE TABLE ledger (event_id text NOT NULL)');
    return { app, config };
  };

  it('a settle frozen three times in a row (finishBatch never answered): PROCESSED on its first attempt, once', async () => {
    const { proxy, url, direct } = await proxiedPostgres(cleanups);
    // commitTimeoutMs is the pool's query timeout: a frozen statement fails after 500 ms.
    const { app } = await ledgerApp(url, direct, {
      groupCommit: { commitTimeoutMs: 500 },
      workers: { pollMs: 50, leaseMs: 5000 },
      retry: { baseMs: 10, capMs: 40, maxAttempts: 3 },
    }, { workers: true, handlers: ledgerHandler() });

    // Each settle's last statement (FINISH_BATCH) goes unanswered, three times.
    let frozen = 0;
    proxy.silenceAt((c) => c.includes(Buffer.from('WITH settled AS')));
    expect((await sendStripeEvent(app.url, 'evt_frozen')).status).toBe(200);
    await waitFor(async () => {
      if (proxy.trapArmed) return null;
      if (++frozen < 3) proxy.silenceAt((c) => c.includes(Buffer.from('WITH settled AS')));
      return frozen >= 3 || null;
    }, 20_000, 'three frozen settles');

    const row = () => direct.query('SELECT status, attempt_count, failure_reason FROM webhook_inbox').then((r) => r.rows[0]);
    const final = await waitFor(async () => { const r = await row(); return r.status !== 'PENDING' && r.status !== 'PROCESSING' ? r : null; }, 30_000, 'settled');
    const ledger = (await direct.query('SELECT count(*)::int AS n FROM ledger')).rows[0].n;
    expect(frozen).toBe(3);
    expect(final).toEqual({ status: 'PROCESSED', attempt_count: 1, failure_reason: null });
    expect(ledger).toBe(1);
  }, 60_000);

  it('every connection cut for 1.5 s while a batch\'s handlers run (maxAttempts 1): each event PROCESSED, once', async () => {
    const { proxy, url, direct } = await proxiedPostgres(cleanups);
    let first = true;
    let entered!: () => void;
    const inHandler = new Promise<void>((r) => (entered = r));
    let release!: () => void;
    const released = new Promise<void>((r) => (release = r));
    // The first run of the batch waits, its write done, while the database goes away and comes back.
    const handlers = ledgerHandler(async () => {
      if (!first) return;
      first = false;
      entered();
      await released;
    });
    const { app, config } = await ledgerApp(url, direct, {
      groupCommit: { commitTimeoutMs: 1000 },
      workers: { pollMs: 50, leaseMs: 5000, gatherMs: 0 },
      retry: { baseMs: 10, capMs: 40, maxAttempts: 1 },
    }, { workers: false, handlers: handlers });
    const N = 4;
    for (let i = 0; i < N; i++) expect((await sendStripeEvent(app.url, `evt_cut_${i}`)).status).toBe(200);
    // Workers started after the accepts: the four events are one batch.
    const workers = await startWorkers(config, { logger: pino({ level: 'silent' }), env: {}, handlers });
    cleanups.push(() => workers.stop());
    await inHandler;
    await proxy.stop();
    await new Promise((r) => setTimeout(r, 1500));
    await proxy.start(proxy.port);
    release();

    const rows = () => direct.query('SELECT status, attempt_count, failure_reason FROM webhook_inbox ORDER BY inbox_id').then((r) => r.rows);
    const final = await waitFor(async () => { const r = await rows(); return r.every((x) => x.status !== 'PENDING' && x.status !== 'PROCESSING') ? r : null; }, 30_000, 'settled');
    const dup = (await direct.query('SELECT event_id FROM ledger GROUP BY event_id HAVING count(*) <> 1')).rows;
    const ledger = (await direct.query('SELECT count(DISTINCT event_id)::int AS n FROM ledger')).rows[0].n;
    expect(final).toEqual(Array.from({ length: N }, () => ({ status: 'PROCESSED', attempt_count: 1, failure_reason: null })));
    expect(dup).toEqual([]);
    expect(ledger).toBe(N);
  }, 60_000);

  it('stopping the workers while a settle waits for the store does not wait out the lease', async () => {
    const { proxy, url, direct } = await proxiedPostgres(cleanups);
    let entered!: () => void;
    const inHandler = new Promise<void>((r) => (entered = r));
    let release!: () => void;
    const released = new Promise<void>((r) => (release = r));
    const handlers = ledgerHandler(async () => {
      entered();
      await released;
    });
    // A long lease: the settle would be tried again for 30 s.
    const { app, config } = await ledgerApp(url, direct, {
      groupCommit: { commitTimeoutMs: 1000 },
      workers: { pollMs: 50, leaseMs: 30_000 },
      retry: { baseMs: 10, capMs: 40, maxAttempts: 3 },
    }, { workers: false, handlers: handlers });
    expect((await sendStripeEvent(app.url, 'evt_stop')).status).toBe(200);
    const workers = await startWorkers(config, { logger: pino({ level: 'silent' }), env: {}, handlers });
    await inHandler;
    await proxy.stop(); // the database is gone, and stays gone
    release();
    await new Promise((r) => setTimeout(r, 500)); // the settle has failed, and waits to try again
    const t0 = performance.now();
    await workers.stop();
    // Before, stop waited for the retries, a lease (30 s) from the first failure.
    expect(performance.now() - t0).toBeLessThan(10_000);
    await proxy.start(proxy.port);
    // Nothing was settled: the event is still leased, not FAILED, and nothing applied.
    expect((await direct.query('SELECT status FROM webhook_inbox')).rows).toEqual([{ status: 'PROCESSING' }]);
    expect((await direct.query('SELECT count(*)::int AS n FROM ledger')).rows[0].n).toBe(0);
  }, 60_000);

  it('but a handler that hangs in its own query (client-side timeout, every attempt) still ends FAILED, nothing applied', async () => {
    const { url, direct } = await proxiedPostgres(cleanups);
    let runs = 0;
    const handlers = new HandlerRegistry().on('payment_intent.*', async (event, ctx) => {
      runs++;
      await ctx.tx.query('INSERT INTO ledger (event_id) VALUES ($1)', [event.providerEventId]);
      await ctx.tx.query('SELECT pg_sleep(1)');
    }, { version: '1', name: 'ledger' });
    const { app } = await ledgerApp(url, direct, {
      groupCommit: { commitTimeoutMs: 300 },
      workers: { pollMs: 50, leaseMs: 3000 },
      retry: { baseMs: 10, capMs: 40, maxAttempts: 2 },
    }, { workers: true, handlers: handlers });
    expect((await sendStripeEvent(app.url, 'evt_hangs')).status).toBe(200);
    const row = () => direct.query('SELECT status, attempt_count, failure_reason FROM webhook_inbox').then((r) => r.rows[0]);
    const final = await waitFor(async () => { const r = await row(); return r.status === 'FAILED' || r.status === 'PROCESSED' ? r : null; }, 30_000, 'FAILED');
    // Once an attempt: its failing settle is not tried again within the attempt, and the attempts count.
    expect(final).toMatchObject({ status: 'FAILED', failure_reason: 'attempts_abandoned' });
    expect(runs).toBe(2);
    expect((await direct.query('SELECT count(*)::int AS n FROM ledger')).rows[0].n).toBe(0);
  }, 60_000);
});

describe('the store failing while a batch settles [sqlite]', () => {
  let app: TestApp | undefined;
  afterEach(async () => { await app?.stop(); app = undefined; });

  it('another process holding the write lock past busyTimeoutMs as a handler begins (maxAttempts 1): PROCESSED, once', async () => {
    let first = true;
    let entered!: () => void;
    const inHandler = new Promise<void>((r) => (entered = r));
    let locked!: () => void;
    const lockTaken = new Promise<void>((r) => (locked = r));
    // The handler's first statement begins the transaction: it waits for the write lock, then gives up.
    const handlers = new HandlerRegistry().on('payment_intent.*', async (event, ctx) => {
      if (first) {
        first = false;
        entered();
        await lockTaken;
      }
      await ctx.tx.query('INSERT INTO ledger (event_id) VALUES (?)', [event.providerEventId]);
    }, { version: '1', name: 'ledger' });
    app = await startTestApp('sqlite', {
      workers: { pollMs: 50, leaseMs: 5000 },
      retry: { baseMs: 10, capMs: 40, maxAttempts: 1 },
    }, {}, { workers: true, handlers, urlSuffix: '?busyTimeoutMs=200' });
    await app.store.transaction((tx) => tx.query('CREATE TABLE ledger (event_id TEXT NOT NULL)'));
    expect((await sendStripeEvent(app.url, 'evt_busy')).status).toBe(200);
    await inHandler;
    const other = new Database(app.db.url.slice('sqlite:'.length));
    other.exec('BEGIN IMMEDIATE');
    locked();
    await new Promise((r) => setTimeout(r, 1000));
    other.exec('COMMIT');
    other.close();

    const row = async () => (await app!.store.listEvents({}))[0]!;
    const final = await waitFor(async () => { const r = await row(); return r.status !== 'PENDING' && r.status !== 'PROCESSING' ? r : null; }, 30_000, 'settled');
    const ledger = await app.store.transaction((tx) => tx.query<{ n: number }>('SELECT count(*) AS n FROM ledger'));
    expect({ status: final.status, attempts: final.attemptCount, reason: final.failureReason }).toEqual({ status: 'PROCESSED', attempts: 1, reason: null });
    expect(ledger[0]!.n).toBe(1);
  }, 60_000);
});
