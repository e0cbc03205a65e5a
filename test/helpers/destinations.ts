import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { jetstream, jetstreamManager } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/transport-node';
import type { Channel } from 'amqplib';
import type { DeliveryEvent, Destination } from '../../src/destinations/contract.js';
import { NeedsDecisionError, RetryableError } from '../../src/engine/failure.js';

/** The typed failure a delivery rejects with (anything else fails the test). */
export async function failureOf(p: Promise<unknown>): Promise<RetryableError | NeedsDecisionError> {
  try {
    await p;
  } catch (e) {
    if (e instanceof RetryableError || e instanceof NeedsDecisionError) return e;
    throw e;
  }
  throw new Error('expected the delivery to fail');
}

/**
 * A broker link that dies without a FIN: one delivery through `proxy` lands, then the proxy
 * freezes the open connection and the next deliveries (several at once, all on that connection)
 * must time out on it, saying the connection was dropped. The caller then checks that a later
 * delivery reconnects.
 */
export async function expectSilentLinkDropped(d: Destination, proxy: { freeze(): void }): Promise<void> {
  await d.deliver(deliveryEvent());
  proxy.freeze();
  const during = await Promise.all(Array.from({ length: 5 }, () => failureOf(d.deliver(deliveryEvent()))));
  for (const f of during) {
    if (f.reason !== 'timeout' || !f.message.includes('dropped')) throw new Error(`expected a timeout that drops the connection, got ${f.reason}: ${f.message}`);
  }
}

/** A loopback port nothing listens on (bound, then released). */
export async function closedPort(): Promise<number> {
  const s = createServer();
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', r));
  const port = (s.address() as AddressInfo).port;
  await new Promise<void>((r) => s.close(() => r()));
  return port;
}

/** A unique suffix for broker objects, so parallel or repeated runs never share a stream or queue. */
export const uniqueName = (prefix: string): string => `${prefix}_${process.pid}_${Date.now().toString(36)}_${Math.random().toString(36).slice(2, 8)}`;

export function deliveryEvent(over: Partial<DeliveryEvent> = {}): DeliveryEvent {
  return {
    inboxId: `0190a1b2-c3d4-7e5f-8a9b-${Math.random().toString(16).slice(2, 14).padEnd(12, '0')}`,
    provider: 'stripe',
    endpointId: 'stripe-main',
    providerEventId: 'evt_1',
    eventType: 'payment_intent.succeeded',
    receivedAtMs: Date.UTC(2025, 0, 2, 3, 4, 5, 678),
    ...over,
  };
}

/** The real brokers .ci/run starts on loopback (a test that cannot reach one fails, never skips). */
export const NATS_URL = 'nats://127.0.0.1:4222';
export const AMQP_URL = 'amqp://guest:guest@127.0.0.1:5672';

/** A message as a broker holds it: its idempotency key (Nats-Msg-Id / message_id), where it went, its JSON body. */
export interface BrokerMessage {
  readonly id: string;
  /** NATS subject / AMQP routing key. */
  readonly subject: string;
  readonly body: Record<string, unknown>;
}

/** Every message a JetStream stream holds, oldest first (read by an ordered consumer; the stream keeps them). */
export async function natsStreamMessages(nc: NatsConnection, stream: string): Promise<BrokerMessage[]> {
  const n = (await (await jetstreamManager(nc)).streams.info(stream)).state.messages;
  const consumer = await jetstream(nc).consumers.get(stream);
  const out: BrokerMessage[] = [];
  for (let i = 0; i < n; i++) {
    const m = await consumer.next({ expires: 2000 });
    if (!m) throw new Error(`stream ${stream}: message ${i + 1} of ${n} did not arrive`);
    out.push({ id: m.headers?.get('Nats-Msg-Id') ?? '', subject: m.subject, body: m.json() });
  }
  return out;
}

/** Takes every message a RabbitMQ queue holds (the queue is empty afterwards). */
export async function drainQueue(ch: Channel, queue: string): Promise<BrokerMessage[]> {
  const out: BrokerMessage[] = [];
  for (;;) {
    const m = await ch.get(queue, { noAck: true });
    if (!m) return out;
    out.push({ id: String(m.properties.messageId), subject: m.fields.routingKey, body: JSON.parse(m.content.toString('utf8')) });
  }
}
