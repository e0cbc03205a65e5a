/**
 * Operator commands over the effects handlers record (`ctx.effect`): list the ones that ended
 * FAILED (retries exhausted, no executor registered, a needs-decision error) and send them back
 * once the cause is fixed. The executor then runs again with the same idempotency key, so a
 * downstream that did get an earlier call can drop the repeat. Never prints an effect's data:
 * it may carry customer details.
 */
import type { FailedEffect } from '../store/work-port.js';
import { dueNowMs, iso, oldestListed, withStore } from './events.js';

function failedJson(e: FailedEffect) {
  return {
    effect_id: e.effectId, inbox_id: e.inboxId, name: e.name, idempotency_key: e.idempotencyKey, created_at: iso(e.createdAtMs),
    failed_at: e.failedAtMs === null ? null : iso(e.failedAtMs),
    attempt_count: e.attemptCount, failure_reason: e.failureReason, last_error: e.lastError,
  };
}

export function runEffectsFailed(configFile: string, o: { limit: number; json: boolean }): Promise<number> {
  return withStore(configFile, async (store) => {
    // One more than shown tells whether there are more.
    const rows = await store.listFailedEffects(o.limit + 1);
    const more = rows.length > o.limit;
    if (more) rows.length = o.limit;
    if (o.json) {
      for (const r of rows) console.log(JSON.stringify(failedJson(r)));
      return 0;
    }
    console.log(['effect_id'.padEnd(36), 'inbox_id'.padEnd(36), 'name'.padEnd(24), 'attempts', 'reason'.padEnd(24), 'created_at'.padEnd(24), 'failed_at'.padEnd(24), 'last_error'].join('  '));
    for (const r of rows) {
      const failedAt = r.failedAtMs === null ? '-' : iso(r.failedAtMs);
      console.log([r.effectId, r.inboxId, r.name.padEnd(24), String(r.attemptCount).padStart(8), r.failureReason.padEnd(24), iso(r.createdAtMs).padEnd(24), failedAt.padEnd(24), r.lastError ?? '-'].join('  '));
    }
    console.error(oldestListed(rows.length, 'failed effect(s)', o.limit, more));
    return 0;
  });
}

/** `effectIds` null: every FAILED effect. */
export function runEffectsRetry(configFile: string, effectIds: readonly string[] | null): Promise<number> {
  return withStore(configFile, async (store) => {
    const n = await store.retryFailedEffects(effectIds, await dueNowMs(store));
    console.log(`requeued ${n} FAILED effect(s): due now, same idempotency keys`);
    // Named ids that were not FAILED effects (unknown, DONE, or still PENDING/PROCESSING): left alone.
    if (effectIds !== null && n < effectIds.length) {
      console.error(`webhook-inbox effects retry: ${effectIds.length - n} of the ${effectIds.length} id(s) given were not FAILED effects (left alone)`);
      return 1;
    }
    return 0;
  });
}
