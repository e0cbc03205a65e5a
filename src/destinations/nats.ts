import { jetstream, jetstreamManager, JetStreamApiError, type JetStreamClient } from '@nats-io/jetstream';
import { connect, errors as natsErrors, type NatsConnection } from '@nats-io/transport-node';
import type { DestinationConfig } from '../config/engine.js';
import { NeedsDecisionError, RetryableError } from '../engine/failure.js';
import { ConfigError } from '../errors.js';
import { brokerMessage, expandTemplate, type DeliveryEvent, type Destination } from './contract.js';
import { natsConfigProblem } from './broker-config.js';
import { answers, capturePattern, closedError, DeadlineExceeded, describe, withTimeout } from './util.js';

export type NatsDestinationConfig = Extract<DestinationConfig, { type: 'nats' }>;

/**
 * The longest subject we send. The server reads a PUB/HPUB line (subject, reply inbox, sizes) of
 * at most `max_control_line`, 4096 bytes by default and not announced to clients: past it, it
 * answers "maximum control line exceeded" and drops the connection, failing every publish in flight
 * on it, and a retry would drop it again. 256 bytes are left for the rest of the line.
 */
export const MAX_SUBJECT_BYTES = 4096 - 256;

/** JetStream API error codes this destination looks at. */
const STREAM_NOT_FOUND = 10059;
const STREAM_NAME_IN_USE = 10058;
/** The publish named the stream it expects (Nats-Expected-Stream), and another one captures the subject. */
const STREAM_NOT_MATCH = 10060;
/** The message is larger than the stream's max_msg_size. */
const STREAM_MESSAGE_TOO_LARGE = 10054;

/** A substituted value may add tokens (dots) but never a wildcard, a space or an empty token. */
export function sanitizeToken(value: string): string {
  return value.replace(/[^A-Za-z0-9_.-]/g, '_').split('.').map((t) => (t === '' ? '_' : t)).join('.');
}

/** The subject an event is published to: the template with each value sanitised. */
export function natsSubject(template: string, e: DeliveryEvent): string {
  return expandTemplate(template, {
    ...e, provider: sanitizeToken(e.provider), eventType: sanitizeToken(e.eventType), endpointId: sanitizeToken(e.endpointId),
  });
}

interface Live {
  readonly nc: NatsConnection;
  readonly js: JetStreamClient;
  /** False between a `disconnect` and the next `reconnect` status. */
  connected: boolean;
}

/**
 * JetStream publish of the event's metadata (never the provider payload) with
 * `Nats-Msg-Id: <inboxId>`: the stream drops a copy published again within its
 * `duplicate_window` (PubAck `duplicate: true`). Resolves on the PubAck.
 *
 * The connection is opened on first use, reused, and reconnects by itself (without limit);
 * a connection that ends for good is replaced on the next delivery.
 */
export class NatsDestination implements Destination {
  readonly type = 'nats' as const;
  readonly id: string;
  private live: Promise<Live> | null = null;
  private streamReady = false;
  private closed = false;
  /** Subjects the ensured stream captures (only used when `config.stream` is set). */
  private readonly streamSubject: string | undefined;

  constructor(private readonly config: NatsDestinationConfig) {
    this.id = config.id;
    // parseConfig has refused these already; a config built in code has not.
    const problem = natsConfigProblem(config.subject, config.stream);
    if (problem) throw new ConfigError(`destinations[id="${config.id}"].${problem.key}`, problem.message);
    if (config.stream !== undefined) this.streamSubject = capturePattern(config.subject, '>')!;
  }

  async deliver(event: DeliveryEvent): Promise<void> {
    if (this.closed) throw closedError(this.type, this.id);
    const subject = natsSubject(this.config.subject, event);
    if (Buffer.byteLength(subject) > MAX_SUBJECT_BYTES) {
      throw new NeedsDecisionError('subject_too_long', `nats destination "${this.id}": the subject is longer than ${MAX_SUBJECT_BYTES} bytes (the server drops a connection whose publish line exceeds its max_control_line, 4096 by default)`);
    }
    const { timeoutMs } = this.config;
    const pending = this.connection();
    const live = await pending;
    const heardBytes = live.nc.stats().inBytes;
    try {
      if (!this.streamReady && this.config.stream !== undefined) {
        await this.ensureStream(live);
        this.streamReady = true;
      }
      // With `stream` set, the server stores the message only in that stream: another stream that
      // captures the subject (someone else's) would otherwise take it and PubAck, and the event
      // would pass for published while the configured stream's consumers never see it.
      const expect = this.config.stream === undefined ? {} : { expect: { streamName: this.config.stream } };
      const ack = await live.js.publish(subject, brokerMessage(event), { msgID: event.inboxId, timeout: timeoutMs, ...expect });
      // Only a stream's acknowledgement means stored: a plain service answering on the subject
      // (no stream captures it) would otherwise pass for one.
      if (typeof ack.stream !== 'string' || ack.stream === '' || typeof ack.seq !== 'number') {
        this.streamReady = false; // ours may have been deleted: check (and add) it again next time
        throw new RetryableError('no_stream', `nats destination "${this.id}": the answer on ${subject} is not a JetStream acknowledgement`);
      }
    } catch (err) {
      const failure = this.failure(err, live);
      // A timeout with not one byte from the server since we published (no PubAck, no other
      // message), and no PONG to a PING either: the link is dead without a FIN. The client's own
      // pings would notice only after minutes, every delivery timing out meanwhile; the next
      // delivery opens a new connection instead (a resend is deduplicated by Nats-Msg-Id).
      if (failure.reason === 'timeout' && live.nc.stats().inBytes === heardBytes && !(await answers(live.nc.flush()))) {
        this.abandon(pending, live);
        failure.message += '; the connection answers nothing, not even a PING, so it is dropped';
      }
      throw failure;
    }
  }

  /** Forgets a connection that has gone silent and closes it (its pending publishes fail). */
  private abandon(pending: Promise<Live>, live: Live): void {
    if (this.live === pending) {
      this.live = null;
      this.streamReady = false;
    }
    void live.nc.close().catch(() => undefined);
  }

  /** Adds the stream when it is missing; an existing stream is never changed. */
  private async ensureStream(live: Live): Promise<void> {
    const name = this.config.stream!;
    const jsm = await jetstreamManager(live.nc, { timeout: this.config.timeoutMs });
    try {
      await jsm.streams.info(name);
      return;
    } catch (err) {
      if (!(err instanceof JetStreamApiError && err.code === STREAM_NOT_FOUND)) throw err;
    }
    try {
      await jsm.streams.add({ name, subjects: [this.streamSubject!] });
    } catch (err) {
      // Another process added it meanwhile.
      if (!(err instanceof JetStreamApiError && err.code === STREAM_NAME_IN_USE)) throw err;
    }
  }

  private failure(err: unknown, live: Live): RetryableError | NeedsDecisionError {
    const where = `nats destination "${this.id}"`;
    if (err instanceof RetryableError) return err;
    if (this.closed) return closedError(this.type, this.id);
    // The client checks the message against the max_payload the server announced, before sending.
    if (err instanceof natsErrors.InvalidArgumentError && describe(err).includes('max_payload')) {
      return new NeedsDecisionError('message_too_large', `${where}: the message is larger than the server's max_payload (${live.nc.info?.max_payload ?? '?'} bytes)`, { cause: err });
    }
    const name = (err as { name?: string }).name;
    // No responders on the subject: no stream captures it (or JetStream is off).
    if (name === 'JetStreamNotEnabled') {
      // The stream may have been deleted since it was ensured: check (and add) it again next time.
      this.streamReady = false;
      return new RetryableError('no_stream', `${where}: no JetStream stream answered (no responders: no stream captures the subject, or JetStream is off)`, { cause: err });
    }
    // The answer was not JSON at all (the client parses it as a PubAck): a plain service replying
    // on the subject with text, or with nothing. Not a connection problem.
    if (err instanceof SyntaxError) {
      this.streamReady = false;
      return new RetryableError('no_stream', `${where}: the answer is not a JetStream acknowledgement (not JSON)`, { cause: err });
    }
    // The stream's own limit: as for max_payload, no retry can pass it until an operator raises
    // it (then `outbox requeue`); retried, it went round every 30 s for good, out of sight.
    if (err instanceof JetStreamApiError && err.code === STREAM_MESSAGE_TOO_LARGE) {
      return new NeedsDecisionError('message_too_large', `${where}: the message is larger than the stream's max_msg_size (JetStream error ${err.code}: ${describe(err)})`, { cause: err });
    }
    if (err instanceof JetStreamApiError && err.code === STREAM_NOT_MATCH) {
      return new RetryableError('no_stream', `${where}: the subject is captured by another stream, not by "${this.config.stream}" (nothing was stored)`, { cause: err });
    }
    if (err instanceof JetStreamApiError) {
      const reason = err.code === STREAM_NOT_FOUND || (this.config.stream !== undefined && !this.streamReady) ? 'no_stream' : 'nats_rejected';
      return new RetryableError(reason, `${where}: JetStream error ${err.code}: ${describe(err)}`, { cause: err });
    }
    if (!live.connected || live.nc.isClosed() || err instanceof natsErrors.ClosedConnectionError || err instanceof natsErrors.ConnectionError) {
      return new RetryableError('nats_unavailable', `${where}: not connected (${describe(err)})`, { cause: err });
    }
    if (err instanceof natsErrors.TimeoutError) {
      return new RetryableError('timeout', `${where}: no PubAck within ${this.config.timeoutMs} ms`, { cause: err });
    }
    return new RetryableError('nats_unavailable', `${where}: ${describe(err)}`, { cause: err });
  }

  private connection(): Promise<Live> {
    this.live ??= this.open();
    return this.live;
  }

  private async open(): Promise<Live> {
    const { timeoutMs } = this.config;
    const attempt = connect({
      servers: this.config.url,
      name: `webhook-inbox/${this.id}`,
      timeout: timeoutMs,
      reconnect: true,
      maxReconnectAttempts: -1,
    });
    let nc: NatsConnection;
    try {
      nc = await withTimeout(attempt, timeoutMs + 1000, 'connecting');
    } catch (err) {
      this.live = null;
      // A connect that succeeds after we stopped waiting must not leak.
      attempt.then((late) => late.close(), () => undefined).catch(() => undefined);
      const reason = err instanceof DeadlineExceeded ? 'timeout' : 'nats_unavailable';
      throw new RetryableError(reason, `nats destination "${this.id}": cannot connect (${describe(err)})`, { cause: err });
    }
    if (this.closed) {
      await nc.close().catch(() => undefined);
      throw closedError(this.type, this.id);
    }
    const live: Live = { nc, js: jetstream(nc, { timeout: timeoutMs }), connected: true };
    const mine = this.live;
    void (async () => {
      for await (const s of nc.status()) {
        if (s.type === 'disconnect') live.connected = false;
        else if (s.type === 'reconnect') live.connected = true;
      }
    })().catch(() => undefined);
    void nc.closed().then(() => {
      live.connected = false;
      // Closed for good (e.g. authorization revoked): the next delivery opens a new connection.
      if (this.live === mine) {
        this.live = null;
        this.streamReady = false;
      }
    });
    return live;
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    const pending = this.live;
    this.live = null;
    if (!pending) return;
    try {
      const { nc } = await pending;
      // drain() flushes what is buffered; it cannot finish while disconnected, so it is bounded.
      await withTimeout(nc.drain(), this.config.timeoutMs, 'draining').catch(() => nc.close());
    } catch {
      // never connected
    }
  }
}
