import pino from 'pino';
import { afterEach, describe, expect, it } from 'vitest';
import { parseConfig } from '../../src/config/schema.js';
import { HandlerRegistry } from '../../src/engine/handlers.js';
import { MAX_EFFECT_DATA_BYTES } from '../../src/engine/inbox-worker.js';
import { transactionControl } from '../../src/engine/tx-control.js';
import { openStore } from '../../src/store/open.js';
import type { InboxDetail } from '../../src/store/work-port.js';
import { startWorkers } from '../../src/workers.js';
import { configDoc, startTestApp, STRIPE_SECRET, type TestApp } from '../helpers/app.js';
import { FAST_WORKERS, waitFor } from '../helpers/engine.js';
import { stripeEvent, stripeHeaders } from '../helpers/events.js';
import { post } from '../helpers/http.js';
import { pgAvailable } from '../helpers/pg.js';
import { describeEachStore, freshDatabase } from '../helpers/stores.js';

/** Accepts each id as a signed payment_intent.succeeded event; their inbox ids, by event id. */
async function acceptEvents(app: TestApp, ids: readonly string[]): Promise<Map<string, string>> {
  const inboxIds = new Map<string, string>();
  for (const id of ids) {
    const body = stripeEvent(id, { type: 'payment_intent.succeeded' });
    const answer = await post(`${app.url}/webhooks/stripe`, body, stripeHeaders(body));
    expect(answer.status).toBe(200);
    inboxIds.set(id, answer.json().inbox_id);
  }
  return inboxIds;
}

type Terminal = (eventId: string) => Promise<InboxDetail>;

/**
 * A lease no attempt outlives on a loaded machine: these tests count attempts (attemptCount 1).
 * With FAST_WORKERS' 2 s lease, a CI run on a slow box (vitest 663 s, three files at a time) once
 * saw the 64 KiB test's event PROCESSED on its second attempt: a first attempt that outlived its
 * lease, or its handler's time limit (which is the lease), would spend one (not reproduced in
 * three runs beside three busy loops). The test of that time limit passes FAST_WORKERS' own.
 */
const COUNTING_LEASE_MS = 15_000;

/**
 * Runs `handlers` in workers over the app's database (one batch holds up to 64 events, so a
 * COMMIT there would take its neighbours' writes), hands `check` a wait for an event's terminal
 * state, and stops them.
 */
async function withWorkers(app: TestApp, inboxIds: Map<string, string>, handlers: HandlerRegistry, check: (terminal: Terminal) => Promise<void>, leaseMs = COUNTING_LEASE_MS): Promise<void> {
  const config = parseConfig(configDoc(app.db.url, { ...FAST_WORKERS, workers: { ...FAST_WORKERS.workers, batchSize: 64, concurrency: 64, leaseMs },
    endpoints: [{ id: 'stripe', provider: 'stripe', secrets: [{ version: 'v1', value: STRIPE_SECRET }] }] }));
  const workers = await startWorkers(config, { handlers, logger: pino({ level: 'silent' }), migrate: false });
  try {
    await check((id) => waitFor(async () => {
      const e = await app.store.getEvent(inboxIds.get(id)!);
      return e?.status === 'PROCESSED' || e?.status === 'FAILED' ? e : null;
    }, 20_000, `${id} terminal`));
  } finally {
    await workers.stop();
  }
}

/** The ledger's rows as [event id, count], for "applied once". */
async function ledger(app: TestApp): Promise<[string, number][]> {
  const rows = await app.store.transaction((tx) => tx.query<{ event_id: string; n: number | string }>(
    'SELECT event_id, count(*) AS n FROM ledger GROUP BY event_id ORDER BY event_id'));
  return rows.map((r) => [r.event_id, Number(r.n)]);
}

describe('transactionControl: the first words of a statement, as each database reads them', () => {
  it.each([
    ['COMMIT', 'COMMIT'], ['commit', 'COMMIT'], ['  end;', 'END'], ['Rollback', 'ROLLBACK'], ['ABORT', 'ABORT'],
    ['BEGIN', 'BEGIN'], ['START TRANSACTION', 'START'], ['SAVEPOINT mine', 'SAVEPOINT'], ['RELEASE wi_handler', 'RELEASE'],
    ['ROLLBACK TO SAVEPOINT wi_handler', 'ROLLBACK'], ['COMMIT AND CHAIN', 'COMMIT'],
    [';; COMMIT', 'COMMIT'], ['-- note\nCOMMIT', 'COMMIT'], ['/* a */ /* b */\n\tcommit', 'COMMIT'],
    ['/* outer /* inner */ still a comment */ COMMIT', 'COMMIT'], ['PREPARE  TRANSACTION \'t\'', 'PREPARE TRANSACTION'],
    ['prepare /* x */ transaction \'t\'', 'PREPARE TRANSACTION'],
  ])('PostgreSQL: %j is %s', (sql, kw) => {
    expect(transactionControl(sql, 'postgres')).toBe(kw);
  });

  it.each([
    'SELECT 1', 'INSERT INTO commits (x) VALUES (1)', 'UPDATE t SET "commit" = 1', '"COMMIT"', 'PREPARE q AS SELECT 1',
    'COMMITTED', '-- COMMIT\nSELECT 1', '/* COMMIT */ SELECT 1', '/* /* COMMIT */ */ SELECT 1', 'WITH x AS (SELECT 1) SELECT * FROM x', '',
  ])('PostgreSQL: %j is not transaction control', (sql) => {
    expect(transactionControl(sql, 'postgres')).toBeUndefined();
  });

  it('a -- comment ends at a carriage return in PostgreSQL (its lexer: newline is \\n or \\r), at \\n only in SQLite', () => {
    expect(transactionControl('-- note\rCOMMIT AND CHAIN', 'postgres')).toBe('COMMIT');
    expect(transactionControl('-- note\rROLLBACK AND CHAIN', 'postgres')).toBe('ROLLBACK');
    expect(transactionControl('PREPARE -- x\rTRANSACTION \'t\'', 'postgres')).toBe('PREPARE TRANSACTION');
    expect(transactionControl('-- note\rCOMMIT', 'sqlite')).toBeUndefined(); // all comment there
  });

  it('a word runs on through digits, $ and non-ASCII letters, as both databases read an identifier', () => {
    expect(transactionControl('PREPARE transaction1 AS SELECT 1', 'postgres')).toBeUndefined();
    expect(transactionControl('PREPARE transaction$x AS SELECT 1', 'postgres')).toBeUndefined();
    expect(transactionControl('PREPARE transactioné AS SELECT 1', 'postgres')).toBeUndefined();
    expect(transactionControl('PREPARE transaction AS SELECT 1', 'postgres')).toBe('PREPARE TRANSACTION');
    expect(transactionControl('commit;', 'postgres')).toBe('COMMIT');
  });

  it('block comments nest in PostgreSQL only; PREPARE TRANSACTION is PostgreSQL\'s', () => {
    // SQLite's comment ends at the first */: what follows is the statement.
    expect(transactionControl('/* a /* b */ COMMIT', 'sqlite')).toBe('COMMIT');
    expect(transactionControl('/* a /* b */ COMMIT', 'postgres')).toBeUndefined(); // unterminated: not a statement
    expect(transactionControl('BEGIN IMMEDIATE', 'sqlite')).toBe('BEGIN');
    expect(transactionControl('PREPARE TRANSACTION', 'sqlite')).toBeUndefined();
  });
});

describeEachStore('handler guards', (kind) => {
  let app: TestApp | undefined;
  afterEach(async () => {
    await app?.stop();
    app = undefined;
  });
  const sql = (pg: string) => (kind === 'postgres' ? pg : pg.replace(/\$\d+/g, '?'));

  it('COMMIT, ROLLBACK or several statements in ctx.tx fail that event alone, none of its writes kept, and every other event of the batch applied once', async () => {
    app = await startTestApp(kind, { ...FAST_WORKERS }, {}, { workers: false });
    await app.store.transaction((tx) => tx.query('CREATE TABLE ledger (event_id TEXT NOT NULL)'));
    const inboxIds = await acceptEvents(app, ['evt_ok_1', 'evt_commit', 'evt_rollback_caught', 'evt_release', 'evt_two_statements', 'evt_ok_2']);
    const handlers = new HandlerRegistry().on('payment_intent.succeeded', async (event, ctx) => {
      const id = event.providerEventId;
      await ctx.tx.query(sql('INSERT INTO ledger (event_id) VALUES ($1)'), [id]);
      if (id === 'evt_commit') await ctx.tx.query('COMMIT');
      if (id === 'evt_rollback_caught') await ctx.tx.query('/* undo */ ROLLBACK').catch(() => undefined);
      if (id === 'evt_release') await ctx.tx.query('RELEASE SAVEPOINT wi_handler');
      if (id === 'evt_two_statements') await ctx.tx.query(sql('SELECT 1; COMMIT'));
    }, { name: 'ledger' });
    await withWorkers(app, inboxIds, handlers, async (final) => {
      for (const id of ['evt_ok_1', 'evt_ok_2']) expect(await final(id), id).toMatchObject({ status: 'PROCESSED', attemptCount: 1 });
      for (const id of ['evt_commit', 'evt_rollback_caught', 'evt_release']) {
        const e = await final(id);
        // Its code, not a passing state: FAILED at once, not retried.
        expect(e, id).toMatchObject({ status: 'FAILED', failureReason: 'handler_transaction_control', attemptCount: 1 });
        expect(e.lastError).toMatch(/ran (COMMIT|ROLLBACK|RELEASE) in ctx\.tx/);
      }
      // The database refuses two statements in one query: an error as any other (retried, then FAILED).
      expect(await final('evt_two_statements')).toMatchObject({ status: 'FAILED', failureReason: 'retries_exhausted' });
      expect(await ledger(app!)).toEqual([['evt_ok_1', 1], ['evt_ok_2', 1]]);
    });
  });

  it('a handler that returns with a query loop still running is cut off at its time limit, its writes undone, and its batch goes on', async () => {
    app = await startTestApp(kind, { ...FAST_WORKERS }, {}, { workers: false });
    await app.store.transaction((tx) => tx.query('CREATE TABLE ledger (event_id TEXT NOT NULL)'));
    const inboxIds = await acceptEvents(app, ['evt_ok_1', 'evt_left_looping', 'evt_ok_2']);
    let loopQueries = 0;
    const handlers = new HandlerRegistry().on('payment_intent.succeeded', async (event, ctx) => {
      const id = event.providerEventId;
      await ctx.tx.query(sql('INSERT INTO ledger (event_id) VALUES ($1)'), [id]);
      // Not awaited, and never ending: before, the engine waited for it to finish, for good.
      if (id === 'evt_left_looping') {
        void (async () => {
          for (;;) {
            await ctx.tx.query('SELECT 1');
            loopQueries++;
          }
        })().catch(() => undefined);
      }
    }, { name: 'ledger' });
    await withWorkers(app, inboxIds, handlers, async (final) => {
      for (const id of ['evt_ok_1', 'evt_ok_2']) expect(await final(id), id).toMatchObject({ status: 'PROCESSED', attemptCount: 1 });
      const looping = await final('evt_left_looping');
      expect(looping).toMatchObject({ status: 'FAILED', failureReason: 'retries_exhausted', attemptCount: 3 });
      expect(looping.lastError).toMatch(/handler_timeout/);
      expect(await ledger(app!)).toEqual([['evt_ok_1', 1], ['evt_ok_2', 1]]);
    }, FAST_WORKERS.workers.leaseMs);
    expect(loopQueries).toBeGreaterThan(0); // the loop did run inside the handler's savepoint
  });

  it('processed_at is when the event\'s handlers finished, not when its batch began (the processing-latency metric counts from it)', async () => {
    app = await startTestApp(kind, { ...FAST_WORKERS }, {}, { workers: false });
    await app.store.transaction((tx) => tx.query('CREATE TABLE ledger (event_id TEXT NOT NULL)'));
    const inboxIds = await acceptEvents(app, ['evt_slow_1', 'evt_slow_2']);
    const finishedAt = new Map<string, number>();
    const handlers = new HandlerRegistry().on('payment_intent.succeeded', async (event, ctx) => {
      await ctx.tx.query(sql('INSERT INTO ledger (event_id) VALUES ($1)'), [event.providerEventId]);
      await new Promise((r) => setTimeout(r, 600));
      finishedAt.set(event.providerEventId, Date.now());
    }, { name: 'ledger' });
    await withWorkers(app, inboxIds, handlers, async (final) => {
      for (const id of ['evt_slow_1', 'evt_slow_2']) {
        const e = await final(id);
        expect(e.status).toBe('PROCESSED');
        // Before, both held the moment the batch began: the first 600 ms early, the second 1.2 s.
        expect(e.processedAtMs!, id).toBeGreaterThanOrEqual(finishedAt.get(id)! - 50);
      }
    });
  });

  it('ctx.effect data over 64 KiB of JSON fails the handler at the call, its writes undone; exactly 64 KiB is recorded and executed', async () => {
    app = await startTestApp(kind, { ...FAST_WORKERS }, {}, { workers: false });
    await app.store.transaction((tx) => tx.query('CREATE TABLE ledger (event_id TEXT NOT NULL)'));
    const inboxIds = await acceptEvents(app, ['evt_at_limit', 'evt_over_limit']);
    const executed: number[] = [];
    // {"blob":"…"} is 11 bytes around the string.
    const data = (bytes: number) => ({ blob: 'x'.repeat(bytes - 11) });
    const handlers = new HandlerRegistry()
      .on('payment_intent.succeeded', async (event, ctx) => {
        await ctx.tx.query(sql('INSERT INTO ledger (event_id) VALUES ($1)'), [event.providerEventId]);
        ctx.effect('archive', data(event.providerEventId === 'evt_at_limit' ? MAX_EFFECT_DATA_BYTES : MAX_EFFECT_DATA_BYTES + 1));
      })
      .effect('archive', (d) => void executed.push(JSON.stringify(d).length));
    await withWorkers(app, inboxIds, handlers, async (final) => {
      expect(await final('evt_at_limit')).toMatchObject({ status: 'PROCESSED', attemptCount: 1 });
      const over = await final('evt_over_limit');
      expect(over).toMatchObject({ status: 'FAILED', failureReason: 'retries_exhausted' });
      expect(over.lastError).toContain(`data is ${MAX_EFFECT_DATA_BYTES + 1} bytes of JSON, over the limit of ${MAX_EFFECT_DATA_BYTES}`);
      await waitFor(() => executed.length === 1 || null, 5000, 'the effect at the limit executed');
      expect(executed).toEqual([MAX_EFFECT_DATA_BYTES]);
      expect(await app!.store.listEffects(inboxIds.get('evt_over_limit')!)).toEqual([]);
      expect(await ledger(app!)).toEqual([['evt_at_limit', 1]]);
    });
  });

  it('the store: once a statement ends the transaction, nothing after it runs on its own', async () => {
    const db = await freshDatabase(kind);
    const store = openStore(db.url);
    try {
      await store.migrate();
      await store.transaction((tx) => tx.query('CREATE TABLE notes (note TEXT NOT NULL)'));
      const run = store.transaction(async (tx) => {
        await tx.query(sql('INSERT INTO notes (note) VALUES ($1)'), ['before']);
        await tx.query('COMMIT').catch(() => undefined);
        await tx.query(sql('INSERT INTO notes (note) VALUES ($1)'), ['after']);
      });
      await expect(run).rejects.toThrow(/ended by a statement inside it/);
      const notes = await store.transaction((tx) => tx.query<{ note: string }>('SELECT note FROM notes'));
      // 'before' is what that COMMIT committed; 'after' would have been committed in autocommit.
      expect(notes.map((n) => n.note)).toEqual(['before']);
    } finally {
      await store.close();
      await db.cleanup();
    }
  });
});

describe.runIf(await pgAvailable())('PostgreSQL: transaction control behind a -- comment ended by a carriage return', () => {
  let app: TestApp | undefined;
  afterEach(async () => {
    await app?.stop();
    app = undefined;
  });

  it('COMMIT AND CHAIN (the server still reports a transaction) is refused: no write committed without its marker, none applied twice', async () => {
    app = await startTestApp('postgres', { ...FAST_WORKERS }, {}, { workers: false });
    await app.store.transaction((tx) => tx.query('CREATE TABLE ledger (event_id TEXT NOT NULL)'));
    const inboxIds = await acceptEvents(app, ['evt_ok', 'evt_chain']);
    const handlers = new HandlerRegistry().on('payment_intent.succeeded', async (event, ctx) => {
      await ctx.tx.query('INSERT INTO ledger (event_id) VALUES ($1)', [event.providerEventId]);
      // PostgreSQL's -- comment ends at \r: the server runs COMMIT AND CHAIN.
      if (event.providerEventId === 'evt_chain') await ctx.tx.query('-- done\rCOMMIT AND CHAIN');
    }, { name: 'ledger' });
    await withWorkers(app, inboxIds, handlers, async (final) => {
      const ok = await final('evt_ok');
      const chain = await final('evt_chain');
      expect(await ledger(app!)).toEqual([['evt_ok', 1]]);
      expect(ok).toMatchObject({ status: 'PROCESSED', attemptCount: 1 });
      expect(chain).toMatchObject({ status: 'FAILED', failureReason: 'handler_transaction_control', attemptCount: 1 });
    });
  });
});

describe.runIf(await pgAvailable())('PostgreSQL: a statement that only looks like transaction control', () => {
  let app: TestApp | undefined;
  afterEach(async () => {
    await app?.stop();
    app = undefined;
  });

  it('PREPARE transaction1 AS … (a statement named transaction1, not PREPARE TRANSACTION) runs: the event is PROCESSED', async () => {
    app = await startTestApp('postgres', { ...FAST_WORKERS }, {}, { workers: false });
    const inboxIds = await acceptEvents(app, ['evt_prepare']);
    const handlers = new HandlerRegistry().on('payment_intent.succeeded', async (_event, ctx) => {
      await ctx.tx.query('PREPARE transaction1 AS SELECT 1');
      await ctx.tx.query('DEALLOCATE transaction1');
    }, { name: 'prepare' });
    await withWorkers(app, inboxIds, handlers, async (final) => {
      expect(await final('evt_prepare')).toMatchObject({ status: 'PROCESSED', attemptCount: 1 });
    });
  });
});

describe('SQLite: /readyz while a handler holds the one writer', () => {
  let app: TestApp | undefined;
  afterEach(async () => {
    await app?.stop();
    app = undefined;
  });

  it('answers ready at once, not after the handler\'s transaction (a 1 s readiness probe would take the server out)', async () => {
    let release: () => void = () => undefined;
    const holding = new Promise<void>((resolve) => { release = resolve; });
    let inTx: () => void = () => undefined;
    const began = new Promise<void>((resolve) => { inTx = resolve; });
    const handlers = new HandlerRegistry().on('payment_intent.succeeded', async (_event, ctx) => {
      await ctx.tx.query('SELECT 1 AS x'); // BEGIN IMMEDIATE: the writer is this transaction's now
      inTx();
      await holding;
    });
    app = await startTestApp('sqlite', { ...FAST_WORKERS, workers: { ...FAST_WORKERS.workers, leaseMs: 10_000 } }, {}, { workers: true, handlers });
    try {
      const body = stripeEvent('evt_slow', { type: 'payment_intent.succeeded' });
      expect((await post(`${app.url}/webhooks/stripe`, body, stripeHeaders(body))).status).toBe(200);
      await began;
      const t0 = Date.now();
      const ready = await post(`${app.url}/readyz`, '', {}, 'GET');
      const ms = Date.now() - t0;
      expect(ready.status).toBe(200);
      // Before: the ping waited in the writer's queue until the handler's transaction ended, here
      // at its 5 s limit (half the store's txTimeoutMs). Measured now: a few ms.
      expect(ms).toBeLessThan(3000);
    } finally {
      release();
    }
  });
});
