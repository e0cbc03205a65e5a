import { afterEach, describe, expect, it } from 'vitest';
import { HandlerRegistry } from '../../src/engine/handlers.js';
import { startTestApp, STRIPE_SECRET, type TestApp } from '../helpers/app.js';
import { DestinationServer, FAST_WORKERS, FORWARD_SECRET, waitFor } from '../helpers/engine.js';
import { stripeEvent, stripeHeaders } from '../helpers/events.js';
import { post } from '../helpers/http.js';
import { pgAvailable, terminateBackendsWhile } from '../helpers/pg.js';

describe.runIf(await pgAvailable())('engine backends terminated [postgres]', () => {
  let app: TestApp | undefined;
  const dest = new DestinationServer();
  afterEach(async () => { await app?.stop(); await dest.stop(); });

  it('each mutation applied once, every event PROCESSED, every forward delivered', async () => {
    await dest.start();
    const handlers = new HandlerRegistry().on('payment_intent.*', async (event, ctx) => {
      await ctx.tx.query('INSERT INTO ledger (event_id) VALUES ($1)', [event.providerEventId]);
      await new Promise((r) => setTimeout(r, Math.random() * 5));
    }, { version: '1', name: 'ledger' });
    app = await startTestApp('postgres', {
      ...FAST_WORKERS,
      destinations: [{ id: 'orders-api', type: 'http', url: dest.url, secret: FORWARD_SECRET, timeoutMs: 2000 }],
      endpoints: [{ id: 'stripe', provider: 'stripe', secrets: [{ version: 'v1', value: STRIPE_SECRET }], routes: [{ events: ['payment_intent.*'], destination: 'orders-api' }] }],
    }, {}, { workers: true, handlers });
    await app.store.transaction((tx) => tx.query('CREATE TABLE ledger (event_id text NOT NULL)'));
    const killing = await terminateBackendsWhile(app.db.url, 'webhook-inbox-work', 40);
    const killer = killing.client;
    const N = 400;
    for (let i = 0; i < N; i += 20) {
      await Promise.all(Array.from({ length: 20 }, (_, j) => {
        const body = stripeEvent(`evt_${i + j}`, { type: 'payment_intent.succeeded' });
        return post(`${app!.url}/webhooks/stripe`, body, stripeHeaders(body));
      }));
    }
    await new Promise((r) => setTimeout(r, 3000));
    const kills = await killing.stop();
    const status = async () => (await killer.query('SELECT status, count(*)::int n FROM webhook_inbox GROUP BY status')).rows;
    await waitFor(async () => { const s = await status(); return s.length === 1 && s[0].status !== 'PENDING' && s[0].status !== 'PROCESSING' ? s : null; }, 30_000, 'settled').catch(() => undefined);
    const dup = (await killer.query('SELECT event_id, count(*)::int n FROM ledger GROUP BY event_id HAVING count(*) <> 1')).rows;
    const ledger = (await killer.query('SELECT count(DISTINCT event_id)::int n FROM ledger')).rows[0].n;
    const unpublished = (await killer.query('SELECT count(*)::int n FROM webhook_outbox WHERE published_at IS NULL')).rows[0]?.n;
    const final = await status();
    await killer.end();
    expect(kills, 'the faults happened').toBeGreaterThan(0);
    expect(dup).toEqual([]);
    expect(final).toEqual([{ status: 'PROCESSED', n: N }]);
    expect(ledger).toBe(N);
    expect(unpublished).toBe(0);
    // At least once: a relay mark lost with its backend re-sends its claim, same idempotency key.
    expect(new Set(dest.received.map((r) => r.idempotencyKey)).size).toBe(N);
  }, 120_000);
});
