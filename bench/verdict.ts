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
