import { createServer, type Server, type Socket } from 'node:net';
import { connect, type Channel, type ChannelModel, type GetMessage } from 'amqplib';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { DestinationConfig } from '../../src/config/engine.js';
import { brokerMessage, type Destination } from '../../src/destinations/contract.js';
import { closeAll, createDestination } from '../../src/destinations/registry.js';
import { RetryableError } from '../../src/engine/failure.js';
import { ConfigError } from '../../src/errors.js';
import { thrownBy } from '../helpers/adapter.js';
import { closedPort, deliveryEvent, drainQueue, expectSilentLinkDropped, failureOf, uniqueName } from '../helpers/destinations.js';
import { TcpProxy } from '../helpers/tcp-proxy.js';

// The real RabbitMQ that .ci/run starts on loopback.
const AMQP_URL = 'amqp://guest:guest@127.0.0.1:5672';

type RabbitConfig = Extract<DestinationConfig, { type: 'rabbitmq' }>;

let conn: ChannelModel;
let ch: Channel;
const queues: string[] = [];
const exchanges: string[] = [];
const open: Destination[] = [];
const proxies: TcpProxy[] = [];

beforeAll(async () => {
  conn = await connect(AMQP_URL);
  ch = await conn.createChannel();
});

afterEach(async () => {
  await closeAll(open.splice(0));
  for (const p of proxies.splice(0)) await p.stop();
});

afterAll(async () => {
  for (const q of queues) await ch.deleteQueue(q).catch(() => undefined);
  for (const x of exchanges) await ch.deleteExchange(x).catch(() => undefined);
  await conn?.close();
});

function destination(over: Partial<RabbitConfig>): Destination {
  const d = createDestination({ id: 'rabbit', type: 'rabbitmq', url: AMQP_URL, exchange: '', routingKey: 'webhooks.{provider}.{type}', queue: undefined, timeoutMs: 3000, ...over });
  open.push(d);
  return d;
}

/** A destination through a TcpProxy, which counts its connections (stopped after the test). */
async function proxied(over: Partial<RabbitConfig>): Promise<{ d: Destination; proxy: TcpProxy }> {
  const proxy = new TcpProxy(5672);
  proxies.push(proxy);
  const port = await proxy.start();
  return { d: destination({ url: `amqp://guest:guest@127.0.0.1:${port}`, ...over }), proxy };
}

/** A queue name the test owns (deleted after the file). */
function queueName(): string {
  const q = uniqueName('whi_test_q');
  queues.push(q);
  return q;
}

async function topicExchange(): Promise<string> {
  const x = uniqueName('whi_test_x');
  exchanges.push(x);
  await ch.assertExchange(x, 'topic', { durable: false });
  return x;
}

/** An AMQP connection-class method frame on channel 0: 60 = connection.blocked (with a reason), 61 = connection.unblocked. */
function amqpConnectionFrame(method: 60 | 61, reason?: string): Buffer {
  const args = reason === undefined ? Buffer.alloc(0) : Buffer.concat([Buffer.from([Buffer.byteLength(reason)]), Buffer.from(reason)]);
  const payload = Buffer.concat([Buffer.from([0, 10, 0, method]), args]);
  const size = Buffer.alloc(4);
  size.writeUInt32BE(payload.length);
  return Buffer.concat([Buffer.from([1, 0, 0]), size, payload, Buffer.from([0xce])]);
}

/** Whether a chunk from the broker holds a publisher confirm: a method frame of class 60 (basic), method 80 (ack). */
function holdsConfirm(chunk: Buffer): boolean {
  for (let at = 0; at + 11 <= chunk.length; at += 8 + chunk.readUInt32BE(at + 3)) {
    if (chunk[at] === 1 && chunk.readUInt16BE(at + 7) === 60 && chunk.readUInt16BE(at + 9) === 80) return true;
  }
  return false;
}

/** The next message on `q`, waiting briefly for it to arrive. */
async function take(q: string): Promise<GetMessage> {
  for (let i = 0; i < 50; i++) {
    const m = await ch.get(q, { noAck: true });
    if (m) return m;
    await new Promise((r) => setTimeout(r, 20));
  }
  throw new Error(`no message on ${q}`);
}

describe('rabbitmq destination (real broker)', () => {
  it('default exchange: asserts the durable queue and publishes persistent JSON with message_id = inbox id', async () => {
    const q = queueName();
    const d = destination({ routingKey: q, queue: q });
    const e = deliveryEvent({ body: Buffer.from('{"secret":"provider payload"}') });
    await d.deliver(e);

    expect((await ch.checkQueue(q)).messageCount).toBe(1);
    const m = await take(q);
    expect(m.properties.messageId).toBe(e.inboxId);
    expect(m.properties.contentType).toBe('application/json');
    expect(m.properties.deliveryMode).toBe(2);
    expect(m.fields.routingKey).toBe(q);
    expect(m.content.toString()).toBe(brokerMessage(e));
    expect(JSON.parse(m.content.toString())).toEqual({
      inbox_id: e.inboxId, provider: 'stripe', endpoint_id: 'stripe-main', provider_event_id: 'evt_1',
      event_type: 'payment_intent.succeeded', received_at: '2025-01-02T03:04:05.678Z',
    });
  });

  it('named exchange: binds the queue with the routing key prefix + "#" and routes expanded keys to it', async () => {
    const x = await topicExchange();
    const q = queueName();
    const prefix = x.replace(/_/g, '-');
    const d = destination({ exchange: x, routingKey: `${prefix}.{provider}.{type}`, queue: q });
    const e = deliveryEvent();
    await d.deliver(e);
    await d.deliver(deliveryEvent({ provider: 'github', eventType: 'push' }));
    const first = await take(q);
    expect(first.fields.exchange).toBe(x);
    expect(first.fields.routingKey).toBe(`${prefix}.stripe.payment_intent.succeeded`);
    expect(first.properties.messageId).toBe(e.inboxId);
    expect((await take(q)).fields.routingKey).toBe(`${prefix}.github.push`);
  });

  it('a message no queue accepts is unroutable; the channel stays usable', async () => {
    const x = await topicExchange();
    const d = destination({ exchange: x, routingKey: 'nowhere.{provider}' });
    const err = await failureOf(d.deliver(deliveryEvent()));
    expect(err).toBeInstanceOf(RetryableError);
    expect(err.reason).toBe('unroutable');

    const q = queueName();
    await ch.assertQueue(q, { durable: false });
    await ch.bindQueue(q, x, 'nowhere.#');
    await d.deliver(deliveryEvent());
    expect((await take(q)).fields.routingKey).toBe('nowhere.stripe');
  });

  it('its queue deleted (an operator, an expiry policy): one delivery is unroutable, the next declares the queue again and lands', async () => {
    const q = queueName();
    const d = destination({ routingKey: q, queue: q });
    await d.deliver(deliveryEvent());
    await ch.deleteQueue(q);
    expect((await failureOf(d.deliver(deliveryEvent()))).reason).toBe('unroutable');
    const e = deliveryEvent();
    await d.deliver(e);
    expect((await take(q)).properties.messageId).toBe(e.inboxId);
  });

  it('with queue set, one unroutable message fails alone: the others published beside it are confirmed, each in the queue once', async () => {
    // A direct exchange matches our "k.#" binding literally: only the key an operator bound routes.
    const x = uniqueName('whi_test_x');
    exchanges.push(x);
    await ch.assertExchange(x, 'direct', { durable: false });
    const q = queueName();
    await ch.assertQueue(q, { durable: true });
    await ch.bindQueue(q, x, 'k.bound');
    const { d, proxy } = await proxied({ exchange: x, routingKey: 'k.{type}', queue: q });
    await d.deliver(deliveryEvent({ eventType: 'bound' })); // connected, queue declared
    await take(q);
    const lost = deliveryEvent({ eventType: 'unbound' });
    const healthy = Array.from({ length: 5 }, () => deliveryEvent({ eventType: 'bound' }));
    // One relay batch, the unroutable message first: its return and ack come before the others' confirms.
    const outcomes = await Promise.all([lost, ...healthy].map((e) => d.deliver(e).then(() => 'confirmed', (err: RetryableError) => err.reason)));
    expect(outcomes).toEqual(['unroutable', ...healthy.map(() => 'confirmed')]);
    // A healthy row failed beside it would be retried, and queued twice.
    expect((await drainQueue(ch, q)).map((m) => m.id).sort()).toEqual(healthy.map((e) => e.inboxId).sort());
    expect(proxy.accepted).toBe(1);
  });

  it('a broker nack is rabbitmq_nack', async () => {
    const q = queueName();
    // A queue that refuses every publish: with confirms, the broker answers basic.nack.
    await ch.assertQueue(q, { durable: false, arguments: { 'x-max-length': 0, 'x-overflow': 'reject-publish' } });
    const d = destination({ routingKey: q });
    const err = await failureOf(d.deliver(deliveryEvent()));
    expect(err.reason).toBe('rabbitmq_nack');
  });

  it('a missing exchange (no queue set): every delivery fails exchange_not_found saying so, on one connection; once it exists the next lands', async () => {
    const x = uniqueName('whi_test_x');
    exchanges.push(x);
    const { d, proxy } = await proxied({ exchange: x, routingKey: 'late.{provider}' });
    for (let batch = 0; batch < 3; batch++) {
      for (const err of await Promise.all([1, 2, 3].map(() => failureOf(d.deliver(deliveryEvent()))))) {
        expect(err).toBeInstanceOf(RetryableError);
        expect(err.reason).toBe('exchange_not_found');
        expect(err.message).toContain('404');
        expect(err.message).toContain('no exchange');
      }
    }
    await ch.assertExchange(x, 'topic', { durable: false });
    const q = queueName();
    await ch.assertQueue(q, { durable: false });
    await ch.bindQueue(q, x, 'late.#');
    const e = deliveryEvent();
    await d.deliver(e);
    expect((await take(q)).properties.messageId).toBe(e.inboxId);
    // A channel error closes the channel, not the connection: no reconnect per batch.
    expect(proxy.accepted).toBe(1);
  });

  it('a missing exchange to bind the queue to: exchange_not_found on one connection; once it exists the next delivery binds and lands', async () => {
    const x = uniqueName('whi_test_x');
    exchanges.push(x);
    const q = queueName();
    const { d, proxy } = await proxied({ exchange: x, routingKey: 'late.{provider}', queue: q });
    for (let i = 0; i < 3; i++) {
      const err = await failureOf(d.deliver(deliveryEvent()));
      expect(err.reason).toBe('exchange_not_found');
      expect(err.message).toContain('404');
    }
    await ch.assertExchange(x, 'topic', { durable: false });
    await d.deliver(deliveryEvent());
    expect((await take(q)).fields.routingKey).toBe('late.stripe');
    expect(proxy.accepted).toBe(1);
  });

  it('a publish the broker refuses (403, here an internal exchange): access_refused, on one connection', async () => {
    const x = uniqueName('whi_test_x');
    exchanges.push(x);
    await ch.assertExchange(x, 'topic', { durable: false, internal: true });
    const { d, proxy } = await proxied({ exchange: x, routingKey: 'refused.{provider}' });
    for (let i = 0; i < 3; i++) {
      const err = await failureOf(d.deliver(deliveryEvent()));
      expect(err).toBeInstanceOf(RetryableError);
      expect(err.reason).toBe('access_refused');
      expect(err.message).toContain('403');
    }
    expect(proxy.accepted).toBe(1);
  });

  it('a login the broker refuses (a wrong password): access_refused, naming the 403, and retried', async () => {
    const d = destination({ url: 'amqp://guest:not-the-password@127.0.0.1:5672' });
    const err = await failureOf(d.deliver(deliveryEvent()));
    expect(err).toBeInstanceOf(RetryableError);
    expect(err.reason).toBe('access_refused');
    expect(err.message).toContain('403');
    expect(err.message).not.toContain('not-the-password');
  });

  it('rides out a connection loss: fails as retryable, then reconnects on the next delivery', async () => {
    const proxy = new TcpProxy(5672);
    const port = await proxy.start();
    try {
      const q = queueName();
      const d = destination({ url: `amqp://guest:guest@127.0.0.1:${port}`, routingKey: q, queue: q, timeoutMs: 1000 });
      await d.deliver(deliveryEvent());
      await proxy.stop();
      const during = await failureOf(d.deliver(deliveryEvent()));
      expect(['rabbitmq_unavailable', 'timeout']).toContain(during.reason);
      await proxy.start(port);
      const e = deliveryEvent();
      await d.deliver(e);
      const ids = [(await take(q)).properties.messageId, (await take(q)).properties.messageId];
      expect(ids[1]).toBe(e.inboxId);
    } finally {
      await proxy.stop();
    }
  });

  it('a connection that went silent without a FIN: the timed-out delivery drops it and the next one reconnects at once', async () => {
    const proxy = new TcpProxy(5672);
    await proxy.start();
    try {
      const q = queueName();
      const d = destination({ url: `amqp://guest:guest@127.0.0.1:${proxy.port}`, routingKey: q, queue: q, timeoutMs: 800 });
      await expectSilentLinkDropped(d, proxy);
      // Without the drop this waited on the dead link until AMQP heartbeats noticed (minutes).
      const e = deliveryEvent();
      await d.deliver(e);
      const ids = [(await take(q)).properties.messageId, (await take(q)).properties.messageId];
      expect(ids).toContain(e.inboxId);
    } finally {
      await proxy.stop();
    }
  });

  it('a broker slow to confirm but alive keeps its connection: the delivery that timed out fails alone, the one in flight beside it is confirmed', async () => {
    const q = queueName();
    const { d, proxy } = await proxied({ routingKey: q, queue: q, timeoutMs: 3000 });
    await d.deliver(deliveryEvent());
    await take(q);
    // The broker's confirms come late (a busy disk); everything else it answers at once.
    proxy.holdAnswers(holdsConfirm);
    const slow = deliveryEvent();
    const beside = deliveryEvent();
    const first = failureOf(d.deliver(slow));
    await new Promise((r) => setTimeout(r, 1500));
    const second = d.deliver(beside); // still waiting for its confirm when the first times out
    second.catch(() => undefined); // awaited below, after the first
    const f = await first;
    expect(f.reason).toBe('timeout');
    expect(f.message).not.toContain('dropped');
    proxy.releaseAnswers();
    await second; // not failed with a dropped connection, to be published again by its retry
    const after = deliveryEvent();
    await d.deliver(after);
    expect(proxy.accepted).toBe(1);
    // The timed-out one is in the queue too: its retry will add a copy (docs/destinations.md, "A slow broker").
    expect((await drainQueue(ch, q)).map((m) => m.id)).toEqual([slow.inboxId, beside.inboxId, after.inboxId]);
  });

  it('a broker that blocks publishers (connection.blocked, a resource alarm) is sent nothing: deliveries fail at once, and no copies pile up to land as duplicates', async () => {
    const proxy = new TcpProxy(5672);
    await proxy.start();
    try {
      const q = queueName();
      const d = destination({ url: `amqp://guest:guest@127.0.0.1:${proxy.port}`, routingKey: q, queue: q, timeoutMs: 500 });
      await d.deliver(deliveryEvent());
      await take(q);
      // The broker blocks this publisher and stops reading its socket, as RabbitMQ does on an alarm.
      proxy.hold();
      proxy.inject(amqpConnectionFrame(60, 'low on memory'));
      await new Promise((r) => setTimeout(r, 100));
      const e = deliveryEvent();
      for (let i = 0; i < 3; i++) {
        const t0 = Date.now();
        const f = await failureOf(d.deliver(e)); // the relay retrying one row while the alarm lasts
        expect(f).toBeInstanceOf(RetryableError);
        expect(f.reason).toBe('rabbitmq_blocked');
        expect(Date.now() - t0).toBeLessThan(400);
      }
      // Nothing was written for the broker to read later: no memory held in our process for it.
      expect(proxy.heldBytes()).toBe(0);
      proxy.release();
      proxy.inject(amqpConnectionFrame(61));
      await new Promise((r) => setTimeout(r, 100));
      await d.deliver(e);
      expect((await take(q)).properties.messageId).toBe(e.inboxId);
      await new Promise((r) => setTimeout(r, 200));
      expect(await ch.get(q, { noAck: true })).toBe(false); // one copy, not one per failed attempt
    } finally {
      await proxy.stop();
    }
  });

  it('a link that goes silent while the connection is being set up (after the AMQP handshake): the delivery times out and the next one connects afresh', async () => {
    const proxy = new TcpProxy(5672);
    await proxy.start();
    try {
      const q = queueName();
      const d = destination({ url: `amqp://guest:guest@127.0.0.1:${proxy.port}`, routingKey: q, queue: q, timeoutMs: 500 });
      // The client's channel.open (a method frame on channel 1, class 20 method 10) never reaches the broker.
      proxy.silenceAt((c) => c.length >= 11 && c[0] === 1 && c.readUInt16BE(1) === 1 && c.readUInt16BE(7) === 20 && c.readUInt16BE(9) === 10);
      expect((await failureOf(d.deliver(deliveryEvent()))).reason).toBe('timeout');
      // Without a bound on the setup, every delivery waited on that half-open connection until
      // AMQP heartbeats gave up on it (minutes).
      const e = deliveryEvent();
      const t0 = Date.now();
      await d.deliver(e);
      expect(Date.now() - t0).toBeLessThan(1500);
      expect((await take(q)).properties.messageId).toBe(e.inboxId);
    } finally {
      await proxy.stop();
    }
  });

  it('a closed port is rabbitmq_unavailable', async () => {
    const d = destination({ url: `amqp://guest:guest@127.0.0.1:${await closedPort()}`, timeoutMs: 1000 });
    const err = await failureOf(d.deliver(deliveryEvent()));
    expect(err).toBeInstanceOf(RetryableError);
    expect(err.reason).toBe('rabbitmq_unavailable');
    expect(err.message).not.toContain('guest:guest');
  });

  it('a server that accepts the socket but never speaks AMQP is a timeout', async () => {
    const held = new Set<Socket>();
    const silent: Server = createServer((s) => held.add(s));
    await new Promise<void>((r) => silent.listen(0, '127.0.0.1', r));
    try {
      const port = (silent.address() as { port: number }).port;
      const d = destination({ url: `amqp://guest:guest@127.0.0.1:${port}`, timeoutMs: 500 });
      const t0 = Date.now();
      const err = await failureOf(d.deliver(deliveryEvent()));
      expect(err.reason).toBe('timeout');
      expect(Date.now() - t0).toBeLessThan(2500);
    } finally {
      for (const s of held) s.destroy();
      await new Promise<void>((r) => silent.close(() => r()));
    }
  });

  it('an exchange name or a routing key template\'s fixed part over 255 bytes is a config error naming it (they could never be published)', () => {
    expect(thrownBy(() => destination({ exchange: 'x'.repeat(256) }), ConfigError).message).toMatch(/exchange: an exchange name is at most 255 bytes/);
    expect(thrownBy(() => destination({ routingKey: `${'k'.repeat(251)}.é.{type}.{provider}` }), ConfigError).message).toMatch(/routingKey: a routing key is at most 255 bytes/);
    // At the limit, both load; the placeholders' own spelling does not count.
    expect(() => destination({ exchange: 'x'.repeat(255), routingKey: `${'k'.repeat(255)}{type}{provider}{endpoint}` })).not.toThrow();
  });

  it('on the default exchange the routing key must be the queue name (config error)', () => {
    const err = thrownBy(() => destination({ routingKey: 'webhooks.{provider}', queue: 'some-queue' }), ConfigError);
    expect(err.message).toContain('routingKey');
  });
});
