import type { RetryPolicy } from '../config/engine.js';

/**
 * Exponential backoff with full jitter (AWS Architecture Blog, "Exponential Backoff And
 * Jitter"): a uniform draw from [0, min(cap, base·2^(attempt-1))]. The jitter spreads a
 * burst of failures (a destination outage) so the retries do not return as one wave.
 */
export function backoffDelayMs(attempt: number, policy: Pick<RetryPolicy, 'baseMs' | 'capMs'>, random: () => number = Math.random): number {
  const exponent = Math.min(Math.max(attempt, 1) - 1, 52);
  const ceiling = Math.min(policy.capMs, policy.baseMs * 2 ** exponent);
  return Math.floor(random() * (ceiling + 1));
}

/**
 * The wait before the next attempt of a retryable failure: the backoff, or what the failure asked
 * for (RetryableError.retryAfterMs: a destination's or a mail service's Retry-After) if longer,
 * within the policy's cap. Sooner only spends attempts while the other side still refuses.
 */
export function retryDelayMs(attempt: number, policy: Pick<RetryPolicy, 'baseMs' | 'capMs'>, retryAfterMs: number | undefined): number {
  return Math.max(backoffDelayMs(attempt, policy), Math.min(retryAfterMs ?? 0, policy.capMs));
}
