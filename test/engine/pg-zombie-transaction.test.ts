import pino from 'pino';
import { afterAll, describe, expect, it } from 'vitest';
import { startApp } from '../../src/app.js';
import { parseConfig } from '../../src/config/schema.js';
import { HandlerRegistry } from '../../src/engine/handlers.js';
import { configDoc } from '../helpers/app.js';
import { waitFor } from '../helpers/engine.js';
import { post } from '../helpers/http.js';
import { stripeEvent, stripeHeaders } from '../helpers/events.js';
import { pgAvailable } from '../helpers/pg.js';
import { proxiedPostgres } from '../helpers/tcp-proxy.js';

/**
 * A link that dies without a FIN or RST (a NAT or firewall dropped it) while a handler's
 * transaction is open: the client gives up on it, but the server never hears, and its backend
 * stays "idle in transaction" with the handler's row locks (until TCP keepalive, ~2 h by default).
 */
describe.runIf(await pgAvailable())('a handler transaction whose link dies silently [postgres]', () => {
  const cleanups: (() => Promise<void>)[] = [];
  afterAll(async () => { for (const c of cleanups.reverse()) await c(); });

  it('does not hold its locks for good: the event is retried and PROCESSED once, within seconds', async () => {
    const { proxy, url, direct } = await proxiedPostgres(cleanups);

    let inserted!: () => void;
    const insertedOnce = new Promise<void>((r) => (inserted = r));
    let release!: () => void;
    const released = new Promise<void>((r) => (release = r));
    let runs = 0;
    const handlers = new HandlerRegistry().on('payment_intent.*', async (event, ctx) => {
      // The usual idempotent ledger: a unique key per event.
      await ctx.tx.query('INSERT INTO ledger (event_id) VALUES ($1)', [event.providerEventId]);
      if (runs++ === 0) {
        inserted();
        await released;
        await ctx.tx.query('SELECT 1');
      }
    }, { version: '1', name: 'ledger' });
    const config = parseConfig(configDoc(url, {
      groupCommit: { commitTimeoutMs: 1000 },
      workers: { pollMs: 100, leaseMs: 1500 },
      retry: { baseMs: 10, capMs: 200, maxAttempts: 100 },
    }), {});
    const app = await startApp(config, { logger: pino({ level: 'silent' }), env: {}, shutdownGraceMs: 200, workers: true, handlers });
    cleanups.push(() => app.close());
    await direct.query('CREATE TABLE ledger (event_id text PRIMARY KEY)');

    const body = stripeEvent('evt_zombie', { type: 'payment_intent.succeeded' });
    expect((await post(`${app.url}/webhooks/stripe`, body, stripeHeaders(body))).status).toBe(200);
    await insertedOnce;
    proxy.freeze(); // the handler's connection goes silent both ways; new connections still pass
    release();

    const status = () => direct.query<{ status: string; attempts: number }>('SELECT status, attempt_count AS attempts FROM webhook_inbox').then((r) => r.rows[0]!);
    const done = await waitFor(async () => ((await status()).status === 'PROCESSED' ? true : null), 15_000, 'PROCESSED').catch(() => false);
    const zombies = await direct.query("SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = current_database() AND state = 'idle in transaction'");
    expect(done).toBe(true);
    expect(zombies.rows[0].n, 'backends left idle in transaction').toBe(0);
    expect((await direct.query('SELECT count(*)::int AS n FROM ledger')).rows[0].n).toBe(1);
  }, 30_000);
});
