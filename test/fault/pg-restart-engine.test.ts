import pino from 'pino';
import pg from 'pg';
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

const send = (url: string, id: string) => {
  const body = stripeEvent(id, { type: 'payment_intent.succeeded' });
  return post(`${url}/webhooks/stripe`, body, stripeHeaders(body));
};

describe.runIf(await pgAvailable())('restart-like cut [postgres]', () => {
  const cleanups: (() => Promise<void>)[] = [];
  afterAll(async () => { for (const c of cleanups.reverse()) await c(); });

  it('all connections cut then back: workers resume and are woken by NOTIFY again', async () => {
    const { db, proxy, url } = await proxiedPostgres(cleanups);
    const direct = new pg.Client({ connectionString: db.url });
    const handlers = new HandlerRegistry().on('payment_intent.*', async (event, ctx) => {
      await ctx.tx.query('INSERT INTO ledger (event_id) VALUES ($1)', [event.providerEventId]);
    }, { version: '1', name: 'ledger' });
    const config = parseConfig(configDoc(url, { groupCommit: { commitTimeoutMs: 2000 }, workers: { pollMs: 20_000, leaseMs: 2000 }, retry: { baseMs: 10, capMs: 40, maxAttempts: 5 } }), {});
    const lines: string[] = [];
    const app = await startApp(config, { logger: pino({ level: 'info' }, { write: (s: string) => void lines.push(s) }), env: {}, shutdownGraceMs: 200, workers: true, handlers });
    cleanups.push(() => app.close());
    await direct.connect();
    cleanups.push(() => direct.end());
    await direct.query('CREATE TABLE ledger (event_id text NOT NULL)');
    const processed = async () => Number((await direct.query("SELECT count(*) n FROM webhook_inbox WHERE status = 'PROCESSED'")).rows[0].n);
    for (let i = 0; i < 5; i++) expect((await send(app.url, `evt_a${i}`)).status).toBe(200);
    await waitFor(async () => (await processed()) === 5 || null, 5000, 'first 5');
    await proxy.stop();
    await new Promise((r) => setTimeout(r, 1500));
    await proxy.start(proxy.port);
    await new Promise((r) => setTimeout(r, 1500));
    let ok = 0;
    for (let i = 0; i < 5; i++) if ((await send(app.url, `evt_b${i}`)).status === 200) ok++;
    const t = Date.now();
    const r = await waitFor(async () => (await processed()) === 5 + ok || null, 15_000, 'after restart').then(() => Date.now() - t, () => -1);
    expect(ok).toBe(5);
    expect(r).toBeGreaterThanOrEqual(0);
    expect(r).toBeLessThan(5000);
    const ready = await post(`${app.url}/readyz`, '', {}, 'GET');
    expect(ready.status).toBe(200);
  }, 60_000);
});
