import { connect as amqpConnect } from 'amqplib';
import pino from 'pino';
import { afterEach, expect, it } from 'vitest';
import { startApp } from '../../src/app.js';
import { parseConfig } from '../../src/config/schema.js';
import { openStore } from '../../src/store/open.js';
import type { InboxStore } from '../../src/store/port.js';
import { startWorkers, type RunningWorkers } from '../../src/workers.js';
import { configDoc, STRIPE_SECRET } from '../helpers/app.js';
import { AMQP_URL, drainQueue, uniqueName } from '../helpers/destinations.js';
import { waitFor } from '../helpers/engine.js';
import { stripeEvent, stripeHeaders } from '../helpers/events.js';
import { post } from '../helpers/http.js';
import { describeEachStore, freshDatabase, type TestDatabase } from '../helpers/stores.js';

/** Rounds of 50 events: at least MIN_ROUNDS, more until both relays have published, at most MAX_ROUNDS. */
const MIN_ROUNDS = 4;
const MAX_ROUNDS = 40;

/**
 * Two `work` processes (here two stores, each its own connections, as two processes have) relay
 * one outbox to RabbitMQ, which keeps every copy it is sent (no duplicate window): each row is
 * claimed by one relay only (SKIP LOCKED / the write lock), published once, marked published once.
 */
describeEachStore('two outbox relays on one database', (kind) => {
  let db: TestDatabase | undefined;
  let store: InboxStore | undefined;
  const workers: RunningWorkers[] = [];
  afterEach(async () => {
    for (const w of workers.splice(0)) await w.stop();
    await store?.close();
    await db?.cleanup();
    store = db = undefined;
  });

  it('publish every row exactly once, each on its first attempt', async () => {
    db = await freshDatabase(kind);
    const queue = uniqueName('whi_two_relays_q');
    const doc = configDoc(db.url, {
      workers: { leaseMs: 20_000, pollMs: 50, concurrency: 32, batchSize: 8 },
      destinations: [{ id: 'rabbit', type: 'rabbitmq', url: AMQP_URL, exchange: 'amq.topic', routingKey: `${queue}.{provider}.{type}`, queue, timeoutMs: 3000 }],
      endpoints: [{ id: 'stripe', provider: 'stripe', secrets: [{ version: 'v1', value: STRIPE_SECRET }], routes: [{ events: ['*'], destination: 'rabbit' }] }],
    });
    const amqp = await amqpConnect(AMQP_URL);
    const ch = await amqp.createChannel();
    try {
      const serve = await startApp(parseConfig(doc, {}), { logger: pino({ level: 'silent' }), workers: false });
      // Both relays run before the events arrive: each is woken by them and claims its share.
      workers.push(...await Promise.all([0, 1].map(() => startWorkers(parseConfig(doc, {}), { logger: pino({ level: 'silent' }), migrate: false }))));
      // Which relay claims a row is the relays' race: one of them can, by its timing, take a whole
      // round. Rounds of 50 are sent until both have published (each its share of the claims), so
      // the run always has two relays at work; a relay that can never claim fails at the cap.
      const inboxIds: string[] = [];
      const published = (): number[] => workers.map((w) => w.engine.metrics.relay.get(['rabbit', 'published']));
      store = openStore(db.url);
      try {
        for (let round = 0; round < MAX_ROUNDS && !(round >= MIN_ROUNDS && published().every((n) => n > 0)); round++) {
          inboxIds.push(...await Promise.all(Array.from({ length: 50 }, async (_, j) => {
            const body = stripeEvent(`evt_relay_${round * 50 + j}`);
            const r = await post(`${serve.url}/webhooks/stripe`, body, stripeHeaders(body));
            expect(r.status).toBe(200);
            return r.json().inbox_id as string;
          })));
          await waitFor(async () => (await store!.queueStats()).outboxUnpublished === 0, 60_000, 'every outbox row published');
        }
      } finally {
        await serve.close();
      }
      const messages = await drainQueue(ch, queue);
      expect(messages.map((m) => m.id).sort()).toEqual([...inboxIds].sort());
      // Both took part, and between them published each row once.
      const counts = published();
      expect(counts.every((n) => n > 0), String(counts)).toBe(true);
      expect(counts[0]! + counts[1]!).toBe(inboxIds.length);
      const attempts = await store.transaction((tx) => tx.query<{ attempt_count: number | string }>('SELECT attempt_count FROM webhook_outbox'));
      expect(attempts.map((r) => Number(r.attempt_count)).filter((n) => n !== 1)).toEqual([]);
    } finally {
      await ch.deleteQueue(queue).catch(() => undefined);
      await amqp.close();
    }
  }, 120_000);
});
