/**
 * How a rate step is judged (run.ts's ladder and targets, engine.ts's ingress target). A step is
 * sustained only if every measured request was acked: a non-2xx answer, a client error or a
 * timeout is a request the provider must send again, and a fast 503 would otherwise sit among
 * the fastest latencies and pull the p99 down.
 */
import type { RateResult } from './loadgen.js';

export const P99_LIMIT_MS = 500;
export const ACHIEVED_MIN = 0.97;

/** Measured requests not answered 2xx (non-2xx statuses, client errors, timeouts). */
export const failedRequests = (r: Pick<RateResult, 'measured' | 'ok'>): number => r.measured - r.ok;

/** p99 within `p99LimitMs`, achieved ≥ 97 % of offered, and no measured request failed. */
export function passes(r: Pick<RateResult, 'latency' | 'achieved' | 'offered' | 'measured' | 'ok'>, p99LimitMs = P99_LIMIT_MS): boolean {
  return r.latency.p99 <= p99LimitMs && r.achieved >= ACHIEVED_MIN * r.offered && failedRequests(r) === 0;
}

type Step = Parameters<typeof passes>[0];

/** A ladder's max sustained rate: the highest rate passed below the lowest rate failed. Its true maximum lies in [rate, failedAt). */
export interface Sustained {
  readonly rate: number;
  /** The lowest rate failed; Infinity if none did. */
  readonly failedAt: number;
  /** Nothing failed: the real limit is higher. */
  readonly capped: boolean;
}

export function maxSustained(steps: readonly Step[]): Sustained {
  const fails = steps.filter((s) => !passes(s)).map((s) => s.offered);
  const failedAt = fails.length ? Math.min(...fails) : Infinity;
  const passed = steps.filter((s) => passes(s) && s.offered < failedAt).map((s) => s.offered);
  const rate = passed.length ? Math.max(...passed) : 0;
  return { rate, failedAt, capped: fails.length === 0 && rate > 0 };
}

/**
 * Is our max rate ≥ k × the reference's? Each max is only bracketed by its ladder ([rate, failedAt);
 * a reference that fails at 1,000 and passes the bisection's 500 may hold 990), so comparing the
 * two lower bounds flatters whichever side's bracket is wider. 'met' only if our lower bound
 * reaches k × the reference's upper bound, 'MISSED' if our upper bound cannot reach k × its lower
 * bound, else 'undecided' (a finer ladder would tell).
 */
export function timesVerdict(ours: Sustained, ref: Sustained, k: number): 'met' | 'MISSED' | 'undecided' {
  if (ours.rate >= k * ref.failedAt) return 'met';
  if (ours.failedAt <= k * ref.rate) return 'MISSED';
  return 'undecided';
}

/**
 * Scenario (a) measured more than once in a run (`--repeat-a`): met only if every step met it, so
 * one lucky step on a quiet moment cannot stand for the run. `passed` of `of` steps met.
 */
export function everyStepPasses(steps: readonly Step[], p99LimitMs: number): { met: boolean; passed: number; of: number } {
  const passed = steps.filter((s) => passes(s, p99LimitMs)).length;
  return { met: steps.length > 0 && passed === steps.length, passed, of: steps.length };
}
