import { connect as amqpConnect, type Channel, type ChannelModel } from 'amqplib';
import pino from 'pino';
import { afterAll, afterEach, beforeAll, expect, it } from 'vitest';
import { startApp } from '../../src/app.js';
import { parseConfig } from '../../src/config/schema.js';
import { startWorkers, type RunningWorkers } from '../../src/workers.js';
import { configDoc, STRIPE_SECRET } from '../helpers/app.js';
import { AMQP_URL, drainQueue, uniqueName } from '../helpers/destinations.js';
import { waitFor } from '../helpers/engine.js';
import { stripeEvent, stripeHeaders } from '../helpers/events.js';
import { post } from '../helpers/http.js';
import { describeEachStore, freshDatabase, type TestDatabase } from '../helpers/stores.js';

/**
 * Events accepted while their type had no broker route, processed once the config routes it to a
 * broker (the operator moved a route from an HTTP forward that was down to RabbitMQ, or a `work`
 * process already runs the new config while `serve` still accepts under the old one). The worker
 * resolves routes when it processes an event: it must not call the event PROCESSED on the
 * strength of a broker route whose outbox row says there is nothing to publish.
 */
describeEachStore('a broker route added while events wait', (kind) => {
  let db: TestDatabase | undefined;
  let amqp: ChannelModel;
  let ch: Channel;
  const queues: string[] = [];
  const workers: RunningWorkers[] = [];

  beforeAll(async () => {
    amqp = await amqpConnect(AMQP_URL);
    ch = await amqp.createChannel();
  });
  afterEach(async () => {
    for (const w of workers.splice(0)) await w.stop();
    await db?.cleanup();
    db = undefined;
  });
  afterAll(async () => {
    for (const q of queues.splice(0)) await ch.deleteQueue(q).catch(() => undefined);
    await amqp.close();
  });

  it('the waiting events are published to it, not marked PROCESSED with nothing sent', async () => {
    db = await freshDatabase(kind);
    const queue = uniqueName('whi_route_added_q');
    queues.push(queue);
    await ch.assertQueue(queue, { durable: true });
    // Before: the endpoint forwards over HTTP to a service that is down (a closed port); no broker route.
    const before = configDoc(db.url, {
      destinations: [{ id: 'billing', type: 'http', url: 'http://127.0.0.1:9/hooks', secret: `whsec_${Buffer.alloc(32, 3).toString('base64')}` }],
      endpoints: [{ id: 'stripe', provider: 'stripe', secrets: [{ version: 'v1', value: STRIPE_SECRET }], routes: [{ events: ['*'], destination: 'billing' }] }],
    });
    const serve = await startApp(parseConfig(before, {}), { logger: pino({ level: 'silent' }), workers: false });
    const inboxIds: string[] = [];
    try {
      for (let i = 0; i < 3; i++) {
        const body = stripeEvent(`evt_route_added_${i}`);
        const r = await post(`${serve.url}/webhooks/stripe`, body, stripeHeaders(body));
        expect(r.status).toBe(200);
        inboxIds.push(r.json().inbox_id);
      }
    } finally {
      await serve.close();
    }

    // After: the operator routes the endpoint to RabbitMQ instead, and the workers start with it.
    const after = configDoc(db.url, {
      workers: { pollMs: 50 },
      destinations: [{ id: 'bus', type: 'rabbitmq', url: AMQP_URL, exchange: 'amq.topic', routingKey: `${queue}.{provider}.{type}`, queue, timeoutMs: 3000 }],
      endpoints: [{ id: 'stripe', provider: 'stripe', secrets: [{ version: 'v1', value: STRIPE_SECRET }], routes: [{ events: ['*'], destination: 'bus' }] }],
    });
    const w = await startWorkers(parseConfig(after, {}), { logger: pino({ level: 'silent' }), migrate: false });
    workers.push(w);
    await waitFor(async () => {
      for (const id of inboxIds) if ((await w.store.getEvent(id))?.status !== 'PROCESSED') return false;
      return (await w.store.queueStats()).outboxUnpublished === 0;
    }, 15_000, 'every event PROCESSED and its outbox row published');
    // Each event is on the bus once: PROCESSED meant the relay had something to publish.
    expect((await drainQueue(ch, queue)).map((m) => m.id).sort()).toEqual([...inboxIds].sort());
  });
});
