import { jetstreamManager } from '@nats-io/jetstream';
import { connect as natsConnect, type NatsConnection } from '@nats-io/transport-node';
import { connect as amqpConnect, type Channel, type ChannelModel } from 'amqplib';
import Database from 'better-sqlite3';
import pino from 'pino';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { startApp } from '../../src/app.js';
import { parseConfig } from '../../src/config/schema.js';
import { closeAll, openDestinations } from '../../src/destinations/registry.js';
import { HandlerRegistry } from '../../src/engine/handlers.js';
import { OutboxRelay } from '../../src/engine/relay.js';
import { Router } from '../../src/engine/routes.js';
import { engineMetrics } from '../../src/metrics/engine.js';
import { Registry } from '../../src/metrics/registry.js';
import { openStore } from '../../src/store/open.js';
import { configDoc, startTestApp, STRIPE_SECRET, type TestApp } from '../helpers/app.js';
import { AMQP_URL, drainQueue, NATS_URL, natsStreamMessages, uniqueName } from '../helpers/destinations.js';
import { DestinationServer, waitFor } from '../helpers/engine.js';
import { sendStripeEvent } from '../helpers/events.js';
import { pgAvailable, PG_REQUIRED } from '../helpers/pg.js';
import { record } from '../helpers/records.js';
import { freshDatabase } from '../helpers/stores.js';
import { proxiedPostgres } from '../helpers/tcp-proxy.js';

/**
 * The database failing for a moment (a link frozen, SQLite's write lock held by another process)
 * just as the effects runner or the outbox relay settles work that went through: the effect's
 * downstream call was made, the broker took the message. That is no failure of the effect or the
 * row. It must end DONE / published on the attempt that did it, the downstream having it once —
 * not run or publish again after its lease (RabbitMQ has no duplicate window: each republish is
 * one more message in the queue), nor end FAILED `attempts_abandoned` on its last attempt.
 */

/** A handler recording one effect, whose executor calls the HTTP destination with its idempotency key. */
function notifying(dest: DestinationServer, afterCall?: () => void): HandlerRegistry {
  return new HandlerRegistry()
    .on('payment_intent.*', (event, ctx) => ctx.effect('notify', { event: event.providerEventId }), { version: '1', name: 'notifier' })
    .effect('notify', async (data, { idempotencyKey }) => {
      const r = await fetch(dest.url, { method: 'POST', headers: { 'idempotency-key': idempotencyKey, 'content-type': 'application/json' }, body: JSON.stringify(data) });
      if (!r.ok) throw new Error(`destination answered ${r.status}`);
      afterCall?.();
    });
}

describe.runIf(PG_REQUIRED || (await pgAvailable()))('the store failing while an effect or an outbox row settles [postgres]', () => {
  const cleanups: (() => Promise<void>)[] = [];
  afterAll(async () => { for (const c of cleanups.reverse()) await c(); });

  it('an effect whose settle is frozen (maxAttempts 1): DONE on its first attempt, the destination called once', async () => {
    const { proxy, url, direct } = await proxiedPostgres(cleanups);
    const dest = await new DestinationServer().start();
    cleanups.push(() => dest.stop());
    const config = parseConfig(configDoc(url, {
      groupCommit: { commitTimeoutMs: 500 },
      workers: { pollMs: 50, leaseMs: 3000 },
      retry: { baseMs: 10, capMs: 40, maxAttempts: 1 },
    }), {});
    // SETTLE_EFFECT (its Parse or its Bind names it) goes unanswered: the pool's query timeout fails it.
    proxy.silenceAt((c) => c.includes(Buffer.from('wi_settle_effect')));
    const app = await startApp(config, { logger: pino({ level: 'silent' }), env: {}, shutdownGraceMs: 200, workers: true, handlers: notifying(dest) });
    cleanups.push(() => app.close());
    expect((await sendStripeEvent(app.url, 'evt_fx_frozen')).status).toBe(200);

    const row = () => direct.query('SELECT status, attempt_count, failure_reason FROM webhook_effects').then((r) => r.rows[0]);
    const final = await waitFor(async () => { const r = await row(); return r && r.status !== 'PENDING' && r.status !== 'PROCESSING' ? r : null; }, 30_000, 'effect settled');
    // Past the lease: a settle left to its lease would have been claimed again by now.
    await new Promise((r) => setTimeout(r, 3500));
    expect(proxy.trapArmed).toBe(false);
    expect({ final, now: await row(), calls: dest.received.length }).toEqual({ final: { status: 'DONE', attempt_count: 1, failure_reason: null }, now: final, calls: 1 });
  }, 60_000);

  describe('the outbox relay', () => {
    let nc: NatsConnection;
    let amqp: ChannelModel;
    let ch: Channel;
    const queue = uniqueName('whi_settle_outage_q');
    const stream = uniqueName('WHI_SETTLE_OUTAGE');
    beforeAll(async () => {
      nc = await natsConnect({ servers: NATS_URL, timeout: 5000 });
      amqp = await amqpConnect(AMQP_URL);
      ch = await amqp.createChannel();
    });
    afterAll(async () => {
      await jetstreamManager(nc).then((m) => m.streams.delete(stream)).catch(() => undefined);
      await ch.deleteQueue(queue).catch(() => undefined);
      await nc.close();
      await amqp.close();
    });

    it('a publish whose settle is frozen: published on its first attempt, RabbitMQ and NATS each hold the message once', async () => {
      const { proxy, url, direct } = await proxiedPostgres(cleanups);
      const config = parseConfig(configDoc(url, {
        groupCommit: { commitTimeoutMs: 500 },
        workers: { pollMs: 50, leaseMs: 3000 },
        retry: { baseMs: 10, capMs: 40, maxAttempts: 3 },
        destinations: [
          { id: 'rabbit', type: 'rabbitmq', url: AMQP_URL, exchange: 'amq.topic', routingKey: `${queue}.{provider}`, queue, timeoutMs: 3000 },
          { id: 'nats', type: 'nats', url: NATS_URL, subject: `${stream.toLowerCase()}.{provider}`, stream, timeoutMs: 3000 },
        ],
        endpoints: [{ id: 'stripe', provider: 'stripe', secrets: [{ version: 'v1', value: STRIPE_SECRET }],
          routes: [{ events: ['*'], destination: 'rabbit' }, { events: ['*'], destination: 'nats' }] }],
      }), {});
      proxy.silenceAt((c) => c.includes(Buffer.from('wi_settle_outbox_batch')));
      const app = await startApp(config, { logger: pino({ level: 'silent' }), env: {}, shutdownGraceMs: 200, workers: true });
      cleanups.push(() => app.close());
      const r = await sendStripeEvent(app.url, 'evt_outbox_frozen');
      expect(r.status).toBe(200);
      const inboxId = r.json().inbox_id as string;

      const row = () => direct.query('SELECT published_at IS NOT NULL AS published, attempt_count, failure_reason FROM webhook_outbox').then((x) => x.rows[0]);
      const final = await waitFor(async () => { const x = await row(); return x?.published ? x : null; }, 30_000, 'outbox row published');
      await new Promise((res) => setTimeout(res, 3500));
      expect(proxy.trapArmed).toBe(false);
      expect({
        final,
        rabbit: (await drainQueue(ch, queue)).map((m) => m.id),
        nats: (await natsStreamMessages(nc, stream)).map((m) => m.id),
      }).toEqual({ final: { published: true, attempt_count: 1, failure_reason: null }, rabbit: [inboxId], nats: [inboxId] });
    }, 60_000);
  });
});

describe('the store failing while an effect or an outbox row settles [sqlite]', () => {
  let app: TestApp | undefined;
  afterEach(async () => { await app?.stop(); app = undefined; });

  it('another process holding the write lock past busyTimeoutMs as an effect settles (maxAttempts 1): DONE, the destination called once', async () => {
    const dest = await new DestinationServer().start();
    let file = '';
    let other: Database.Database | undefined;
    // Just after the downstream call, another process takes the write lock for a second.
    const handlers = notifying(dest, () => {
      if (other) return;
      other = new Database(file);
      other.exec('BEGIN IMMEDIATE');
      setTimeout(() => { other!.exec('COMMIT'); other!.close(); }, 1000);
    });
    try {
      app = await startTestApp('sqlite', {
        workers: { pollMs: 50, leaseMs: 3000 },
        retry: { baseMs: 10, capMs: 40, maxAttempts: 1 },
      }, {}, { workers: true, handlers, urlSuffix: '?busyTimeoutMs=200' });
      file = app.db.url.slice('sqlite:'.length);
      expect((await sendStripeEvent(app.url, 'evt_fx_busy')).status).toBe(200);
      const effect = async () => (await app!.store.listEffects((await app!.store.listEvents({}))[0]!.inboxId))[0];
      const final = await waitFor(async () => { const e = await effect(); return e && e.status !== 'PENDING' && e.status !== 'PROCESSING' ? e : null; }, 30_000, 'effect settled');
      await new Promise((r) => setTimeout(r, 3500));
      expect(other).toBeDefined();
      expect({ status: final.status, attempts: final.attemptCount, reason: final.failureReason, now: (await effect())!.status, calls: dest.received.length })
        .toEqual({ status: 'DONE', attempts: 1, reason: null, now: 'DONE', calls: 1 });
    } finally {
      await dest.stop();
    }
  }, 60_000);

  it('another process holding the write lock past busyTimeoutMs as the relay settles: published on its first attempt, RabbitMQ holds it once', async () => {
    const db = await freshDatabase('sqlite');
    const store = openStore(`${db.url}?busyTimeoutMs=200`);
    const amqp = await amqpConnect(AMQP_URL);
    const ch = await amqp.createChannel();
    const queue = uniqueName('whi_settle_outage_sq');
    const config = parseConfig(configDoc(db.url, {
      destinations: [{ id: 'rabbit', type: 'rabbitmq', url: AMQP_URL, exchange: 'amq.topic', routingKey: `${queue}.{provider}`, queue, timeoutMs: 3000 }],
      endpoints: [{ id: 'stripe', provider: 'stripe', secrets: [{ version: 'v1', value: STRIPE_SECRET }], routes: [{ events: ['*'], destination: 'rabbit' }] }],
    }));
    const destinations = openDestinations(config.destinations).destinations;
    try {
      await store.migrate();
      const event = record('evt_outbox_busy', undefined, { endpointId: 'stripe' });
      await store.acceptBatch([event]);
      const clock = { now: 1_900_000_000_000 };
      const relay = new OutboxRelay({
        store, owner: 'relay', leaseMs: 3000, retry: config.retry, metrics: engineMetrics(new Registry()),
        log: pino({ level: 'silent' }), router: new Router(config.endpoints, destinations), now: () => clock.now,
      });
      const claimed = await relay.claim(10);
      expect(claimed).toHaveLength(1);
      // Claimed; the publish goes through, then the settle finds another process holding the write lock for a second.
      const other = new Database(db.url.slice('sqlite:'.length));
      other.exec('BEGIN IMMEDIATE');
      const released = new Promise<void>((r) => setTimeout(() => { other.exec('COMMIT'); other.close(); r(); }, 1000));
      await relay.process(claimed).catch(() => undefined);
      await released;
      // Whatever is still due after the lease runs again.
      clock.now += 3000 + 1;
      for (let again = await relay.claim(10); again.length > 0; again = await relay.claim(10)) {
        await relay.process(again);
        clock.now += 24 * 3600_000;
      }
      const peek = new Database(db.url.slice('sqlite:'.length), { readonly: true });
      const row = peek.prepare('SELECT published_at IS NOT NULL AS published, attempt_count, failure_reason FROM webhook_outbox').get();
      peek.close();
      expect({ row, rabbit: (await drainQueue(ch, queue)).map((m) => m.id) })
        .toEqual({ row: { published: 1, attempt_count: 1, failure_reason: null }, rabbit: [event.inboxId] });
    } finally {
      await closeAll(destinations.values());
      await ch.deleteQueue(queue).catch(() => undefined);
      await amqp.close();
      await store.close();
      await db.cleanup();
    }
  }, 60_000);
});
