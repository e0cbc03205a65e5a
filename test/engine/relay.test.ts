import { jetstreamManager, type JetStreamManager } from '@nats-io/jetstream';
import { connect as natsConnect, type NatsConnection } from '@nats-io/transport-node';
import { connect as amqpConnect, type Channel, type ChannelModel } from 'amqplib';
import pino, { type Logger } from 'pino';
import { afterAll, afterEach, beforeAll, beforeEach, expect, it } from 'vitest';
import { parseConfig, type Config } from '../../src/config/schema.js';
import type { Destination } from '../../src/destinations/contract.js';
import { closeAll, openDestinations } from '../../src/destinations/registry.js';
import { OutboxRelay } from '../../src/engine/relay.js';
import { Router } from '../../src/engine/routes.js';
import { engineMetrics, type EngineMetrics } from '../../src/metrics/engine.js';
import { Registry } from '../../src/metrics/registry.js';
import { openStore } from '../../src/store/open.js';
import type { InboxStore } from '../../src/store/port.js';
import type { WorkStore } from '../../src/store/work-port.js';
import { record } from '../helpers/records.js';
import { configDoc, startTestApp, STRIPE_SECRET, type TestApp } from '../helpers/app.js';
import { AMQP_URL, drainQueue, NATS_URL, natsStreamMessages, uniqueName, type BrokerMessage } from '../helpers/destinations.js';
import { FAST_WORKERS, scrapeMetrics, waitFor } from '../helpers/engine.js';
import { stripeEvent, stripeHeaders } from '../helpers/events.js';
import { post } from '../helpers/http.js';
import { describeEachStore, freshDatabase, type TestDatabase } from '../helpers/stores.js';
import { TcpProxy } from '../helpers/tcp-proxy.js';

/**
 * The outbox relay end to end against the real brokers: signed events over HTTP, the worker
 * marks broker-only events PROCESSED, the relay publishes each outbox row and marks it.
 * A broker that cannot be reached fails these tests (never skips them).
 */
const endpoint = { id: 'stripe', provider: 'stripe', secrets: [{ version: 'v1', value: STRIPE_SECRET }], routes: [{ events: ['*'], destination: 'bus' }] };

const EVENTS: [id: string, type: string][] = [
  ['evt_relay_1', 'payment_intent.succeeded'],
  ['evt_relay_2', 'payment_intent.succeeded'],
  ['evt_relay_3', 'charge.refunded'],
  ['evt_relay_4', 'customer.created'],
  ['evt_relay_5', 'invoice.paid'],
];

describeEachStore('outbox relay (real NATS JetStream and RabbitMQ)', (kind) => {
  let app: TestApp | undefined;
  let nc: NatsConnection;
  let jsm: JetStreamManager;
  let amqp: ChannelModel;
  let ch: Channel;
  const streams: string[] = [];
  const queues: string[] = [];

  beforeAll(async () => {
    nc = await natsConnect({ servers: NATS_URL, timeout: 5000 });
    jsm = await jetstreamManager(nc);
    amqp = await amqpConnect(AMQP_URL);
    ch = await amqp.createChannel();
  });
  afterEach(async () => {
    await app?.stop();
    app = undefined;
  });
  afterAll(async () => {
    for (const s of streams.splice(0)) await jsm?.streams.delete(s).catch(() => undefined);
    for (const q of queues.splice(0)) await ch?.deleteQueue(q).catch(() => undefined);
    await nc?.close();
    await amqp?.close();
  });

  /** A stream the test owns and the subject prefix only it captures. */
  function natsScope(): { stream: string; prefix: string } {
    const stream = uniqueName('WHI_RELAY');
    streams.push(stream);
    return { stream, prefix: stream.toLowerCase() };
  }

  async function send(id: string, type: string): Promise<{ inboxId: string; duplicate: boolean }> {
    const body = stripeEvent(id, { type, size: 600 });
    const r = await post(`${app!.url}/webhooks/stripe`, body, stripeHeaders(body));
    expect(r.status).toBe(200);
    return { inboxId: r.json().inbox_id, duplicate: r.json().duplicate };
  }

  /** Sends EVENTS (and one of them again); returns inbox id → [event id, type]. */
  async function sendAll(): Promise<Map<string, [string, string]>> {
    const sent = new Map<string, [string, string]>();
    for (const [id, type] of EVENTS) {
      const r = await send(id, type);
      expect(r.duplicate).toBe(false);
      sent.set(r.inboxId, [id, type]);
    }
    const again = await send(EVENTS[0]![0], EVENTS[0]![1]);
    expect(again.duplicate).toBe(true);
    expect(sent.has(again.inboxId)).toBe(true);
    return sent;
  }

  async function allPublishedAndProcessed(inboxIds: Iterable<string>): Promise<boolean> {
    if ((await app!.store.queueStats()).outboxUnpublished !== 0) return false;
    for (const id of inboxIds) if ((await app!.store.getEvent(id))?.status !== 'PROCESSED') return false;
    return true;
  }

  /** Exactly one message per event, keyed and shaped as docs/destinations.md says. */
  function expectOnePerEvent(messages: BrokerMessage[], sent: Map<string, [string, string]>, subject: (type: string) => string): void {
    expect(messages.map((m) => m.id).sort()).toEqual([...sent.keys()].sort());
    for (const m of messages) {
      const [eventId, type] = sent.get(m.id)!;
      expect(m.body).toEqual({
        inbox_id: m.id, provider: 'stripe', endpoint_id: 'stripe', provider_event_id: eventId, event_type: type,
        received_at: expect.stringMatching(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/),
      });
      expect(m.subject).toBe(subject(type));
    }
  }

  async function expectProcessedWithoutHandler(inboxIds: Iterable<string>): Promise<void> {
    for (const id of inboxIds) {
      // Broker-only routes: the worker settles the row, the relay publishes it.
      expect(await app!.store.getEvent(id)).toMatchObject({ status: 'PROCESSED', attemptCount: 1, handlerVersion: null, failureReason: null });
    }
  }

  it('NATS: one JetStream message per event with Nats-Msg-Id = inbox id; outbox published, inbox PROCESSED', async () => {
    const { stream, prefix } = natsScope();
    app = await startTestApp(kind, {
      ...FAST_WORKERS,
      destinations: [{ id: 'bus', type: 'nats', url: NATS_URL, subject: `${prefix}.{provider}.{type}`, stream, timeoutMs: 3000 }],
      endpoints: [endpoint],
    }, {}, { workers: true });
    const sent = await sendAll();
    await waitFor(() => allPublishedAndProcessed(sent.keys()), 15_000, 'every outbox row published and every event PROCESSED');

    expectOnePerEvent(await natsStreamMessages(nc, stream), sent, (type) => `${prefix}.stripe.${type}`);
    await expectProcessedWithoutHandler(sent.keys());
    expect((await app.store.countRows()).outbox).toBe(EVENTS.length);
    expect(app.engine.metrics.relay.get(['bus', 'published'])).toBe(EVENTS.length);
    expect(app.engine.metrics.relay.get(['bus', 'failed'])).toBe(0);
    const m = await scrapeMetrics(app.url);
    expect(m('webhook_outbox_unpublished')).toBe(0);
    expect(m('webhook_outbox_relay_lag_seconds')).toBe(0);
  });

  it('RabbitMQ: one message per event in the bound queue with message_id = inbox id; outbox published, inbox PROCESSED', async () => {
    const queue = uniqueName('whi_relay_q');
    queues.push(queue);
    // amq.topic always exists; the unique routing prefix keeps other tests' messages out of our queue.
    app = await startTestApp(kind, {
      ...FAST_WORKERS,
      destinations: [{ id: 'bus', type: 'rabbitmq', url: AMQP_URL, exchange: 'amq.topic', routingKey: `${queue}.{provider}.{type}`, queue, timeoutMs: 3000 }],
      endpoints: [endpoint],
    }, {}, { workers: true });
    const sent = await sendAll();
    await waitFor(() => allPublishedAndProcessed(sent.keys()), 15_000, 'every outbox row published and every event PROCESSED');

    expect((await ch.checkQueue(queue)).messageCount).toBe(EVENTS.length);
    expectOnePerEvent(await drainQueue(ch, queue), sent, (type) => `${queue}.stripe.${type}`);
    await expectProcessedWithoutHandler(sent.keys());
    expect(app.engine.metrics.relay.get(['bus', 'published'])).toBe(EVENTS.length);
  });

  it('NATS unreachable: ingress answers 200, relay lag and unpublished rows rise; back: all published once, lag 0', async () => {
    const { stream, prefix } = natsScope();
    const proxy = new TcpProxy(4222);
    const port = await proxy.start();
    await proxy.stop(); // the port is closed: every connect is refused
    try {
      app = await startTestApp(kind, {
        ...FAST_WORKERS,
        destinations: [{ id: 'bus', type: 'nats', url: `nats://127.0.0.1:${port}`, subject: `${prefix}.{provider}.{type}`, stream, timeoutMs: 1000 }],
        endpoints: [endpoint],
      }, {}, { workers: true });
      const sent = await sendAll();
      // The worker does not wait for the broker: broker-only events are PROCESSED at once.
      await waitFor(async () => {
        for (const id of sent.keys()) if ((await app!.store.getEvent(id))?.status !== 'PROCESSED') return false;
        return true;
      }, 10_000, 'every event PROCESSED');
      await waitFor(() => app!.engine.metrics.relay.get(['bus', 'failed']) >= EVENTS.length, 10_000, 'a failed publish of every row');

      const during1 = await scrapeMetrics(app.url);
      expect(during1('webhook_outbox_unpublished')).toBe(EVENTS.length);
      const lag1 = during1('webhook_outbox_relay_lag_seconds');
      expect(lag1).toBeGreaterThan(0);
      await new Promise((r) => setTimeout(r, 300));
      const during2 = await scrapeMetrics(app.url);
      expect(during2('webhook_outbox_relay_lag_seconds')).toBeGreaterThan(lag1);
      expect(during2('webhook_outbox_unpublished')).toBe(EVENTS.length);
      expect(app.engine.metrics.relay.get(['bus', 'published'])).toBe(0);
      // Still accepting during the outage.
      const late = await send('evt_relay_during_outage', 'payment_intent.succeeded');
      sent.set(late.inboxId, ['evt_relay_during_outage', 'payment_intent.succeeded']);

      await proxy.start(port);
      // The relay backs off (full jitter, base 250 ms) while the broker is away: allow a few rounds.
      await waitFor(() => allPublishedAndProcessed(sent.keys()), 40_000, 'the outbox drained after the outage');
      const after = await scrapeMetrics(app.url);
      expect(after('webhook_outbox_unpublished')).toBe(0);
      expect(after('webhook_outbox_relay_lag_seconds')).toBe(0);
      expectOnePerEvent(await natsStreamMessages(nc, stream), sent, (type) => `${prefix}.stripe.${type}`);
    } finally {
      // Close the app (and its NATS connection through the proxy) before the proxy goes away.
      await app?.stop();
      app = undefined;
      await proxy.stop();
    }
  });
});

it('a broker destination whose publish rejects without a reason (undefined) is a failure: the row stays unpublished, retried', async () => {
  const db = await freshDatabase('sqlite');
  const store = openStore(db.url);
  try {
    await store.migrate();
    await store.acceptBatch([record('evt_no_reason', undefined, { endpointId: 'stripe' })]);
    const config = parseConfig(configDoc(db.url, { destinations: [{ id: 'bus', type: 'nats', url: NATS_URL, stream: 'unused', subject: 'unused' }], endpoints: [endpoint] }));
    // The Destination contract, delivered as a broker client could reject it: no reason at all.
    const silent: Destination = { id: 'bus', type: 'nats', deliver: () => Promise.reject(undefined), close: async () => undefined };
    const relay = relayOver(store, config, new Map([['bus', silent]]));
    const claimed = await relay.claim(10);
    expect(claimed).toHaveLength(1);
    await relay.process(claimed);
    expect((await store.queueStats()).outboxUnpublished).toBe(1);
  } finally {
    await store.close();
    await db.cleanup();
  }
});

describeEachStore('outbox relay: a row whose broker route was removed after accept', (kind) => {
  it('is marked published without a publish, and never silently: a warning names it and webhook_relay_unrouted_total counts it', async () => {
    const db = await freshDatabase(kind);
    const store = openStore(db.url);
    try {
      await store.migrate();
      // Accepted while a broker route matched: the outbox row waits for the relay.
      await store.acceptBatch([record('evt_unrouted', undefined, { endpointId: 'stripe' })]);
      expect((await store.queueStats()).outboxUnpublished).toBe(1);
      // Then the route was taken out of the config.
      const config = parseConfig(configDoc(db.url, { endpoints: [{ ...endpoint, routes: [] }] }));
      const lines: Record<string, unknown>[] = [];
      const log = pino({ level: 'warn' }, { write: (line: string) => void lines.push(JSON.parse(line) as Record<string, unknown>) });
      const metrics = engineMetrics(new Registry());
      const relay = relayOver(store, config, new Map(), { metrics, log });
      const claimed = await relay.claim(10);
      expect(claimed).toHaveLength(1);
      await relay.process(claimed);
      expect((await store.queueStats()).outboxUnpublished).toBe(0);
      expect(metrics.relayUnrouted.get(['stripe'])).toBe(1);
      const warned = lines.filter((l) => l.msg === 'outbox row has no broker route any more; marked published without a publish');
      expect(warned).toHaveLength(1);
      expect(warned[0]).toMatchObject({ inboxId: claimed[0]!.row.inboxId, endpoint: 'stripe', type: claimed[0]!.row.eventType });
    } finally {
      await store.close();
      await db.cleanup();
    }
  });
});

/** A relay driven by hand (claim, then process) over `store`; its clock is `now`, by default past the records' receipt (helpers/records.ts). */
function relayOver(store: WorkStore, config: Config, destinations: Map<string, Destination>, opts: { now?: () => number; log?: Logger; metrics?: EngineMetrics } = {}): OutboxRelay {
  return new OutboxRelay({
    store, owner: 'relay', leaseMs: 1000, retry: config.retry, metrics: opts.metrics ?? engineMetrics(new Registry()),
    log: opts.log ?? pino({ level: 'silent' }), router: new Router(config.endpoints, destinations), now: opts.now ?? (() => 1_900_000_000_000),
  });
}

describeEachStore('outbox relay driven by hand: one event, a RabbitMQ and a NATS route', (kind) => {
  let db: TestDatabase;
  let store: InboxStore;
  let amqp: ChannelModel;
  let ch: Channel;
  let nc: NatsConnection;
  let queue: string;
  let stream: string;
  let destinations: Map<string, Destination>;
  // RabbitMQ has no duplicate window at all: every republish to it is one more message in its queue.
  const rabbit = (routingKey = `${queue}.{provider}.{type}`) =>
    ({ id: 'rabbit', type: 'rabbitmq', url: AMQP_URL, exchange: 'amq.topic', routingKey, queue, timeoutMs: 3000 });
  const nats = (url = NATS_URL) => ({ id: 'nats', type: 'nats', url, subject: `${stream.toLowerCase()}.{provider}.{type}`, stream, timeoutMs: 1000 });
  const bothRoutes = { ...endpoint, routes: [{ events: ['*'], destination: 'rabbit' }, { events: ['*'], destination: 'nats' }] };

  beforeEach(async () => {
    db = await freshDatabase(kind);
    store = openStore(db.url);
    await store.migrate();
    amqp = await amqpConnect(AMQP_URL);
    ch = await amqp.createChannel();
    nc = await natsConnect({ servers: NATS_URL, timeout: 5000 });
    queue = uniqueName('whi_relay_hand_q');
    stream = uniqueName('WHI_RELAY_HAND');
    destinations = new Map();
  });
  afterEach(async () => {
    await closeAll(destinations.values());
    await jetstreamManager(nc).then((m) => m.streams.delete(stream)).catch(() => undefined);
    await ch.deleteQueue(queue).catch(() => undefined);
    await nc.close();
    await amqp.close();
    await store.close();
    await db.cleanup();
  });

  /** A relay over these destinations (opened here, closed after the test) whose clock the test moves. */
  function relayWith(destinationConfigs: unknown[], clock: { now: number }, opts: { log?: Logger; metrics?: EngineMetrics } = {}): OutboxRelay {
    const config = parseConfig(configDoc(db.url, { destinations: destinationConfigs, endpoints: [bothRoutes] }));
    destinations = openDestinations(config.destinations).destinations;
    return relayOver(store, config, destinations, { ...opts, now: () => clock.now });
  }

  /** One relay round over the one row; then the clock moves past any backoff. */
  async function round(relay: OutboxRelay, clock: { now: number }): Promise<void> {
    const claimed = await relay.claim(10);
    expect(claimed).toHaveLength(1);
    await relay.process(claimed);
    clock.now += 24 * 3600_000;
  }

  it('one route down: retries only the route still owed; the healthy broker holds the event once after several retries; published once both have it', async () => {
    // NATS is "down" behind a closed proxy port until the end.
    const proxy = new TcpProxy(4222);
    const port = await proxy.start();
    await proxy.stop();
    try {
      const event = record('evt_two_routes', undefined, { endpointId: 'stripe' });
      await store.acceptBatch([event]);
      const clock = { now: 1_900_000_000_000 };
      const metrics = engineMetrics(new Registry());
      const relay = relayWith([rabbit(), nats(`nats://127.0.0.1:${port}`)], clock, { metrics });

      for (let i = 0; i < 4; i++) await round(relay, clock);
      expect((await ch.checkQueue(queue)).messageCount).toBe(1);
      expect(metrics.relay.get(['rabbit', 'published'])).toBe(1);
      expect(metrics.relay.get(['nats', 'failed'])).toBe(4);
      expect((await store.queueStats()).outboxUnpublished).toBe(1);

      await proxy.start(port);
      await round(relay, clock);
      expect((await store.queueStats()).outboxUnpublished).toBe(0);
      expect(await relay.claim(10)).toHaveLength(0);
      expect((await drainQueue(ch, queue)).map((m) => m.id)).toEqual([event.inboxId]);
      expect((await natsStreamMessages(nc, stream)).map((m) => m.id)).toEqual([event.inboxId]);
    } finally {
      await closeAll(destinations.values());
      await proxy.stop();
    }
  });

  it('a route that refuses the event for good (routing_key_too_long): the row is parked, said out loud, not retried; requeued after the fix, only that route is published to', async () => {
    // A 300-byte type expands the RabbitMQ routing key past AMQP's 255 bytes; NATS takes it.
    const event = record('evt_refused', undefined, { endpointId: 'stripe', eventType: `t${'x'.repeat(299)}` });
    await store.acceptBatch([event]);
    const clock = { now: 1_900_000_000_000 };
    const metrics = engineMetrics(new Registry());
    const lines: Record<string, unknown>[] = [];
    const log = pino({ level: 'warn' }, { write: (line: string) => void lines.push(JSON.parse(line) as Record<string, unknown>) });
    const relay = relayWith([rabbit(), nats()], clock, { metrics, log });

    await round(relay, clock);
    expect(await relay.claim(10)).toHaveLength(0); // a day later: still not due
    expect(await store.queueStats()).toMatchObject({ outboxUnpublished: 1, outboxParked: 1 });
    expect(metrics.relayParked.get(['rabbit', 'routing_key_too_long'])).toBe(1);
    const parkedLines = lines.filter((l) => String(l.msg).startsWith('outbox row parked'));
    expect(parkedLines).toHaveLength(1);
    expect(parkedLines[0]).toMatchObject({ level: 50, inboxId: event.inboxId, publishedTo: ['nats'], refused: [{ destination: 'rabbit', reason: 'routing_key_too_long' }] });
    expect(await store.listParkedOutbox(10)).toEqual([expect.objectContaining({
      outboxId: event.outboxId, inboxId: event.inboxId, publishedTo: ['nats'], failureReason: 'routing_key_too_long', attemptCount: 1,
      lastError: expect.stringContaining('routing key is longer than 255 bytes'),
    })]);

    // The operator shortens the template, then requeues the row: only RabbitMQ is still owed.
    await closeAll(destinations.values());
    const fixed = relayWith([rabbit(`${queue}.{provider}`), nats()], clock, { metrics, log });
    expect(await store.requeueParkedOutbox(null, clock.now)).toBe(1);
    await round(fixed, clock);
    expect(await store.queueStats()).toMatchObject({ outboxUnpublished: 0, outboxParked: 0 });
    expect((await drainQueue(ch, queue)).map((m) => m.id)).toEqual([event.inboxId]);
    expect((await natsStreamMessages(nc, stream)).map((m) => m.id)).toEqual([event.inboxId]);
  });

  it('a refusal beside a route that may still recover keeps the normal schedule; parked once only refusals are left', async () => {
    const proxy = new TcpProxy(4222);
    const port = await proxy.start();
    await proxy.stop();
    try {
      await store.acceptBatch([record('evt_refused_and_down', undefined, { endpointId: 'stripe', eventType: `t${'x'.repeat(299)}` })]);
      const clock = { now: 1_900_000_000_000 };
      const relay = relayWith([rabbit(), nats(`nats://127.0.0.1:${port}`)], clock);
      await round(relay, clock);
      await round(relay, clock); // due again: NATS may come back
      expect((await store.queueStats()).outboxParked).toBe(0);
      await proxy.start(port);
      await round(relay, clock); // NATS takes it; RabbitMQ still refuses
      expect(await relay.claim(10)).toHaveLength(0);
      expect(await store.queueStats()).toMatchObject({ outboxUnpublished: 1, outboxParked: 1 });
      expect((await store.listParkedOutbox(10)).map((p) => p.publishedTo)).toEqual([['nats']]);
    } finally {
      await closeAll(destinations.values());
      await proxy.stop();
    }
  });
});
