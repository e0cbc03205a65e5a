import pino from 'pino';
import { afterEach, describe, expect, it } from 'vitest';
import { parseConfig } from '../../src/config/schema.js';
import { HandlerRegistry } from '../../src/engine/handlers.js';
import { startWorkers } from '../../src/workers.js';
import { configDoc, startTestApp, STRIPE_SECRET, type TestApp } from '../helpers/app.js';
import { FAST_WORKERS, waitFor } from '../helpers/engine.js';
import { stripeEvent, stripeHeaders } from '../helpers/events.js';
import { post } from '../helpers/http.js';
import { pgAvailable, PG_REQUIRED } from '../helpers/pg.js';
import { describeEachStore } from '../helpers/stores.js';

const endpoint = () => ({ id: 'stripe', provider: 'stripe', secrets: [{ version: 'v1', value: STRIPE_SECRET }] });

/**
 * A settle transaction a handler began (it wrote) rolls back whole when one of its rows was taken
 * over (LeaseLostError). The other events of that wave are still this claim's: they must settle,
 * not wait out their lease and spend another attempt (their last one: attempts_abandoned, though
 * their handler succeeded).
 */
describeEachStore('a lease lost on one event of a wave', (kind) => {
  let app: TestApp | undefined;
  afterEach(async () => {
    await app?.stop();
    app = undefined;
  });

  it('the wave\'s other events still settle PROCESSED on their first attempt, each mutation once', async () => {
    app = await startTestApp(kind, { ...FAST_WORKERS }, {}, { workers: false });
    await stealOneOfTwo(app, kind, 1);
  });
});

/**
 * On PostgreSQL a settle runs at most 64 handlers: with 40 handlers an event, each event of the
 * wave settles in a transaction of its own. A lease lost on the first one must not leave the next
 * one unsettled (its own attempt then spent: attempts_abandoned).
 */
describe.runIf(PG_REQUIRED || (await pgAvailable()))('a lease lost on one event of a wave settled in several transactions [postgres]', () => {
  let app: TestApp | undefined;
  afterEach(async () => {
    await app?.stop();
    app = undefined;
  });

  it('the later transactions of the wave still settle their events', async () => {
    app = await startTestApp('postgres', { ...FAST_WORKERS }, {}, { workers: false });
    await stealOneOfTwo(app, 'postgres', 40);
  });
});

/** Two events claimed together; one handler waits (before writing) until a thief took one of the rows over. */
async function stealOneOfTwo(app: TestApp, kind: 'sqlite' | 'postgres', handlerCount: number): Promise<void> {
  const sql = (s: string) => (kind === 'postgres' ? s : s.replace(/\$\d+/g, '?'));
  await app.store.transaction((tx) => tx.query('CREATE TABLE ledger (event_id TEXT NOT NULL)'));
  const ids = new Map<string, string>();
  for (const e of ['evt_lw_1', 'evt_lw_2']) {
    const body = stripeEvent(e);
    const r = await post(`${app.url}/webhooks/stripe`, body, stripeHeaders(body));
    expect(r.status).toBe(200);
    ids.set(e, r.json().inbox_id as string);
  }
  let first = true;
  let started!: () => void;
  const isStarted = new Promise<void>((r) => { started = r; });
  let release!: () => void;
  const stolen = new Promise<void>((r) => { release = r; });
  const handlers = new HandlerRegistry();
  for (let i = 0; i < handlerCount; i++) {
    handlers.on('payment_intent.succeeded', async (event, ctx) => {
      if (first) {
        // The first handler of the wave waits (before it writes) while the test takes one row over.
        first = false;
        started();
        await stolen;
      }
      await ctx.tx.query(sql('INSERT INTO ledger (event_id) VALUES ($1)'), [event.providerEventId]);
    }, { name: `ledger-${i}` });
  }
  const config = parseConfig(configDoc(app.db.url, { ...FAST_WORKERS, retry: { baseMs: 10, capMs: 40, maxAttempts: 1 }, endpoints: [endpoint()] }));
  const workers = await startWorkers(config, { handlers, logger: pino({ level: 'silent' }), migrate: false });
  try {
    await isStarted;
    // Another worker takes one of the two rows over (its clock far ahead: both leases look expired).
    const far = Date.now() + 3_600_000;
    const [taken] = await app.store.claimInbox(1, 'thief', -3_600_000 + 60_000, far);
    expect(taken).toBeDefined();
    release();
    const victim = [...ids.values()].find((id) => id !== taken!.inboxId)!;
    const settled = await waitFor(() => app.store.getEvent(victim).then((e) => (e?.status === 'PROCESSED' || e?.status === 'FAILED' ? e : null)), 10_000, 'victim settled');
    expect(settled).toMatchObject({ status: 'PROCESSED', attemptCount: 1 });
    const rows = await app.store.transaction((tx) => tx.query<{ event_id: string }>('SELECT event_id FROM ledger'));
    const victimEvent = [...ids.entries()].find(([, id]) => id === victim)![0];
    expect(rows.map((r) => r.event_id)).toEqual(Array(handlerCount).fill(victimEvent));
    // The row taken over is the thief's: untouched by the worker that lost it.
    expect(await app.store.getEvent(taken!.inboxId)).toMatchObject({ status: 'PROCESSING' });
  } finally {
    await workers.stop();
  }
}
