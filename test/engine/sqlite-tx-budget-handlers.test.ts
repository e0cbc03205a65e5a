import pino from 'pino';
import Database from 'better-sqlite3';
import { afterEach, describe, expect, it } from 'vitest';
import { startApp, type RunningApp } from '../../src/app.js';
import { parseConfig } from '../../src/config/schema.js';
import { HandlerRegistry } from '../../src/engine/handlers.js';
import { configDoc, startTestApp, type TestApp } from '../helpers/app.js';
import { waitFor } from '../helpers/engine.js';
import { post } from '../helpers/http.js';
import { stripeEvent, stripeHeaders } from '../helpers/events.js';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/**
 * On SQLite the writer thread rolls back a transaction open longer than txTimeoutMs. Each
 * handler is bounded by half of it, but an event's handlers all run in the same transaction:
 * three handlers of one event, each well within its own limit, outlast the transaction together.
 * Every attempt was rolled back, so the event never got past them.
 */
describe('SQLite: an event whose handlers together outlast txTimeoutMs', () => {
  let first: TestApp | undefined;
  let second: RunningApp | undefined;
  afterEach(async () => { await second?.close(); await first?.stop(); });

  it('still ends PROCESSED, each handler applied once', async () => {
    const over = { workers: { pollMs: 50, leaseMs: 5000, batchSize: 8 }, retry: { baseMs: 10, capMs: 40, maxAttempts: 4 } };
    first = await startTestApp('sqlite', over, {}, { workers: false, urlSuffix: '?txTimeoutMs=1000' });
    const file = first.db.url.slice('sqlite:'.length).replace(/\?.*$/, '');
    const setup = new Database(file);
    setup.exec('CREATE TABLE ledger (event_id TEXT NOT NULL, consumer TEXT NOT NULL)');
    setup.close();
    const body = stripeEvent('evt_slow', { type: 'payment_intent.succeeded' });
    expect((await post(`${first.url}/webhooks/stripe`, body, stripeHeaders(body))).status).toBe(200);
    await first.close();

    const handlers = new HandlerRegistry();
    for (const name of ['a', 'b', 'c']) {
      handlers.on('payment_intent.*', async (event, ctx) => {
        await ctx.tx.query('INSERT INTO ledger (event_id, consumer) VALUES (?, ?)', [event.providerEventId, name]);
        await sleep(400); // within this handler's own limit (half of txTimeoutMs: 500 ms)
      }, { version: '1', name });
    }
    second = await startApp(parseConfig(configDoc(first.db.url + '?txTimeoutMs=1000', over), {}), { logger: pino({ level: 'silent' }), env: {}, shutdownGraceMs: 200, workers: true, handlers });

    const db = new Database(file, { readonly: true });
    try {
      await waitFor(() => (db.prepare("SELECT count(*) FROM webhook_inbox WHERE status IN ('PROCESSED', 'FAILED')").pluck().get() as number) === 1 || null, 20_000, 'settled')
        .catch(() => undefined);
      const row = db.prepare('SELECT status, failure_reason FROM webhook_inbox').get();
      const ledger = db.prepare('SELECT consumer, count(*) n FROM ledger GROUP BY consumer ORDER BY consumer').all();
      const markers = db.prepare('SELECT consumer FROM processed_events ORDER BY consumer').pluck().all();
      expect({ row, ledger, markers }).toEqual({
        row: { status: 'PROCESSED', failure_reason: null },
        ledger: [{ consumer: 'a', n: 1 }, { consumer: 'b', n: 1 }, { consumer: 'c', n: 1 }],
        markers: ['handler:a', 'handler:b', 'handler:c'],
      });
    } finally {
      db.close();
    }
  }, 30_000);
});
