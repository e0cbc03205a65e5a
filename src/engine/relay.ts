import type { Logger } from 'pino';
import type { RetryPolicy } from '../config/engine.js';
import type { EngineMetrics } from '../metrics/engine.js';
import type { OutboxClaim, OutboxSettle, WorkStore } from '../store/work-port.js';
import { backoffDelayMs } from './backoff.js';
import { failpoint } from './failpoints.js';
import { redact } from './failure.js';
import type { Claimed } from './loop.js';
import type { Router } from './routes.js';

export interface RelayDeps {
  readonly store: WorkStore;
  readonly router: Router;
  readonly owner: string;
  readonly leaseMs: number;
  readonly retry: RetryPolicy;
  readonly metrics: EngineMetrics;
  readonly log: Logger;
  readonly now?: () => number;
}

/**
 * The outbox relay: publishes each unpublished `webhook_outbox` row (written in the accept
 * transaction) to the broker destinations its event routes to, then marks it published.
 * A crash between the publish and the mark publishes again — tolerated by design: NATS
 * drops it by `Nats-Msg-Id`, RabbitMQ consumers by `message_id` (both = inbox_id).
 * The relay never gives up on a row (a broker outage only delays it); its lag is a metric.
 */
export class OutboxRelay {
  private readonly now: () => number;
  private claims = 0;

  constructor(private readonly d: RelayDeps) {
    this.now = d.now ?? Date.now;
  }

  /** Each claim leases under its own token (see InboxWorker.claim). */
  async claim(n: number): Promise<Claimed<OutboxClaim>[]> {
    const owner = `${this.d.owner}/r${++this.claims}`;
    return (await this.d.store.claimOutbox(n, owner, this.d.leaseMs, this.now())).map((row) => ({ row, owner }));
  }

  async process(claims: Claimed<OutboxClaim>[]): Promise<void> {
    const settles = await Promise.all(claims.map((c) => this.publishOne(c)));
    // One claim leases under one token: its rows settle in one round trip and one commit
    // (a commit per row cost a WAL flush per event, the drain's bottleneck on both stores).
    const byOwner = new Map<string, OutboxSettle[]>();
    claims.forEach((c, i) => {
      const list = byOwner.get(c.owner) ?? [];
      if (list.length === 0) byOwner.set(c.owner, list);
      list.push(settles[i]!);
    });
    for (const [owner, list] of byOwner) {
      const settled = new Set(await this.d.store.settleOutboxBatch(owner, list));
      for (const x of list) if (!settled.has(x.outboxId)) this.d.log.warn({ outboxId: x.outboxId }, 'outbox lease lost before settling');
    }
  }

  private async publishOne({ row }: Claimed<OutboxClaim>): Promise<OutboxSettle> {
    const brokers = this.d.router.route(row.endpointId, row.eventType)?.brokers ?? [];
    let error: unknown;
    await Promise.all(brokers.map(async (t) => {
      try {
        await t.destination.deliver(row);
        this.d.metrics.relay.inc([t.destination.id, 'published']);
      } catch (err) {
        error ??= err;
        this.d.metrics.relay.inc([t.destination.id, 'failed']);
      }
    }));
    if (error === undefined && brokers.length > 0) failpoint('relay.after-publish');
    const now = this.now();
    return {
      outboxId: row.outboxId,
      s: error === undefined
        ? { published: true, nowMs: now }
        : { published: false, nextAttemptAtMs: now + backoffDelayMs(row.attemptCount, this.d.retry), error: redact(error), nowMs: now },
    };
  }
}
