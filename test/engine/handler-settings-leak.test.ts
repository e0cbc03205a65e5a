import pino from 'pino';
import { afterEach, describe, expect, it } from 'vitest';
import { parseConfig } from '../../src/config/schema.js';
import { NeedsDecisionError } from '../../src/engine/failure.js';
import { HandlerRegistry } from '../../src/engine/handlers.js';
import { transactionControl } from '../../src/engine/tx-control.js';
import type { InboxDetail } from '../../src/store/work-port.js';
import { startWorkers } from '../../src/workers.js';
import { configDoc, startTestApp, type TestApp } from '../helpers/app.js';
import { FAST_WORKERS, waitFor } from '../helpers/engine.js';
import { stripeEvent, stripeHeaders } from '../helpers/events.js';
import { post } from '../helpers/http.js';
import { pgAvailable } from '../helpers/pg.js';

/**
 * A multi-tenant team's handler that picks its tenant's schema with `SET search_path` (or sets a
 * timeout with SET): ctx.tx is the batch's transaction, shared with the other events' handlers,
 * on a pooled connection the next batches get. The setting outlived the handler: the writes of
 * other events' handlers (other tenants') went to that tenant's tables, in its batch and in later
 * batches on the same connection. Now SET, RESET and DISCARD are refused as transaction control
 * is: that event FAILED handler_transaction_control, its writes undone, the others untouched.
 */
describe('transactionControl: session settings on PostgreSQL', () => {
  it.each(['SET search_path TO tenant_a, public', 'set local statement_timeout = 1', 'RESET ALL', 'DISCARD ALL', '/* x */ SET ROLE app'])('%j is refused', (sql) => {
    expect(transactionControl(sql, 'postgres')).toMatch(/^(SET|RESET|DISCARD)$/);
  });
  it.each(['SELECT set_config_value()', 'UPDATE t SET x = 1', 'SETTINGS', 'INSERT INTO reset (x) VALUES (1)'])('%j is not', (sql) => {
    expect(transactionControl(sql, 'postgres')).toBeUndefined();
  });
});

describe('transactionControl: PRAGMA on SQLite (the one writer connection, for the process\'s life)', () => {
  it.each(['PRAGMA query_only = 1', ' pragma busy_timeout=5000', '-- x\nPRAGMA synchronous = OFF'])('%j is refused', (sql) => {
    expect(transactionControl(sql, 'sqlite')).toBe('PRAGMA');
  });
  it.each(['SELECT 1 AS pragma', 'SET x = 1'])('%j is not', (sql) => {
    expect(transactionControl(sql, 'sqlite')).toBeUndefined();
  });
});

describe('a handler that runs PRAGMA query_only [sqlite]', () => {
  let app: TestApp | undefined;
  afterEach(async () => { await app?.stop(); app = undefined; });

  it('fails alone, and the next accepts and events are still written', async () => {
    const handlers = new HandlerRegistry().on('payment_intent.succeeded', async (e, ctx) => {
      if (e.providerEventId === 'evt_0') await ctx.tx.query('PRAGMA query_only = 1');
      await ctx.tx.query('INSERT INTO ledger (event_id) VALUES (?)', [e.providerEventId]);
    });
    app = await startTestApp('sqlite', { ...FAST_WORKERS }, {}, { workers: true, handlers });
    await app.store.transaction((tx) => tx.query('CREATE TABLE ledger (event_id TEXT NOT NULL)'));
    const send = async (id: string) => {
      const body = stripeEvent(id);
      const r = await post(`${app!.url}/webhooks/stripe`, body, stripeHeaders(body));
      expect(r.status, r.text).toBe(200);
      return r.json().inbox_id as string;
    };
    const final = (inboxId: string) => waitFor(async () => {
      const e = await app!.store.getEvent(inboxId);
      return e?.status === 'PROCESSED' || e?.status === 'FAILED' ? e : null;
    }, 20_000, `${inboxId} terminal`) as Promise<InboxDetail>;
    expect(await final(await send('evt_0'))).toMatchObject({ status: 'FAILED', failureReason: 'handler_transaction_control' });
    // Before: query_only stayed on the writer, so this accept (and every later write) failed 503.
    expect(await final(await send('evt_1'))).toMatchObject({ status: 'PROCESSED' });
    const rows = await app.store.transaction((tx) => tx.query<{ event_id: string }>('SELECT event_id FROM ledger'));
    expect(rows.map((r) => r.event_id)).toEqual(['evt_1']);
  });
});

/** Accepts evt_0…evt_{n-1} through the app's ingress (no workers): their inbox ids, in order. */
async function acceptEvents(app: TestApp, n: number): Promise<string[]> {
  const ids: string[] = [];
  for (let i = 0; i < n; i++) {
    const body = stripeEvent(`evt_${i}`);
    ids.push((await post(`${app.url}/webhooks/stripe`, body, stripeHeaders(body))).json().inbox_id as string);
  }
  return ids;
}

/** A tenant schema and a public one, each with a ledger, and 12 accepted events (evt_0…evt_11): their inbox ids by event id. */
async function tenantTablesAndTwelveEvents(app: TestApp): Promise<Map<string, string>> {
  await app.store.transaction(async (tx) => {
    await tx.query('CREATE SCHEMA tenant_a');
    await tx.query('CREATE TABLE tenant_a.ledger (event_id text NOT NULL)');
    await tx.query('CREATE TABLE public.ledger (event_id text NOT NULL)');
  });
  return new Map((await acceptEvents(app, 12)).map((id, i) => [`evt_${i}`, id]));
}

/**
 * Runs `fn` beside a work process's workers with small batches on few connections, so handlers
 * share their batch's transaction and later batches run where earlier ones ran.
 */
async function withWorkers(app: TestApp, handlers: HandlerRegistry, concurrency: number, fn: () => Promise<void>): Promise<void> {
  const config = parseConfig(configDoc(app.db.url, { ...FAST_WORKERS, workers: { ...FAST_WORKERS.workers, batchSize: 3, concurrency } }));
  const workers = await startWorkers(config, { handlers, logger: pino({ level: 'silent' }), migrate: false });
  try {
    await fn();
  } finally {
    await workers.stop();
  }
}

/** The event once PROCESSED or FAILED, or (`orRetried`) once attempted a second time. */
const settled = (app: TestApp, inboxId: string, label: string, orRetried = false) => waitFor(async () => {
  const e = await app.store.getEvent(inboxId);
  return e && (e.status === 'PROCESSED' || e.status === 'FAILED' || (orRetried && e.attemptCount > 1)) ? e : null;
}, 20_000, `${label} settled`) as Promise<InboxDetail>;

(await pgAvailable() ? describe : describe.skip)('a handler that SETs search_path [postgres]', () => {
  let app: TestApp | undefined;
  afterEach(async () => { await app?.stop(); app = undefined; });

  it("fails alone; no other event's write goes to its tenant's tables", async () => {
    app = await startTestApp('postgres', { ...FAST_WORKERS }, {}, { workers: false });
    const ids = await tenantTablesAndTwelveEvents(app);
    const handlers = new HandlerRegistry().on('payment_intent.succeeded', async (e, ctx) => {
      if (e.providerEventId === 'evt_0') await ctx.tx.query('SET search_path TO tenant_a, public');
      await ctx.tx.query('INSERT INTO ledger (event_id) VALUES ($1)', [e.providerEventId]);
    });
    await withWorkers(app, handlers, 3, async () => {
      expect(await settled(app!, ids.get('evt_0')!, 'evt_0')).toMatchObject({ status: 'FAILED', failureReason: 'handler_transaction_control' });
      for (let i = 1; i < 12; i++) expect(await settled(app!, ids.get(`evt_${i}`)!, `evt_${i}`), `evt_${i}`).toMatchObject({ status: 'PROCESSED' });
    });
    const [counts] = await app.store.transaction((tx) => tx.query('SELECT (SELECT count(*) FROM tenant_a.ledger)::int AS a, (SELECT count(*) FROM public.ledger)::int AS p'));
    expect(counts).toEqual({ a: 0, p: 11 });
  });
});

/**
 * SET is refused by its first word, but a setting made another way — `SELECT set_config(…)`, or
 * a function of the handler's that sets one — got past that refusal: it outlived the handler as
 * SET did, into the batch's other events (is_local true or false) and the connection's later
 * batches (false). Now what a handler set lasts until it returns: the engine resets the session's
 * settings as it releases the handler's savepoint (a handler that throws has them rolled back with
 * its writes).
 */
(await pgAvailable() ? describe : describe.skip)('a handler that sets search_path with set_config [postgres]', () => {
  let app: TestApp | undefined;
  afterEach(async () => { await app?.stop(); app = undefined; });

  it.each([false, true])("is_local %s: its own writes follow it; no other event's write goes to its tenant's tables", async (isLocal) => {
    app = await startTestApp('postgres', { ...FAST_WORKERS }, {}, { workers: false });
    const ids = await tenantTablesAndTwelveEvents(app);
    const handlers = new HandlerRegistry().on('payment_intent.succeeded', async (e, ctx) => {
      if (e.providerEventId === 'evt_0') await ctx.tx.query('SELECT set_config($1, $2, $3)', ['search_path', 'tenant_a, public', isLocal]);
      await ctx.tx.query('INSERT INTO ledger (event_id) VALUES ($1)', [e.providerEventId]);
    });
    await withWorkers(app, handlers, 3, async () => {
      for (let i = 0; i < 12; i++) expect(await settled(app!, ids.get(`evt_${i}`)!, `evt_${i}`), `evt_${i}`).toMatchObject({ status: 'PROCESSED' });
    });
    const [counts] = await app.store.transaction((tx) => tx.query('SELECT (SELECT count(*) FROM tenant_a.ledger)::int AS a, (SELECT count(*) FROM public.ledger)::int AS p'));
    expect(counts).toEqual({ a: 1, p: 11 });
  });
});

/**
 * Session state that is no setting outlived a handler the same way, on the pooled connection the
 * next batches get: a session advisory lock (`pg_advisory_lock`, easily taken for the transaction
 * one) stayed held by the engine for good, even when the handler that took it failed (a rollback
 * to its savepoint does not release it), so every other process's handler waiting on it hung; a
 * cursor stayed, and the next handler declaring it failed "already exists". Now they end with the
 * handler as its settings do.
 */
(await pgAvailable() ? describe : describe.skip)('a handler that leaves session state behind [postgres]', () => {
  let app: TestApp | undefined;
  afterEach(async () => { await app?.stop(); app = undefined; });

  it('its session advisory lock is released as it ends, whether it succeeded or failed; a cursor it left open is gone for the next handler', async () => {
    app = await startTestApp('postgres', { ...FAST_WORKERS }, {}, { workers: false });
    const ids = await acceptEvents(app, 6);
    const handlers = new HandlerRegistry().on('payment_intent.succeeded', async (e, ctx) => {
      await ctx.tx.query('DECLARE scan CURSOR WITH HOLD FOR SELECT $1::text AS event_id', [e.providerEventId]);
      await ctx.tx.query('SELECT pg_advisory_lock(4711)');
      if (e.providerEventId === 'evt_5') throw new NeedsDecisionError('test_refused', 'refused after taking the lock');
    });
    // One connection, batches of three: every handler after the first runs where the others ran.
    await withWorkers(app, handlers, 1, async () => {
      for (let i = 0; i < 5; i++) expect(await settled(app!, ids[i]!, `evt_${i}`), `evt_${i}`).toMatchObject({ status: 'PROCESSED', attemptCount: 1 });
      expect(await settled(app!, ids[5]!, 'evt_5')).toMatchObject({ status: 'FAILED', failureReason: 'test_refused' });
      // Another session can take the lock: no handler's is held by the engine's connection.
      const [got] = await app!.store.transaction((tx) => tx.query<{ ok: boolean }>('SELECT pg_try_advisory_lock(4711) AS ok'));
      expect(got).toEqual({ ok: true });
    });
  });

  // The end of a handler's savepoint must not fail on what the handler left behind: a cursor open
  // over its temporary table made the engine's own statement fail while that statement dropped the
  // handler's temporary tables (DISCARD TEMP, since taken out), and with it the transaction: the
  // event and its batch's others were retried, each time the same, though every handler succeeded.
  it('a cursor it left open over its temporary table: it is processed once, as are the other events of its batch', async () => {
    app = await startTestApp('postgres', { ...FAST_WORKERS }, {}, { workers: false });
    const ids = await acceptEvents(app, 3);
    const handlers = new HandlerRegistry().on('payment_intent.succeeded', async (e, ctx) => {
      if (e.providerEventId !== 'evt_1') return void (await ctx.tx.query('SELECT 1'));
      await ctx.tx.query('CREATE TEMP TABLE scratch AS SELECT $1::text AS event_id', [e.providerEventId]);
      await ctx.tx.query('DECLARE scan CURSOR FOR SELECT event_id FROM scratch');
      await ctx.tx.query('FETCH 1 FROM scan');
    });
    await withWorkers(app, handlers, 1, async () => {
      // Settled, or attempted again: either ends the wait.
      for (const [i, id] of ids.entries()) expect(await settled(app!, id, `evt_${i}`, true), `evt_${i}`).toMatchObject({ status: 'PROCESSED', attemptCount: 1 });
    });
  });

  it('a temporary table of its own with deferred trigger events pending (a deferred foreign key) does not fail its batch', async () => {
    app = await startTestApp('postgres', { ...FAST_WORKERS }, {}, { workers: false });
    const ids = await acceptEvents(app, 3);
    const handlers = new HandlerRegistry().on('payment_intent.succeeded', async (e, ctx) => {
      if (e.providerEventId !== 'evt_1') return void (await ctx.tx.query('SELECT 1'));
      // A temporary table may reference only temporary tables.
      await ctx.tx.query('CREATE TEMP TABLE parent (id text PRIMARY KEY) ON COMMIT DROP');
      await ctx.tx.query('INSERT INTO parent (id) VALUES ($1)', [e.providerEventId]);
      await ctx.tx.query('CREATE TEMP TABLE child (parent_id text REFERENCES parent (id) DEFERRABLE INITIALLY DEFERRED) ON COMMIT DROP');
      await ctx.tx.query('INSERT INTO child (parent_id) VALUES ($1)', [e.providerEventId]);
    });
    await withWorkers(app, handlers, 1, async () => {
      // Settled, or attempted again: either ends the wait.
      for (const [i, id] of ids.entries()) expect(await settled(app!, id, `evt_${i}`, true), `evt_${i}`).toMatchObject({ status: 'PROCESSED', attemptCount: 1 });
    });
  });
});
