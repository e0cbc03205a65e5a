import { connect, type ChannelModel, type ConfirmChannel, type Message } from 'amqplib';
import type { DestinationConfig } from '../config/engine.js';
import { NeedsDecisionError, RetryableError } from '../engine/failure.js';
import { ConfigError } from '../errors.js';
import { brokerMessage, expandTemplate, type DeliveryEvent, type Destination } from './contract.js';
import { rabbitMqConfigProblem } from './broker-config.js';
import { capturePattern, closedError, DeadlineExceeded, describe, withTimeout } from './util.js';

export type RabbitMqDestinationConfig = Extract<DestinationConfig, { type: 'rabbitmq' }>;

/** AMQP 0-9-1 routing keys are short strings. */
const MAX_ROUTING_KEY_BYTES = 255;
const CONNECT_GRACE_MS = 1000;

interface Live {
  readonly conn: ChannelModel;
  readonly ch: ConfirmChannel;
  /** message ids the broker returned as unroutable and whose confirm has not been seen yet. */
  readonly returned: Map<string, number>;
  /** performance.now() of the last confirm or return from the broker: a publish that times out with none since drops the connection. */
  heardAt: number;
  /** The broker has blocked publishing (a resource alarm): silence is expected, not a dead link. */
  blocked: boolean;
  /** Why the broker closed the channel (e.g. `404 NOT_FOUND - no exchange`), once it has. */
  closedBy: string | undefined;
  /** The reason the broker gave with connection.blocked (e.g. `low on memory`). */
  blockedReason: string;
}

/**
 * Publishes the event's metadata (never the provider payload) on a confirm channel with
 * `message_id = <inboxId>`, persistent, `mandatory`. Resolves only on the broker's ack; a
 * nack is `rabbitmq_nack`, a message no queue accepted (basic.return, which the broker sends
 * before its ack) is `unroutable`.
 *
 * With `queue` set, a durable queue of that name is asserted on connect and bound to the
 * exchange with the routing-key template's literal prefix + `#` (a topic pattern; a template
 * without placeholders is bound as is). On the default exchange (`exchange: ""`) no binding
 * exists: the routing key is the queue name, so it must equal `queue`.
 *
 * The connection is opened on first use and reused; when it or its channel closes, the next
 * delivery opens a new one.
 */
export class RabbitMqDestination implements Destination {
  readonly type = 'rabbitmq' as const;
  readonly id: string;
  private live: Promise<Live> | null = null;
  private closed = false;
  private readonly binding: string | undefined;

  constructor(private readonly config: RabbitMqDestinationConfig) {
    this.id = config.id;
    // parseConfig has refused this already; a config built in code has not.
    const problem = rabbitMqConfigProblem(config.exchange, config.routingKey, config.queue);
    if (problem) throw new ConfigError(`destinations[id="${config.id}"].${problem.key}`, problem.message);
    if (config.queue !== undefined && config.exchange !== '') this.binding = capturePattern(config.routingKey, '#') ?? '#';
  }

  async deliver(event: DeliveryEvent): Promise<void> {
    if (this.closed) throw closedError(this.type, this.id);
    const where = `rabbitmq destination "${this.id}"`;
    const routingKey = expandTemplate(this.config.routingKey, event);
    if (Buffer.byteLength(routingKey) > MAX_ROUTING_KEY_BYTES) {
      throw new NeedsDecisionError('routing_key_too_long', `${where}: the routing key is longer than ${MAX_ROUTING_KEY_BYTES} bytes`);
    }
    const { timeoutMs } = this.config;
    const live = await this.connection();
    if (live.blocked) {
      // The broker has stopped reading from us (a resource alarm): a publish now would only wait in
      // this process's memory, one more copy per retry, to land as duplicates once it unblocks.
      throw new RetryableError('rabbitmq_blocked', `${where}: the broker blocks publishers (${live.blockedReason}); nothing sent`);
    }
    const sentAt = performance.now();
    const confirmed = new Promise<void>((resolve, reject) => {
      const settle = (err: unknown): void => {
        live.heardAt = performance.now();
        const n = live.returned.get(event.inboxId) ?? 0;
        if (n > 0) {
          if (n === 1) live.returned.delete(event.inboxId);
          else live.returned.set(event.inboxId, n - 1);
        }
        if (err) {
          const msg = describe(err);
          reject(msg === 'message nacked'
            ? new RetryableError('rabbitmq_nack', `${where}: the broker nacked the message`)
            : new RetryableError('rabbitmq_unavailable', `${where}: ${msg}${live.closedBy === undefined ? '' : ` (${live.closedBy})`}`, { cause: err }));
        } else if (n > 0) {
          // Our queue may have been deleted (an operator, an expiry policy): the next delivery opens
          // a new channel, which declares and binds it again.
          if (this.config.queue !== undefined) this.drop(live);
          reject(new RetryableError('unroutable', `${where}: no queue is bound for routing key "${routingKey}" on exchange "${this.config.exchange}"`));
        } else {
          resolve();
        }
      };
      try {
        live.ch.publish(this.config.exchange, routingKey, Buffer.from(brokerMessage(event)), {
          messageId: event.inboxId,
          persistent: true,
          contentType: 'application/json',
          mandatory: true,
        }, settle);
      } catch (err) {
        this.drop(live);
        reject(new RetryableError('rabbitmq_unavailable', `${where}: ${describe(err)}`, { cause: err }));
      }
    });
    try {
      await withTimeout(confirmed, timeoutMs, 'the publisher confirm');
    } catch (err) {
      if (err instanceof DeadlineExceeded) {
        confirmed.catch(() => undefined);
        // Not one confirm on this connection since we published, and the broker has not said it
        // blocks us: the link is most likely dead without a FIN (a NAT or firewall dropped it).
        // AMQP heartbeats would notice only after minutes, every delivery timing out meanwhile;
        // the next delivery opens a new connection instead (a resend is deduplicated by message_id).
        const silent = !live.blocked && live.heardAt < sentAt;
        if (silent) this.drop(live);
        throw new RetryableError('timeout', `${where}: no publisher confirm within ${timeoutMs} ms${silent ? '; nothing heard on the connection since, so it is dropped' : ''}`, { cause: err });
      }
      if (this.closed) throw closedError(this.type, this.id);
      throw err;
    }
  }

  private connection(): Promise<Live> {
    this.live ??= this.open();
    const pending = this.live;
    // amqplib gives up on its own after timeoutMs (then the next delivery starts over); the grace
    // lets its error, which says why, win the race.
    return withTimeout(pending, this.config.timeoutMs + CONNECT_GRACE_MS, 'connecting').catch((err: unknown) => {
      if (err instanceof RetryableError) throw err;
      throw new RetryableError('timeout', `rabbitmq destination "${this.id}": cannot connect within ${this.config.timeoutMs} ms`, { cause: err });
    });
  }

  private async open(): Promise<Live> {
    const where = `rabbitmq destination "${this.id}"`;
    let conn: ChannelModel | undefined;
    try {
      conn = await connect(this.config.url, {
        timeout: this.config.timeoutMs,
        clientProperties: { connection_name: `webhook-inbox/${this.id}` },
      });
      const c = conn;
      // An 'error' is always followed by 'close'; the listener keeps it from being thrown.
      c.on('error', () => undefined);
      c.on('close', () => this.forget(c));
      // amqplib's socket timeout bounds the handshake only: a link that dies silently after it
      // would leave this connection pending (every delivery waiting on it) until AMQP heartbeats
      // gave up, minutes later. So the channel and queue setup get timeoutMs too.
      const setup = this.setUp(c);
      const ch = await withTimeout(setup, this.config.timeoutMs, 'setting up the channel').catch((err: unknown) => {
        setup.then((late) => late.close(), () => undefined).catch(() => undefined);
        throw err;
      });
      const live: Live = { conn: c, ch, returned: new Map(), heardAt: performance.now(), blocked: false, blockedReason: '', closedBy: undefined };
      c.on('blocked', (reason: unknown) => {
        live.blocked = true;
        live.blockedReason = typeof reason === 'string' && reason !== '' ? reason.replace(/\s+/g, ' ').slice(0, 100) : 'no reason given';
      });
      c.on('unblocked', () => (live.blocked = false));
      // amqplib fails the unconfirmed publishes with a bare "channel closed": keep the broker's reason.
      ch.on('error', (e: unknown) => (live.closedBy = describe(e)));
      // A channel error (e.g. unknown exchange) closes the channel: start over on the next delivery.
      ch.on('close', () => this.drop(live));
      ch.on('return', (msg: Message) => {
        live.heardAt = performance.now();
        const id = msg.properties.messageId as unknown;
        if (typeof id === 'string') live.returned.set(id, (live.returned.get(id) ?? 0) + 1);
      });
      if (this.closed) throw closedError(this.type, this.id);
      return live;
    } catch (err) {
      this.live = null;
      if (conn) await this.shutdown(conn);
      if (err instanceof RetryableError) throw err;
      const msg = describe(err);
      // amqplib's socket timeout also bounds the AMQP handshake ("connect ETIMEDOUT").
      throw new RetryableError(err instanceof DeadlineExceeded || /ETIMEDOUT/.test(msg) ? 'timeout' : 'rabbitmq_unavailable', `${where}: cannot connect (${msg})`, { cause: err });
    }
  }

  /** The confirm channel, with our queue asserted and bound when `queue` is set. */
  private async setUp(conn: ChannelModel): Promise<ConfirmChannel> {
    const ch = await conn.createConfirmChannel();
    // A channel error (e.g. the queue exists with other arguments) rejects the call below; the
    // listener keeps it from being thrown as well.
    ch.on('error', () => undefined);
    if (this.config.queue !== undefined) {
      await ch.assertQueue(this.config.queue, { durable: true });
      if (this.binding !== undefined) await ch.bindQueue(this.config.queue, this.config.exchange, this.binding);
    }
    return ch;
  }

  /** Forgets `conn` if it is the current one. */
  private forget(conn: ChannelModel): void {
    const current = this.live;
    if (!current) return;
    current.then((l) => {
      if (l.conn === conn && this.live === current) this.live = null;
    }, () => undefined);
  }

  /** Abandons a connection whose channel is unusable. */
  private drop(live: Live): void {
    this.forget(live.conn);
    void this.shutdown(live.conn);
  }

  /**
   * Closes `conn`, bounded: amqplib's close waits for the broker's close-ok, which never comes
   * over a connection cut at the wrong moment, so after timeoutMs the socket is destroyed.
   */
  private async shutdown(conn: ChannelModel): Promise<void> {
    const gone = new Promise<void>((resolve) => conn.once('close', () => resolve()));
    try {
      await withTimeout(Promise.race([conn.close(), gone]), this.config.timeoutMs, 'closing');
    } catch {
      (conn.connection as unknown as { stream?: { destroy(): void } }).stream?.destroy();
    }
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    const pending = this.live;
    this.live = null;
    if (!pending) return;
    let conn: ChannelModel;
    try {
      ({ conn } = await pending);
    } catch {
      return; // never connected
    }
    await this.shutdown(conn);
  }
}
