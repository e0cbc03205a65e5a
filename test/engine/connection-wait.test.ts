import pino from 'pino';
import { afterEach, expect, it } from 'vitest';
import { parseConfig } from '../../src/config/schema.js';
import { HandlerRegistry } from '../../src/engine/handlers.js';
import { startWorkers } from '../../src/workers.js';
import { configDoc, startTestApp, STRIPE_SECRET, type TestApp } from '../helpers/app.js';
import { waitFor } from '../helpers/engine.js';
import { stripeEvent, stripeHeaders } from '../helpers/events.js';
import { post } from '../helpers/http.js';
import { describeEachStore } from '../helpers/stores.js';

/**
 * The engine holds many small batches at once (events that arrive one by one are claimed one
 * by one), and each batch whose handlers write needs a connection for as long as they run: one
 * of PostgreSQL's work pool (4), or SQLite's one writer. Waiting for it is queueing, not the
 * handler being slow, and not the database being down.
 */
describeEachStore('handlers of more concurrent batches than the store has connections', (kind) => {
  let app: TestApp | undefined;
  afterEach(async () => {
    await app?.stop();
    app = undefined;
  });

  it('each event is PROCESSED on its first attempt and applied once: waiting for the connection is not counted as handler time, nor as storage down', async () => {
    app = await startTestApp(kind, {}, {}, { workers: false });
    await app.store.transaction((tx) => tx.query('CREATE TABLE ledger (event_id TEXT PRIMARY KEY)'));
    // Each handler holds its batch's connection 250 ms. PostgreSQL: batches of 4 (1 s each), 48
    // events through the work pool's connections take ~4 s in all, longer than a handler's limit
    // (the lease, 1 s) and than pg's wait for a pooled connection (3 s). SQLite: 12 through its
    // writer take 3 s, and a handler's limit is half the transaction limit (txTimeoutMs 1000:
    // 500 ms). Each handler is well within its own.
    const ids = Array.from({ length: kind === 'postgres' ? 48 : 12 }, (_, i) => `evt_wait_${i}`);
    const inboxIds: string[] = [];
    for (const id of ids) {
      const body = stripeEvent(id, { type: 'payment_intent.succeeded' });
      const answer = await post(`${app.url}/webhooks/stripe`, body, stripeHeaders(body));
      expect(answer.status).toBe(200);
      inboxIds.push(answer.json().inbox_id);
    }
    const insert = kind === 'postgres' ? 'INSERT INTO ledger (event_id) VALUES ($1)' : 'INSERT INTO ledger (event_id) VALUES (?)';
    const handlers = new HandlerRegistry().on('payment_intent.succeeded', async (event, ctx) => {
      await ctx.tx.query(insert, [event.providerEventId]);
      await new Promise((r) => setTimeout(r, 250));
    }, { name: 'ledger' });
    const config = parseConfig(configDoc(kind === 'postgres' ? app.db.url : `${app.db.url}?txTimeoutMs=1000`, {
      workers: { pollMs: 50, leaseMs: kind === 'postgres' ? 1000 : 5000, concurrency: 64, batchSize: kind === 'postgres' ? 4 : 1 },
      retry: { baseMs: 10, capMs: 40, maxAttempts: 5 },
      endpoints: [{ id: 'stripe', provider: 'stripe', secrets: [{ version: 'v1', value: STRIPE_SECRET }] }],
    }));
    const workers = await startWorkers(config, { handlers, logger: pino({ level: 'silent' }), migrate: false });
    try {
      const events = await waitFor(async () => {
        const all = await Promise.all(inboxIds.map((id) => app!.store.getEvent(id)));
        return all.every((e) => e?.status === 'PROCESSED' || e?.status === 'FAILED') ? all : null;
      }, 60_000, 'every event terminal');
      const summary = events.map((e) => `${e!.status}/${e!.attemptCount}${e!.lastError ? ` ${e!.lastError.slice(0, 80)}` : ''}`);
      expect(summary).toEqual(ids.map(() => 'PROCESSED/1'));
    } finally {
      await workers.stop();
    }
    const rows = await app.store.transaction((tx) => tx.query<{ n: number | string }>('SELECT count(*) AS n FROM ledger'));
    expect(Number(rows[0]!.n)).toBe(ids.length);
  });
});
