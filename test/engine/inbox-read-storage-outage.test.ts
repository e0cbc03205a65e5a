import pino from 'pino';
import { afterAll, describe, expect, it } from 'vitest';
import { startApp } from '../../src/app.js';
import { parseConfig } from '../../src/config/schema.js';
import { startWorkers } from '../../src/workers.js';
import { configDoc, STRIPE_SECRET } from '../helpers/app.js';
import { DestinationServer, FORWARD_SECRET, waitFor } from '../helpers/engine.js';
import { sendStripeEvent } from '../helpers/events.js';
import { pgAvailable, PG_REQUIRED } from '../helpers/pg.js';
import { proxiedPostgres } from '../helpers/tcp-proxy.js';

/**
 * The database failing for a moment while the inbox worker reads what an attempt needs before its
 * settle — the events' stored bodies (readPayloads), the forwards already made (deliverDirect's
 * processed-marker read) — is no failure of the events. Nothing was done yet; they must not spend
 * an attempt on it, nor end FAILED `attempts_abandoned` on their last one.
 */

const forwarding = (database: string, destUrl: string, over: Record<string, unknown> = {}) => parseConfig(configDoc(database, {
  workers: { pollMs: 50, leaseMs: 3000 },
  retry: { baseMs: 10, capMs: 40, maxAttempts: 1 },
  destinations: [{ id: 'orders-api', type: 'http', url: destUrl, secret: FORWARD_SECRET, timeoutMs: 2000 }],
  endpoints: [{ id: 'stripe', provider: 'stripe', secrets: [{ version: 'v1', value: STRIPE_SECRET }], routes: [{ events: ['*'], destination: 'orders-api' }] }],
  ...over,
}), {});

describe.runIf(PG_REQUIRED || (await pgAvailable()))('the store failing while the inbox worker reads before its settle [postgres]', () => {
  const cleanups: (() => Promise<void>)[] = [];
  afterAll(async () => { for (const c of cleanups.reverse()) await c(); });

  // The body read (its named statement), and deliverDirect's marker read (the only processed_events
  // read of a forward-only event).
  for (const [what, marker] of [['the body read (readPayloads)', 'wi_read_payloads'], ['the already-forwarded check', 'FROM processed_events p']] as const) {
    it(`${what} frozen once (maxAttempts 1): PROCESSED on its first attempt, forwarded once`, async () => {
      const { proxy, url, direct } = await proxiedPostgres(cleanups);
      const dest = await new DestinationServer().start();
      cleanups.push(() => dest.stop());
      const config = forwarding(url, dest.url, { groupCommit: { commitTimeoutMs: 500 } });
      // Workers in their own app: the ingress keeps no fresh body for them, the body is read from the store.
      const app = await startApp(config, { logger: pino({ level: 'silent' }), env: {}, shutdownGraceMs: 200, workers: false });
      cleanups.push(() => app.close());
      expect((await sendStripeEvent(app.url, `evt_read_${marker.length}`)).status).toBe(200);
      proxy.silenceAt((c) => c.includes(Buffer.from(marker)));
      const workers = await startWorkers(config, { logger: pino({ level: 'silent' }), env: {} });
      cleanups.push(() => workers.stop());

      const row = () => direct.query('SELECT status, attempt_count, failure_reason FROM webhook_inbox').then((r) => r.rows[0]);
      const final = await waitFor(async () => { const r = await row(); return r.status !== 'PENDING' && r.status !== 'PROCESSING' ? r : null; }, 30_000, 'settled');
      expect({ trap: proxy.trapArmed, final, forwards: dest.received.length })
        .toEqual({ trap: false, final: { status: 'PROCESSED', attempt_count: 1, failure_reason: null }, forwards: 1 });
    }, 60_000);
  }
});
