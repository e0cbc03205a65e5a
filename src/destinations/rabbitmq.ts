import { connect, type ChannelModel, type ConfirmChannel, type Message } from 'amqplib';
import type { DestinationConfig } from '../config/engine.js';
import { NeedsDecisionError, RetryableError } from '../engine/failure.js';
import { ConfigError } from '../errors.js';
import { brokerMessage, expandTemplate, type DeliveryEvent, type Destination } from './contract.js';
import { rabbitMqConfigProblem } from './broker-config.js';
import { answers, capturePattern, closedError, DeadlineExceeded, describe, withTimeout } from './util.js';

export type RabbitMqDestinationConfig = Extract<DestinationConfig, { type: 'rabbitmq' }>;

/** AMQP 0-9-1 routing keys are short strings. */
const MAX_ROUTING_KEY_BYTES = 255;
const CONNECT_GRACE_MS = 1000;

/** One AMQP connection, reused by every delivery until it closes. */
interface Link {
  readonly conn: ChannelModel;
  /** performance.now() of the last confirm or return from the broker: a publish that times out with none since probes the connection. */
  heardAt: number;
  /** The broker has blocked publishing (a resource alarm): silence is expected, not a dead link. */
  blocked: boolean;
  /** The reason the broker gave with connection.blocked (e.g. `low on memory`). */
  blockedReason: string;
  /**
   * The confirm channel deliveries publish on; null once it closed. A channel error (an unknown
   * exchange, a publish the user may not make) closes the channel alone: the next delivery opens
   * another on this connection, instead of a TCP and AMQP handshake for every batch.
   */
  publisher: Promise<Publisher> | null;
  /** The probe under way after a confirm timeout with nothing heard: does the broker still answer? */
  probe: Promise<boolean> | undefined;
}

/** A confirm channel on a Link. */
interface Publisher {
  readonly ch: ConfirmChannel;
  /** message ids the broker returned as unroutable and whose confirm has not been seen yet. */
  readonly returned: Map<string, number>;
  /** Our queue asserted and bound (when `queue` is set), done again after a return: publishes wait for it. */
  declared: Promise<void>;
  /** The error the broker closed the channel with (e.g. `404 NOT_FOUND - no exchange`), once it has. */
  closedBy: unknown;
}

/**
 * The reason for a channel error, by the broker's reply code. Both named ones are retried: an
 * operator may yet declare the exchange or grant the permission.
 */
function channelReason(err: unknown): string {
  const { code, message } = (err ?? {}) as { code?: unknown; message?: unknown };
  if (code === 404 && typeof message === 'string' && message.includes('no exchange')) return 'exchange_not_found';
  // No write permission on the exchange, or an internal exchange.
  if (code === 403) return 'access_refused';
  return 'rabbitmq_unavailable';
}

/**
 * Publishes the event's metadata (never the provider payload) on a confirm channel with
 * `message_id = <inboxId>`, persistent, `mandatory`. Resolves only on the broker's ack; a
 * nack is `rabbitmq_nack`, a message no queue accepted (basic.return, which the broker sends
 * before its ack) is `unroutable`.
 *
 * With `queue` set, a durable queue of that name is asserted on each new channel and bound to the
 * exchange with the routing-key template's literal prefix + `#` (a topic pattern; a template
 * without placeholders is bound as is). On the default exchange (`exchange: ""`) no binding
 * exists: the routing key is the queue name, so it must equal `queue`.
 *
 * The connection is opened on first use and reused; when it closes, the next delivery opens a
 * new one. When only its channel closes, the next delivery opens a new channel on it.
 */
export class RabbitMqDestination implements Destination {
  readonly type = 'rabbitmq' as const;
  readonly id: string;
  private link: Promise<Link> | null = null;
  private closed = false;
  private readonly binding: string | undefined;
  private readonly where: string;

  constructor(private readonly config: RabbitMqDestinationConfig) {
    this.id = config.id;
    this.where = `rabbitmq destination "${config.id}"`;
    // parseConfig has refused this already; a config built in code has not.
    const problem = rabbitMqConfigProblem(config.exchange, config.routingKey, config.queue);
    if (problem) throw new ConfigError(`destinations[id="${config.id}"].${problem.key}`, problem.message);
    if (config.queue !== undefined && config.exchange !== '') this.binding = capturePattern(config.routingKey, '#') ?? '#';
  }

  async deliver(event: DeliveryEvent): Promise<void> {
    if (this.closed) throw closedError(this.type, this.id);
    const { where } = this;
    const routingKey = expandTemplate(this.config.routingKey, event);
    if (Buffer.byteLength(routingKey) > MAX_ROUTING_KEY_BYTES) {
      throw new NeedsDecisionError('routing_key_too_long', `${where}: the routing key is longer than ${MAX_ROUTING_KEY_BYTES} bytes`);
    }
    const { timeoutMs } = this.config;
    const link = await this.connection();
    if (link.blocked) {
      // The broker has stopped reading from us (a resource alarm): a publish now would only wait in
      // this process's memory, one more copy per retry, to land as duplicates once it unblocks.
      throw new RetryableError('rabbitmq_blocked', `${where}: the broker blocks publishers (${link.blockedReason}); nothing sent`);
    }
    const pub = await this.publisher(link);
    const sentAt = performance.now();
    const confirmed = new Promise<void>((resolve, reject) => {
      const settle = (err: unknown): void => {
        link.heardAt = performance.now();
        const n = pub.returned.get(event.inboxId) ?? 0;
        if (n > 0) {
          if (n === 1) pub.returned.delete(event.inboxId);
          else pub.returned.set(event.inboxId, n - 1);
        }
        if (err) {
          reject(describe(err) === 'message nacked'
            ? new RetryableError('rabbitmq_nack', `${where}: the broker nacked the message`)
            : this.channelFailure(pub.closedBy ?? err, err));
        } else if (n > 0) {
          // Our queue (when `queue` is set) may have been deleted (an operator, an expiry policy): it
          // is declared and bound again before the next publish on this channel. The channel is
          // kept: the confirms of the other messages on it are still coming (dropping it failed them
          // too, and their rows, already queued, were published again).
          this.declare(pub);
          reject(new RetryableError('unroutable', `${where}: no queue is bound for routing key "${routingKey}" on exchange "${this.config.exchange}"`));
        } else {
          resolve();
        }
      };
      try {
        pub.ch.publish(this.config.exchange, routingKey, Buffer.from(brokerMessage(event)), {
          messageId: event.inboxId,
          persistent: true,
          contentType: 'application/json',
          mandatory: true,
        }, settle);
      } catch (err) {
        // Mostly a channel the broker closed meanwhile (an earlier publish on it failed), already
        // forgotten; one still open is given up, so the next delivery opens another.
        if (pub.closedBy === undefined) pub.ch.close().catch(() => undefined);
        reject(this.channelFailure(pub.closedBy ?? err, err));
      }
    });
    try {
      await withTimeout(confirmed, timeoutMs, 'the publisher confirm');
    } catch (err) {
      if (err instanceof DeadlineExceeded) {
        confirmed.catch(() => undefined);
        // Not one confirm on this connection since we published, and the broker has not said it
        // blocks us: the link may be dead without a FIN (a NAT or firewall dropped it), which AMQP
        // heartbeats notice only after minutes, every delivery timing out meanwhile. Or the broker
        // is slow to confirm (a busy disk): dropping its connection would fail the other publishes
        // in flight on it too, each retried as one more copy. A probe tells them apart.
        const dead = !link.blocked && link.heardAt < sentAt && !(await this.answers(link));
        if (dead) this.drop(link); // the next delivery reconnects (a resend is deduplicated by message_id)
        throw new RetryableError('timeout', `${where}: no publisher confirm within ${timeoutMs} ms${dead ? '; the connection answers nothing, not even a channel open, so it is dropped' : ''}`, { cause: err });
      }
      if (this.closed) throw closedError(this.type, this.id);
      throw err;
    }
  }

  /**
   * Whether the broker answers on `link`: a channel opened (and closed again) within the probe's
   * grace. One probe at a time per link; the deliveries timing out meanwhile share its answer.
   */
  private answers(link: Link): Promise<boolean> {
    link.probe ??= answers((async () => {
      const ch = await link.conn.createChannel();
      ch.on('error', () => undefined);
      ch.close().catch(() => undefined);
    })()).finally(() => (link.probe = undefined));
    return link.probe;
  }

  /** A channel that failed (the broker closed it, or its connection went), with the broker's reason when it gave one. */
  private channelFailure(why: unknown, cause: unknown): RetryableError {
    return new RetryableError(channelReason(why), `${this.where}: ${describe(why)}`, { cause });
  }

  private connection(): Promise<Link> {
    this.link ??= this.open();
    const pending = this.link;
    // amqplib gives up on its own after timeoutMs (then the next delivery starts over); the grace
    // lets its error, which says why, win the race.
    return withTimeout(pending, this.config.timeoutMs + CONNECT_GRACE_MS, 'connecting').catch((err: unknown) => {
      if (err instanceof RetryableError) throw err;
      throw new RetryableError('timeout', `${this.where}: cannot connect within ${this.config.timeoutMs} ms`, { cause: err });
    });
  }

  private async open(): Promise<Link> {
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
      const link: Link = { conn: c, heardAt: performance.now(), blocked: false, blockedReason: '', publisher: null, probe: undefined };
      c.on('blocked', (reason: unknown) => {
        link.blocked = true;
        link.blockedReason = typeof reason === 'string' && reason !== '' ? reason.replace(/\s+/g, ' ').slice(0, 100) : 'no reason given';
      });
      c.on('unblocked', () => (link.blocked = false));
      if (this.closed) throw closedError(this.type, this.id);
      return link;
    } catch (err) {
      this.link = null;
      if (conn) await this.shutdown(conn);
      if (err instanceof RetryableError) throw err;
      const msg = describe(err);
      // amqplib's socket timeout also bounds the AMQP handshake ("connect ETIMEDOUT"). A login the
      // broker refuses (a wrong password, a user not allowed in) says 403 ACCESS-REFUSED: named as
      // the channel-level refusal is, since what fixes it is the same, a permission.
      const reason = /ETIMEDOUT/.test(msg) ? 'timeout' : /ACCESS[-_]REFUSED/.test(msg) ? 'access_refused' : 'rabbitmq_unavailable';
      throw new RetryableError(reason, `${this.where}: cannot connect (${msg})`, { cause: err });
    }
  }

  /**
   * The link's confirm channel, ready to publish on: opened (our queue declared) on first use and
   * after the last one closed. amqplib's socket timeout bounds the handshake only: a link that
   * dies silently after it would leave the setup pending (every delivery waiting on it) until AMQP
   * heartbeats gave up, minutes later. So the setup gets timeoutMs too, and the link is dropped.
   */
  private async publisher(link: Link): Promise<Publisher> {
    const seen: { pub?: Publisher } = {};
    const ready = (async () => {
      const pub = seen.pub = await (link.publisher ??= this.openPublisher(link));
      await pub.declared;
      return pub;
    })();
    try {
      return await withTimeout(ready, this.config.timeoutMs, 'setting up the channel');
    } catch (err) {
      if (err instanceof DeadlineExceeded) {
        this.drop(link);
        throw new RetryableError('timeout', `${this.where}: ${describe(err)}; the connection is dropped`, { cause: err });
      }
      if (this.closed) throw closedError(this.type, this.id);
      // A declare the broker refused (e.g. the queue exists with other arguments, the exchange to
      // bind to does not) closed the channel alone.
      throw this.channelFailure(seen.pub?.closedBy ?? err, err);
    }
  }

  private openPublisher(link: Link): Promise<Publisher> {
    const opening = (async (): Promise<Publisher> => {
      const ch = await link.conn.createConfirmChannel();
      const pub: Publisher = { ch, returned: new Map(), declared: Promise.resolve(), closedBy: undefined };
      // amqplib fails the unconfirmed publishes with a bare "channel closed": keep the broker's
      // reason. The listener also keeps the error from being thrown.
      ch.on('error', (e: unknown) => (pub.closedBy = e));
      ch.on('close', () => {
        if (link.publisher === opening) link.publisher = null;
      });
      ch.on('return', (msg: Message) => {
        link.heardAt = performance.now();
        const id = msg.properties.messageId as unknown;
        if (typeof id === 'string') pub.returned.set(id, (pub.returned.get(id) ?? 0) + 1);
      });
      this.declare(pub);
      return pub;
    })();
    opening.catch(() => {
      if (link.publisher === opening) link.publisher = null;
    });
    return opening;
  }

  /** Asserts and binds our queue on `pub`'s channel, when `queue` is set; its next publishes wait for it. */
  private declare(pub: Publisher): void {
    const { queue } = this.config;
    if (queue === undefined) return;
    pub.declared = (async () => {
      await pub.ch.assertQueue(queue, { durable: true });
      if (this.binding !== undefined) await pub.ch.bindQueue(queue, this.config.exchange, this.binding);
    })();
    pub.declared.catch(() => undefined); // a refusal closes the channel; the deliveries waiting on it say why
  }

  /** Forgets `conn` if it is the current one. */
  private forget(conn: ChannelModel): void {
    const current = this.link;
    if (!current) return;
    current.then((l) => {
      if (l.conn === conn && this.link === current) this.link = null;
    }, () => undefined);
  }

  /** Abandons a connection that is unusable. */
  private drop(link: Link): void {
    this.forget(link.conn);
    void this.shutdown(link.conn);
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
    const pending = this.link;
    this.link = null;
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
