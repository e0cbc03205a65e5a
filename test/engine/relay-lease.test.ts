import { connect as amqpConnect, type Channel, type ChannelModel } from 'amqplib';
import { afterAll, afterEach, beforeAll, expect, it } from 'vitest';
import { startTestApp, type TestApp } from '../helpers/app.js';
import { STRIPE_SECRET } from '../helpers/app.js';
import { AMQP_URL, drainQueue, uniqueName } from '../helpers/destinations.js';
import { waitFor } from '../helpers/engine.js';
import { stripeEvent, stripeHeaders } from '../helpers/events.js';
import { post } from '../helpers/http.js';
import { describeEachStore } from '../helpers/stores.js';
import { TcpProxy } from '../helpers/tcp-proxy.js';

/**
 * A publish may take a broker destination up to its timeouts (RabbitMQ: connecting, then the
 * confirm), which can be longer than `workers.leaseMs`. The relay's lease on the row must last
 * while it waits: once it expired, the relay claimed the row again and published it a second time
 * beside the first (RabbitMQ keeps every copy it is sent).
 */
describeEachStore('outbox relay: a publish slower than the lease', (kind) => {
  let app: TestApp | undefined;
  let amqp: ChannelModel;
  let ch: Channel;
  const queues: string[] = [];
  const proxy = new TcpProxy(5672);

  beforeAll(async () => {
    amqp = await amqpConnect(AMQP_URL);
    ch = await amqp.createChannel();
  });
  afterEach(async () => {
    await app?.stop();
    app = undefined;
    await proxy.stop();
  });
  afterAll(async () => {
    for (const q of queues.splice(0)) await ch.deleteQueue(q).catch(() => undefined);
    await amqp.close();
  });

  async function send(id: string): Promise<string> {
    const body = stripeEvent(id);
    const r = await post(`${app!.url}/webhooks/stripe`, body, stripeHeaders(body));
    expect(r.status).toBe(200);
    return r.json().inbox_id;
  }

  it('keeps the row leased while its confirm is awaited: published once, not again by a second claim', async () => {
    const queue = uniqueName('whi_relay_lease_q');
    queues.push(queue);
    await proxy.start();
    app = await startTestApp(kind, {
      workers: { leaseMs: 1000, pollMs: 50 },
      destinations: [{ id: 'bus', type: 'rabbitmq', url: `amqp://guest:guest@127.0.0.1:${proxy.port}`, exchange: 'amq.topic', routingKey: `${queue}.{provider}.{type}`, queue, timeoutMs: 4000 }],
      endpoints: [{ id: 'stripe', provider: 'stripe', secrets: [{ version: 'v1', value: STRIPE_SECRET }], routes: [{ events: ['*'], destination: 'bus' }] }],
    }, {}, { workers: true });
    // The connection is up: the first event is on the bus.
    const first = await send('evt_lease_1');
    await waitFor(async () => (await app!.store.queueStats()).outboxUnpublished === 0, 10_000, 'the first event published');

    // The broker takes 2.5 s to read the next publish (well within timeoutMs, 2.5 leases).
    proxy.hold();
    const slow = await send('evt_lease_2');
    await new Promise((r) => setTimeout(r, 2500));
    proxy.release();
    await waitFor(async () => (await app!.store.queueStats()).outboxUnpublished === 0, 10_000, 'the slow event published');
    await new Promise((r) => setTimeout(r, 300)); // a second copy, if any, lands meanwhile

    expect((await drainQueue(ch, queue)).map((m) => m.id)).toEqual([first, slow]);
  });
});
