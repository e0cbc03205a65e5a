import type { Logger } from 'pino';
import type { RetryPolicy } from '../config/engine.js';
import type { EngineMetrics } from '../metrics/engine.js';
import type { WorkStore, EffectRow, EffectSettlement } from '../store/work-port.js';
import { backoffDelayMs } from './backoff.js';
import { failpoint } from './failpoints.js';
import { classify, FAILURE } from './failure.js';
import type { HandlerRegistry } from './handlers.js';
import type { Claimed } from './loop.js';

export interface EffectsRunnerDeps {
  readonly store: WorkStore;
  readonly handlers: HandlerRegistry;
  readonly owner: string;
  readonly leaseMs: number;
  readonly retry: RetryPolicy;
  readonly metrics: EngineMetrics;
  readonly log: Logger;
  readonly now?: () => number;
}

/**
 * Executes recorded side effects after their handler's transaction committed, each with its
 * stable idempotency key (`<inbox_id>:<name>`), its own retries and terminal state (DONE or
 * FAILED). At-least-once: an executor that crashes after its call but before the settle runs
 * again, with the same key, so the downstream service can drop the repeat.
 */
export class EffectsRunner {
  private readonly now: () => number;
  private claims = 0;

  constructor(private readonly d: EffectsRunnerDeps) {
    this.now = d.now ?? Date.now;
  }

  /** Each claim leases under its own token (see InboxWorker.claim). */
  async claim(n: number): Promise<Claimed<EffectRow>[]> {
    const owner = `${this.d.owner}/e${++this.claims}`;
    return (await this.d.store.claimEffects(n, owner, this.d.leaseMs, this.now())).map((row) => ({ row, owner }));
  }

  async process(claims: Claimed<EffectRow>[]): Promise<void> {
    await Promise.all(claims.map((c) => this.runOne(c)));
  }

  private async runOne({ row, owner }: Claimed<EffectRow>): Promise<void> {
    const { settlement, result, reason } = await this.execute(row);
    failpoint('effects.after-execute');
    if (!(await this.d.store.settleEffect(row.effectId, owner, settlement))) {
      return this.d.log.warn({ effectId: row.effectId }, 'effect lease lost before settling');
    }
    this.d.metrics.effects.inc([result, reason]);
  }

  private async execute(row: EffectRow): Promise<{ settlement: EffectSettlement; result: 'success' | 'retry' | 'failed'; reason: string }> {
    const executor = this.d.handlers.executor(row.name);
    if (!executor) {
      return { result: 'failed', reason: FAILURE.unsupportedEffect, settlement: { status: 'FAILED', reason: FAILURE.unsupportedEffect, error: `no executor registered for effect "${row.name}"`, nowMs: this.now() } };
    }
    try {
      await executor(JSON.parse(row.data), { idempotencyKey: row.idempotencyKey, inboxId: row.inboxId, attempt: row.attemptCount });
      return { result: 'success', reason: '', settlement: { status: 'DONE', nowMs: this.now() } };
    } catch (err) {
      const c = classify(err);
      const now = this.now();
      if (!c.retryable) return { result: 'failed', reason: c.reason, settlement: { status: 'FAILED', reason: c.reason, error: c.message, nowMs: now } };
      if (row.attemptCount >= this.d.retry.maxAttempts) {
        return { result: 'failed', reason: FAILURE.retriesExhausted, settlement: { status: 'FAILED', reason: FAILURE.retriesExhausted, error: c.message, nowMs: now } };
      }
      return { result: 'retry', reason: c.reason, settlement: { status: 'PENDING', nextAttemptAtMs: now + backoffDelayMs(row.attemptCount, this.d.retry), error: c.message, nowMs: now } };
    }
  }
}
