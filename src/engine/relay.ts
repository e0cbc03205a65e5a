import type { OutboxClaim, OutboxSettle } from '../store/work-port.js';
import { backoffDelayMs } from './backoff.js';
import { failpoint } from './failpoints.js';
import { loggable, NeedsDecisionError, redact } from './failure.js';
import { LeasedRunner, leaseHeartbeat, type RunnerDeps } from './leased-runner.js';
import type { Claimed } from './loop.js';
import type { Router } from './routes.js';
import { whileStoreFails, type StoreRetryWindow } from './store-retry.js';

export interface RelayDeps extends RunnerDeps {
  readonly router: Router;
}

interface Failure { readonly destination: string; readonly error: unknown }
/** A failure the destination knows is permanent. */
interface Refusal extends Failure { readonly error: NeedsDecisionError }
const isRefusal = (f: Failure): f is Refusal => f.error instanceof NeedsDecisionError;

/**
 * The outbox relay: publishes each unpublished `webhook_outbox` row (written in the accept
 * transaction) to the broker destinations its event routes to, then marks it published once
 * every route has it. Each settle records which destinations took the message
 * (`publishedTo`), so a retry after a partial failure publishes only to the routes still owed.
 * A crash between the publish and the settle publishes again — tolerated by design: NATS
 * drops it by `Nats-Msg-Id`, RabbitMQ consumers by `message_id` (both = inbox_id).
 * The relay never gives up on a row (a broker outage only delays it); its lag is a metric. A row
 * that every route still owed refuses for good (NeedsDecisionError) is parked for an operator.
 */
export class OutboxRelay extends LeasedRunner<OutboxClaim, RelayDeps> {
  constructor(d: RelayDeps) {
    super(d, 'r');
  }

  protected claimRows(n: number, owner: string, leaseMs: number, nowMs: number): Promise<OutboxClaim[]> {
    return this.d.store.claimOutbox(n, owner, leaseMs, nowMs);
  }

  async process(claims: Claimed<OutboxClaim>[]): Promise<void> {
    const settles = await this.keepingLeases(claims, () => Promise.all(claims.map((c) => this.publishOne(c))));
    // One claim leases under one token: its rows settle in one round trip and one commit
    // (a commit per row cost a WAL flush per event, the drain's bottleneck on both stores).
    const byOwner = new Map<string, OutboxSettle[]>();
    claims.forEach((c, i) => {
      const list = byOwner.get(c.owner) ?? [];
      if (list.length === 0) byOwner.set(c.owner, list);
      list.push(settles[i]!);
    });
    // Published is published: a store failing for a moment must not send the rows again after
    // their leases (RabbitMQ would queue a second copy; whileStoreFails).
    const retries: StoreRetryWindow = {};
    for (const [owner, list] of byOwner) {
      const settled = new Set(await whileStoreFails(() => this.d.store.settleOutboxBatch(owner, list), retries, this.d, (err, retryInMs) => {
        this.d.log.warn({ err: loggable(err), rows: list.length, retryInMs }, 'outbox settle failed in the store; trying it again');
      }));
      for (const x of list) if (!settled.has(x.outboxId)) this.d.log.warn({ outboxId: x.outboxId }, 'outbox lease lost before settling');
    }
  }

  /**
   * A publish may outlast the lease (a broker destination's connect, then its confirm or PubAck,
   * each within its timeoutMs; workers.leaseMs may be shorter): the rows stay leased meanwhile, or
   * the next claim took them and published them a second time beside the first. Stopped, its last
   * extension done, before the settle (the two would lock the rows in different orders).
   */
  private async keepingLeases<T>(claims: Claimed<OutboxClaim>[], publish: () => Promise<T>): Promise<T> {
    const ids = new Map<string, string[]>();
    for (const c of claims) {
      const list = ids.get(c.owner);
      if (list) list.push(c.row.outboxId);
      else ids.set(c.owner, [c.row.outboxId]);
    }
    const stopHeartbeat = leaseHeartbeat(this.d.leaseMs, async () => {
      await Promise.all([...ids].map(([owner, list]) => this.d.store.extendOutboxLeases(list, owner, this.now() + this.d.leaseMs)));
    }, this.d.log, 'outbox lease heartbeat failed');
    try {
      return await publish();
    } finally {
      await stopHeartbeat();
    }
  }

  private async publishOne({ row }: Claimed<OutboxClaim>): Promise<OutboxSettle> {
    const brokers = this.d.router.route(row.endpointId, row.eventType)?.brokers ?? [];
    if (brokers.length === 0) {
      // The row was written unpublished because a broker route matched at accept time; the config
      // has lost it since (route, destination or endpoint removed). Nothing to publish to: it is
      // marked published, as an event accepted after the change would have been — but never silently.
      this.d.metrics.relayUnrouted.inc([row.endpointId]);
      this.d.log.warn({ outboxId: row.outboxId, inboxId: row.inboxId, endpoint: row.endpointId, type: row.eventType }, 'outbox row has no broker route any more; marked published without a publish');
    }
    // Only the routes still owed: a destination that took the message on an earlier attempt is
    // not sent it again (RabbitMQ would queue a second copy; JetStream drops one only within its
    // duplicate window, and retries back off past it).
    const publishedTo = [...row.publishedTo];
    const owed = brokers.filter((t) => !publishedTo.includes(t.destination.id));
    // An entry per failure, not the error alone: a rejection without a reason (undefined) is still one.
    const failures: Failure[] = [];
    await Promise.all(owed.map(async (t) => {
      try {
        await t.destination.deliver(row);
        publishedTo.push(t.destination.id);
        this.d.metrics.relay.inc([t.destination.id, 'published']);
      } catch (error) {
        failures.push({ destination: t.destination.id, error });
        this.d.metrics.relay.inc([t.destination.id, 'failed']);
      }
    }));
    const now = this.now();
    if (failures.length === 0) {
      if (owed.length > 0) failpoint('relay.after-publish');
      return { outboxId: row.outboxId, publishedTo, s: { published: true, nowMs: now } };
    }
    // Park only when every failure is one the destination knows is permanent: while some route
    // may still recover, the row keeps its schedule (a refusing route fails again before it sends).
    const refusals = failures.filter(isRefusal);
    if (refusals.length === failures.length) return this.park(row, publishedTo, refusals, now);
    return {
      outboxId: row.outboxId,
      publishedTo,
      s: { published: false, nextAttemptAtMs: now + backoffDelayMs(row.attemptCount, this.d.retry), error: redact(failures[0]!.error), nowMs: now },
    };
  }

  /**
   * A row every owed destination refused for good: retrying on a schedule would only repeat the
   * refusal for ever, and dropping it would lose an event someone's money may move on. So it is
   * parked — unpublished, never due — and said out loud: an error log line, a counter per
   * destination and reason, the `webhook_outbox_parked` gauge. An operator fixes the cause and
   * requeues it (`webhook-inbox outbox requeue`); the destinations that have it keep it.
   */
  private park(row: OutboxClaim, publishedTo: string[], refusals: Refusal[], nowMs: number): OutboxSettle {
    const first = refusals[0]!.error;
    for (const r of refusals) this.d.metrics.relayParked.inc([r.destination, r.error.reason]);
    this.d.log.error({
      outboxId: row.outboxId, inboxId: row.inboxId, endpoint: row.endpointId, type: row.eventType, publishedTo,
      refused: refusals.map((r) => ({ destination: r.destination, reason: r.error.reason, error: redact(r.error) })),
    }, 'outbox row parked: a destination refused it for good; fix the cause, then webhook-inbox outbox requeue');
    return { outboxId: row.outboxId, publishedTo, s: { published: false, parked: first.reason, error: redact(first), nowMs } };
  }
}
