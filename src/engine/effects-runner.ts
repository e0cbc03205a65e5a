import { openEffectData } from '../crypto/effect-data.js';
import { PayloadKeyMissingError, type PayloadCipher } from '../crypto/payload-cipher.js';
import { withDeadline } from '../deadline.js';
import type { EffectRow, EffectSettlement } from '../store/work-port.js';
import { retryDelayMs } from './backoff.js';
import { failpoint } from './failpoints.js';
import { abandonedMessage, classify, FAILURE, loggable, NeedsDecisionError, NotAttemptedError, payloadKeyUnavailable, RetryableError } from './failure.js';
import type { HandlerRegistry } from './handlers.js';
import { LeasedRunner, type RunnerDeps } from './leased-runner.js';
import type { Claimed } from './loop.js';
import { whileStoreFails } from './store-retry.js';

export interface EffectsRunnerDeps extends RunnerDeps {
  readonly handlers: HandlerRegistry;
  /** Opens the effects' sealed data (crypto/effect-data.ts); null while the payload keys are not loaded. */
  readonly cipher: () => PayloadCipher | null;
  /** Whether payloadKeys.keys names this key (configured but not loaded: the effect waits for it, as an event does). */
  readonly payloadKeyConfigured: (keyId: string) => boolean;
}

/**
 * Executes recorded side effects after their handler's transaction committed, each with its
 * stable idempotency key (`<inbox_id>:<name>`), its own retries and terminal state (DONE or
 * FAILED). At-least-once: an executor that crashes after its call but before the settle runs
 * again, with the same key, so the downstream service can drop the repeat.
 */
export class EffectsRunner extends LeasedRunner<EffectRow, EffectsRunnerDeps> {
  constructor(d: EffectsRunnerDeps) {
    super(d, 'e');
  }

  protected claimRows(n: number, owner: string, leaseMs: number, nowMs: number): Promise<EffectRow[]> {
    // No payload key, no data to hand the executors: effects stay PENDING, their attempts unspent.
    // No handler and no executor (a serve without --handlers beside a work --handlers): every
    // effect is another process's, and one claimed here could only fail unsupported_effect.
    if (!this.d.cipher() || this.d.handlers.empty) return Promise.resolve([]);
    return this.d.store.claimEffects(n, owner, leaseMs, nowMs);
  }

  async process(claims: Claimed<EffectRow>[]): Promise<void> {
    await Promise.all(claims.map((c) => this.runOne(c)));
  }

  private async runOne({ row, owner }: Claimed<EffectRow>): Promise<void> {
    const { settlement, result, reason } = await this.execute(row);
    failpoint('effects.after-execute');
    // The call is made: a store failing for a moment must not make it again, nor fail the effect
    // attempts_abandoned on its last attempt (whileStoreFails).
    const settled = await whileStoreFails(() => this.d.store.settleEffect(row.effectId, owner, settlement), {}, this.d, (err, retryInMs) => {
      this.d.log.warn({ err: loggable(err), effectId: row.effectId, retryInMs }, 'effect settle failed in the store; trying it again');
    });
    if (!settled) {
      return this.d.log.warn({ effectId: row.effectId }, 'effect lease lost before settling');
    }
    this.d.metrics.effects.inc([result, this.d.metrics.reason(reason)]);
  }

  private async execute(row: EffectRow): Promise<{ settlement: EffectSettlement; result: 'success' | 'retry' | 'failed'; reason: string }> {
    const executor = this.d.handlers.executor(row.name);
    if (!executor) {
      return { result: 'failed', reason: FAILURE.unsupportedEffect, settlement: { status: 'FAILED', reason: FAILURE.unsupportedEffect, error: `no executor registered for effect "${row.name}"`, nowMs: this.now() } };
    }
    // An executor that crashed its process or outlived its lease still spent an attempt.
    if (row.attemptCount > this.d.retry.maxAttempts) {
      const error = abandonedMessage(row.attemptCount, this.d.retry.maxAttempts);
      return { result: 'failed', reason: FAILURE.attemptsAbandoned, settlement: { status: 'FAILED', reason: FAILURE.attemptsAbandoned, error, nowMs: this.now() } };
    }
    try {
      // Bounded as a handler is: by then the lease is gone, and a hung call must not hold its
      // slot (effectsConcurrency) or the engine's stop for good. Its key makes a late success harmless.
      await withDeadline(
        Promise.resolve().then(() => executor(JSON.parse(this.data(row)), { idempotencyKey: row.idempotencyKey, inboxId: row.inboxId, attempt: row.attemptCount })),
        this.d.leaseMs,
        () => new RetryableError('effect_timeout', `effect "${row.name}" did not finish within ${this.d.leaseMs} ms`),
      );
      return { result: 'success', reason: '', settlement: { status: 'DONE', nowMs: this.now() } };
    } catch (err) {
      const c = classify(err);
      const now = this.now();
      // Nothing attempted, for a cause of this gateway's (a key configured but not loaded yet): no
      // fault of the effect, so its attempt is given back and it is tried again as the secrets are re-read.
      if (err instanceof NotAttemptedError) {
        return { result: 'retry', reason: c.reason, settlement: { status: 'PENDING', nextAttemptAtMs: now + Math.min(c.retryAfterMs ?? 0, this.d.retry.capMs), error: c.message, nowMs: now, attemptGivenBack: true } };
      }
      if (!c.retryable) return { result: 'failed', reason: c.reason, settlement: { status: 'FAILED', reason: c.reason, error: c.message, nowMs: now } };
      if (row.attemptCount >= this.d.retry.maxAttempts) {
        return { result: 'failed', reason: FAILURE.retriesExhausted, settlement: { status: 'FAILED', reason: FAILURE.retriesExhausted, error: c.message, nowMs: now } };
      }
      // As for a handler: a downstream's Retry-After (a mail service's 429) is honoured.
      return { result: 'retry', reason: c.reason, settlement: { status: 'PENDING', nextAttemptAtMs: now + retryDelayMs(row.attemptCount, this.d.retry, c.retryAfterMs), error: c.message, nowMs: now } };
    }
  }

  /**
   * The effect's JSON data, opened. A key configured but not loaded (a late mount) waits without
   * spending attempts, as an event's payload does; a key not configured at all is retried and
   * counts (the config's choice); data that does not authenticate is for an operator.
   */
  private data(row: EffectRow): string {
    try {
      return openEffectData(this.d.cipher(), row.data, row.idempotencyKey);
    } catch (err) {
      if (err instanceof PayloadKeyMissingError) throw payloadKeyUnavailable(err.keyId, this.d.payloadKeyConfigured(err.keyId), 'effect data: ');
      throw new NeedsDecisionError('effect_data_corrupt', 'stored effect data failed authentication');
    }
  }
}
