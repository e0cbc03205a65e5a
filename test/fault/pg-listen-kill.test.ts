import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { HandlerRegistry } from '../../src/engine/handlers.js';
import { startTestApp } from '../helpers/app.js';
import { waitFor } from '../helpers/engine.js';
import { post } from '../helpers/http.js';
import { stripeEvent, stripeHeaders } from '../helpers/events.js';
import { pgAvailable } from '../helpers/pg.js';

describe.runIf(await pgAvailable())('LISTEN backend terminated [postgres]', () => {
  it('events accepted while the listener is away are processed soon after it reconnects (not at the next poll)', async () => {
    const handlers = new HandlerRegistry().on('payment_intent.*', async () => undefined, { version: '1', name: 'noop' });
    const app = await startTestApp('postgres', { workers: { pollMs: 60_000, leaseMs: 2000 } }, {}, { workers: true, handlers });
    const killer = new pg.Client({ connectionString: app.db.url });
    await killer.connect();
    const send = (id: string) => { const b = stripeEvent(id, { type: 'payment_intent.succeeded' }); return post(`${app.url}/webhooks/stripe`, b, stripeHeaders(b)); };
    const processed = async () => Number((await killer.query("SELECT count(*) n FROM webhook_inbox WHERE status = 'PROCESSED'")).rows[0].n);
    await send('evt_1');
    await waitFor(async () => (await processed()) === 1 || null, 5000, 'first');
    const dbName = new URL(app.db.url).pathname.slice(1);
    for (let k = 0; k < 3; k++) {
      await killer.query("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1 AND application_name = 'webhook-inbox-listen'", [dbName]);
      expect((await send(`evt_k${k}`)).status).toBe(200);
    }
    const ok = await waitFor(async () => (await processed()) === 4 || null, 10_000, 'after').then(() => true, () => false);
    await killer.end();
    await app.stop();
    expect(ok).toBe(true);
  }, 30_000);
});
