import { jetstream, jetstreamManager, type JetStreamManager } from '@nats-io/jetstream';
import { connect, type NatsConnection } from '@nats-io/transport-node';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { DestinationConfig } from '../../src/config/engine.js';
import { brokerMessage, type Destination } from '../../src/destinations/contract.js';
import { MAX_SUBJECT_BYTES, natsSubject, sanitizeToken } from '../../src/destinations/nats.js';
import { closeAll, createDestination } from '../../src/destinations/registry.js';
import { NeedsDecisionError, RetryableError } from '../../src/engine/failure.js';
import { ConfigError } from '../../src/errors.js';
import { thrownBy } from '../helpers/adapter.js';
import { closedPort, deliveryEvent, expectSilentLinkDropped, failureOf, uniqueName } from '../helpers/destinations.js';
import { TcpProxy } from '../helpers/tcp-proxy.js';

// The real NATS server (JetStream enabled) that .ci/run starts on loopback.
const NATS_URL = 'nats://127.0.0.1:4222';

type NatsConfig = Extract<DestinationConfig, { type: 'nats' }>;

let nc: NatsConnection;
let jsm: JetStreamManager;
const streams: string[] = [];
const open: Destination[] = [];

beforeAll(async () => {
  nc = await connect({ servers: NATS_URL, timeout: 5000 });
  jsm = await jetstreamManager(nc);
});

afterEach(async () => {
  await closeAll(open.splice(0));
});

afterAll(async () => {
  for (const s of streams) await jsm.streams.delete(s).catch(() => undefined);
  await nc?.close();
});

function destination(over: Partial<NatsConfig>): Destination {
  const d = createDestination({ id: 'bus', type: 'nats', url: NATS_URL, subject: 'webhooks.{provider}.{type}', stream: undefined, timeoutMs: 3000, ...over });
  open.push(d);
  return d;
}

/** A fresh stream name and subject prefix for one test; the stream is deleted after the file. */
function scope(): { stream: string; prefix: string } {
  const stream = uniqueName('WHI_TEST');
  streams.push(stream);
  return { stream, prefix: stream.toLowerCase() };
}

async function messages(stream: string) {
  return (await jsm.streams.info(stream)).state.messages;
}

describe('nats subject', () => {
  it('substituted values cannot add wildcards, spaces or empty tokens', () => {
    expect(sanitizeToken('payment_intent.succeeded')).toBe('payment_intent.succeeded');
    expect(sanitizeToken('a b*>c')).toBe('a_b__c');
    expect(sanitizeToken('.x..y.')).toBe('_.x._.y._');
    expect(sanitizeToken('')).toBe('_');
    const e = deliveryEvent({ provider: 'git hub', eventType: 'push.>', endpointId: 'ep*' });
    expect(natsSubject('in.{endpoint}.{provider}.{type}', e)).toBe('in.ep_.git_hub.push._');
  });

  it('a subject with a wildcard, or a stream with no literal subject prefix, is a config error', () => {
    expect(thrownBy(() => destination({ subject: 'webhooks.*.{type}' }), ConfigError).message).toContain('subject');
    expect(thrownBy(() => destination({ subject: '{provider}.events', stream: 'S' }), ConfigError).message).toContain('literal');
    expect(thrownBy(() => destination({ stream: 'bad.name' }), ConfigError).message).toContain('stream');
  });
});

describe('nats destination (real JetStream)', () => {
  it('adds the stream on first use and publishes the metadata with Nats-Msg-Id = inbox id', async () => {
    const { stream, prefix } = scope();
    const d = destination({ subject: `${prefix}.{provider}.{type}`, stream });
    const e = deliveryEvent({ body: Buffer.from('{"secret":"provider payload"}') });
    await d.deliver(e);

    const info = await jsm.streams.info(stream);
    expect(info.config.subjects).toEqual([`${prefix}.>`]);
    expect(info.state.messages).toBe(1);

    const consumer = await jetstream(nc).consumers.get(stream);
    const m = await consumer.next({ expires: 2000 });
    expect(m).not.toBeNull();
    expect(m!.subject).toBe(`${prefix}.stripe.payment_intent.succeeded`);
    expect(m!.headers?.get('Nats-Msg-Id')).toBe(e.inboxId);
    expect(m!.string()).toBe(brokerMessage(e));
    expect(m!.json()).toEqual({
      inbox_id: e.inboxId, provider: 'stripe', endpoint_id: 'stripe-main', provider_event_id: 'evt_1',
      event_type: 'payment_intent.succeeded', received_at: '2025-01-02T03:04:05.678Z',
    });
    expect(m!.string()).not.toContain('provider payload');
  });

  it('the same inbox id published twice is stored once (server-side de-duplication)', async () => {
    const { stream, prefix } = scope();
    const d = destination({ subject: `${prefix}.{provider}.{type}`, stream });
    const e = deliveryEvent();
    await d.deliver(e);
    await d.deliver(e);
    await d.deliver(deliveryEvent({ eventType: 'charge.refunded' }));
    expect(await messages(stream)).toBe(2);

    // What the second deliver got back: a PubAck marked duplicate, for the first copy's sequence.
    const ack = await jetstream(nc).publish(`${prefix}.stripe.payment_intent.succeeded`, brokerMessage(e), { msgID: e.inboxId });
    expect(ack.duplicate).toBe(true);
    expect(ack.seq).toBe(1);
    expect(await messages(stream)).toBe(2);
  });

  it('a subject past the server\'s control-line limit is refused for good before anything is sent (subject_too_long); the connection stays up', async () => {
    const { stream, prefix } = scope();
    const d = destination({ subject: `${prefix}.{provider}.{type}`, stream });
    await d.deliver(deliveryEvent());
    // Sent, this would make the server answer "maximum control line exceeded" and drop the connection.
    const long = deliveryEvent({ eventType: `t${'x'.repeat(MAX_SUBJECT_BYTES)}` });
    const err = await failureOf(d.deliver(long));
    expect(err).toBeInstanceOf(NeedsDecisionError);
    expect(err.reason).toBe('subject_too_long');
    // The last subject that fits is published, and so is the next event: the link was never dropped.
    await d.deliver(deliveryEvent({ eventType: 'x'.repeat(MAX_SUBJECT_BYTES - `${prefix}.stripe.`.length) }));
    await d.deliver(deliveryEvent());
    expect(await messages(stream)).toBe(3);
  });

  it('a message over the server\'s max_payload is refused for good (message_too_large), not retried as an outage', async () => {
    const { stream, prefix } = scope();
    // No {type} in the subject: only the message (which carries the type) is too large.
    const d = destination({ subject: `${prefix}.{provider}`, stream });
    await d.deliver(deliveryEvent());
    const err = await failureOf(d.deliver(deliveryEvent({ eventType: 'x'.repeat(nc.info!.max_payload) })));
    expect(err).toBeInstanceOf(NeedsDecisionError);
    expect(err.reason).toBe('message_too_large');
    await d.deliver(deliveryEvent());
    expect(await messages(stream)).toBe(2);
  });

  it('a message over the stream\'s own max_msg_size is refused for good (message_too_large), not retried for ever', async () => {
    const { stream, prefix } = scope();
    await jsm.streams.add({ name: stream, subjects: [`${prefix}.>`], max_msg_size: 256 });
    const d = destination({ subject: `${prefix}.{provider}`, stream });
    const err = await failureOf(d.deliver(deliveryEvent({ eventType: 'x'.repeat(512) })));
    expect(err).toBeInstanceOf(NeedsDecisionError);
    expect(err.reason).toBe('message_too_large');
    expect(err.message).toMatch(/max_msg_size/);
    expect(await messages(stream)).toBe(0);
  });

  it('an existing stream is used as it is, never changed', async () => {
    const { stream, prefix } = scope();
    await jsm.streams.add({ name: stream, subjects: [`${prefix}.only`] });
    const d = destination({ subject: `${prefix}.{provider}`, stream });
    const err = await failureOf(d.deliver(deliveryEvent()));
    // Its subjects do not capture `<prefix>.stripe`: nobody answers the publish.
    expect(err).toBeInstanceOf(RetryableError);
    expect(err.reason).toBe('no_stream');
    expect((await jsm.streams.info(stream)).config.subjects).toEqual([`${prefix}.only`]);
  });

  it('with stream set, a subject another stream captures is no_stream: nothing is stored there, and the PubAck of another stream is never taken for ours', async () => {
    const { stream, prefix } = scope();
    const other = uniqueName('WHI_OTHER');
    streams.push(other);
    // Ours exists but captures other subjects; a second stream (someone else's) captures ours.
    await jsm.streams.add({ name: stream, subjects: [`${prefix}.only`] });
    await jsm.streams.add({ name: other, subjects: [`${prefix}.events.>`] });
    const d = destination({ subject: `${prefix}.events.{provider}`, stream });
    const err = await failureOf(d.deliver(deliveryEvent()));
    expect(err).toBeInstanceOf(RetryableError);
    expect(err.reason).toBe('no_stream');
    expect(err.message).toContain(stream);
    expect(await messages(other)).toBe(0);
    expect(await messages(stream)).toBe(0);
  });

  it('a stream deleted after first use is added again on the delivery after the failure', async () => {
    const { stream, prefix } = scope();
    const d = destination({ subject: `${prefix}.{provider}`, stream });
    await d.deliver(deliveryEvent());
    await jsm.streams.delete(stream);
    expect((await failureOf(d.deliver(deliveryEvent()))).reason).toBe('no_stream');
    await d.deliver(deliveryEvent());
    expect(await messages(stream)).toBe(1);
  });

  it('a subject no stream captures is no_stream', async () => {
    const d = destination({ subject: `${uniqueName('nostream').toLowerCase()}.{provider}`, timeoutMs: 2000 });
    const err = await failureOf(d.deliver(deliveryEvent()));
    expect(err.reason).toBe('no_stream');
  });

  it('a plain NATS service answering on a subject no stream captures is no_stream, not a PubAck', async () => {
    const prefix = uniqueName('svc').toLowerCase();
    const sub = nc.subscribe(`${prefix}.>`, { callback: (_err, m) => void m.respond(JSON.stringify({ ok: true })) });
    try {
      await nc.flush();
      const d = destination({ subject: `${prefix}.{provider}`, timeoutMs: 2000 });
      const err = await failureOf(d.deliver(deliveryEvent()));
      expect(err.reason).toBe('no_stream');
    } finally {
      sub.unsubscribe();
    }
  });

  it('a plain NATS service answering with something that is not JSON (text, or nothing) is no_stream too, not nats_unavailable', async () => {
    for (const answer of ['accepted', '']) {
      const prefix = uniqueName('txt').toLowerCase();
      const sub = nc.subscribe(`${prefix}.>`, { callback: (_err, m) => void m.respond(answer) });
      try {
        await nc.flush();
        const d = destination({ subject: `${prefix}.{provider}`, timeoutMs: 2000 });
        const err = await failureOf(d.deliver(deliveryEvent()));
        expect(err.reason, JSON.stringify(answer)).toBe('no_stream');
        expect(err.message).toContain('not a JetStream acknowledgement');
      } finally {
        sub.unsubscribe();
      }
    }
  });

  it('a timeout on a live connection (a subscriber that never answers) keeps the connection: it still answers PINGs', async () => {
    const prefix = uniqueName('mute').toLowerCase();
    const sub = nc.subscribe(`${prefix}.>`, { callback: () => undefined });
    try {
      await nc.flush();
      const d = destination({ subject: `${prefix}.{provider}`, timeoutMs: 500 });
      const err = await failureOf(d.deliver(deliveryEvent()));
      expect(err.reason).toBe('timeout');
      expect(err.message).not.toContain('dropped');
    } finally {
      sub.unsubscribe();
    }
  });

  it('a NATS URL on a closed port is a retryable nats_unavailable, and a later delivery tries again', async () => {
    const d = destination({ url: `nats://127.0.0.1:${await closedPort()}`, timeoutMs: 1000 });
    const t0 = Date.now();
    const first = await failureOf(d.deliver(deliveryEvent()));
    expect(first).toBeInstanceOf(RetryableError);
    expect(first.reason).toBe('nats_unavailable');
    const second = await failureOf(d.deliver(deliveryEvent()));
    expect(second.reason).toBe('nats_unavailable');
    expect(Date.now() - t0).toBeLessThan(5000);
  });

  it('rides out an outage: fails as retryable while NATS is unreachable, delivers again once it is back', async () => {
    const { stream, prefix } = scope();
    const proxy = new TcpProxy(4222);
    const port = await proxy.start();
    try {
      const d = destination({ url: `nats://127.0.0.1:${port}`, subject: `${prefix}.{provider}`, stream, timeoutMs: 1000 });
      await d.deliver(deliveryEvent());
      await proxy.stop();
      const during = await failureOf(d.deliver(deliveryEvent()));
      expect(['nats_unavailable', 'timeout']).toContain(during.reason);
      await proxy.start(port);
      const e = deliveryEvent();
      const deadline = Date.now() + 15_000;
      for (;;) {
        try {
          await d.deliver(e);
          break;
        } catch (err) {
          if (Date.now() > deadline) throw err;
          await new Promise((r) => setTimeout(r, 200));
        }
      }
      // Whatever was buffered during the outage may land too; the retried id is stored once.
      const consumer = await jetstream(nc).consumers.get(stream);
      const ids: string[] = [];
      for (let n = await messages(stream); n > 0; n--) ids.push((await consumer.next({ expires: 2000 }))!.headers!.get('Nats-Msg-Id'));
      expect(ids.filter((id) => id === e.inboxId)).toHaveLength(1);
    } finally {
      await proxy.stop();
    }
  });

  it('a connection that went silent without a FIN: the timed-out delivery drops it and the next one reconnects at once', async () => {
    const { stream, prefix } = scope();
    const proxy = new TcpProxy(4222);
    await proxy.start();
    try {
      const d = destination({ url: `nats://127.0.0.1:${proxy.port}`, subject: `${prefix}.{provider}`, stream, timeoutMs: 800 });
      await expectSilentLinkDropped(d, proxy);
      // Without the drop this waited on the dead link until the client's pings noticed (minutes).
      const e = deliveryEvent();
      await d.deliver(e);
      const consumer = await jetstream(nc).consumers.get(stream);
      const ids: string[] = [];
      for (let n = await messages(stream); n > 0; n--) ids.push((await consumer.next({ expires: 2000 }))!.headers!.get('Nats-Msg-Id'));
      expect(ids).toContain(e.inboxId);
    } finally {
      await proxy.stop();
    }
  });

  it('after close, deliveries fail as retryable', async () => {
    const { stream, prefix } = scope();
    const d = destination({ subject: `${prefix}.{provider}`, stream });
    await d.deliver(deliveryEvent());
    await d.close();
    expect((await failureOf(d.deliver(deliveryEvent()))).reason).toBe('destination_closed');
  });
});
