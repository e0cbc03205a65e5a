import pino from 'pino';
import { afterEach, describe, expect, it } from 'vitest';
import { startApp, type RunningApp } from '../../src/app.js';
import { parseConfig } from '../../src/config/schema.js';
import { HandlerRegistry } from '../../src/engine/handlers.js';
import { startWorkers, type RunningWorkers } from '../../src/workers.js';
import { configDoc } from '../helpers/app.js';
import { stripeEvent, stripeHeaders } from '../helpers/events.js';
import { post } from '../helpers/http.js';
import { freshDatabase, type TestDatabase } from '../helpers/stores.js';

const BACKLOG = 1500;

/**
 * `serve` and `work` as two processes on one SQLite file (README), here two stores (each its own
 * connection and writer thread, as two processes have): `work` drains a backlog with handlers
 * that query, each settle transaction holding the write lock for ~100 ms, one after another.
 * `serve`'s accepts meanwhile wait for the lock between those transactions: each for a few of
 * them, not its whole busy timeout. Before, `work` began its next transaction about as soon as
 * one ended, and `serve`, whose busy handler looked again only every 100 ms, seldom found the
 * lock free: accepts waited up to the 6 s busy timeout and some were answered 503.
 */
describe('SQLite: serve accepting beside a work process that drains a backlog', () => {
  let db: TestDatabase | undefined;
  let serve: RunningApp | undefined;
  let work: RunningWorkers | undefined;
  afterEach(async () => {
    await work?.stop();
    await serve?.close();
    await db?.cleanup();
    work = serve = db = undefined;
  });

  it('every accept is answered 200, none after a wait near the busy timeout; each event applied once', async () => {
    db = await freshDatabase('sqlite');
    const doc = configDoc(db.url, { workers: { leaseMs: 20_000, pollMs: 50, concurrency: 64, batchSize: 16 } });
    serve = await startApp(parseConfig(doc, {}), { logger: pino({ level: 'silent' }), workers: false });
    await serve.store.transaction((tx) => tx.query('CREATE TABLE ledger (event_id TEXT NOT NULL)'));
    for (let i = 0; i < BACKLOG; i += 50) {
      await Promise.all(Array.from({ length: 50 }, async (_, j) => {
        const body = stripeEvent(`evt_backlog_${i + j}`);
        expect((await post(`${serve!.url}/webhooks/stripe`, body, stripeHeaders(body))).status).toBe(200);
      }));
    }
    const handlers = new HandlerRegistry().on('payment_intent.succeeded', async (event, ctx) => {
      await ctx.tx.query('INSERT INTO ledger (event_id) VALUES (?)', [event.providerEventId]);
      await new Promise((r) => setTimeout(r, 6)); // 16 a transaction: the lock held ~100 ms
    });
    work = await startWorkers(parseConfig(doc, {}), { logger: pino({ level: 'silent' }), handlers, migrate: false });

    const answers: { status: number; ms: number }[] = [];
    const pending = async () => (await serve!.store.listEvents({ status: 'PENDING', limit: 1 })).length > 0;
    for (let k = 0; (await pending()) && k < 2000; k++) {
      const body = stripeEvent(`evt_live_${k}`);
      const t0 = performance.now();
      const r = await post(`${serve.url}/webhooks/stripe`, body, stripeHeaders(body));
      answers.push({ status: r.status, ms: performance.now() - t0 });
      await new Promise((r2) => setTimeout(r2, 20));
    }
    expect(answers.length).toBeGreaterThan(20); // they did overlap the drain
    expect(answers.filter((a) => a.status !== 200)).toEqual([]);
    // Before: up to ~6,000 ms (the busy timeout). Now: a few hundred ms.
    expect(Math.max(...answers.map((a) => a.ms))).toBeLessThan(3000);

    const rows = await serve.store.transaction((tx) => tx.query<{ event_id: string; n: number }>('SELECT event_id, count(*) AS n FROM ledger GROUP BY event_id HAVING count(*) > 1'));
    expect(rows).toEqual([]);
  }, 180_000);
});
