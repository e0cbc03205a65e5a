import type { Logger } from 'pino';
import type { RetryPolicy } from '../config/engine.js';
import type { EngineMetrics } from '../metrics/engine.js';
import type { WorkStore } from '../store/work-port.js';
import { loggable } from './failure.js';
import type { Claimed } from './loop.js';
import type { StoreRetryLimits } from './store-retry.js';

/** What every leased runner (effects, relay) is built from; `leaseMs` and `stopping` also bound its store retries. */
export interface RunnerDeps extends StoreRetryLimits {
  readonly store: WorkStore;
  readonly owner: string;
  readonly retry: RetryPolicy;
  readonly metrics: EngineMetrics;
  readonly log: Logger;
  readonly now?: () => number;
}

/**
 * A runner over one leased table. Each claim leases under its own token (`owner/<tag><n>`),
 * so even two batches of one process holding the same row (an expired lease taken over) can
 * never both settle it.
 */
export abstract class LeasedRunner<T, D extends RunnerDeps> {
  protected readonly now: () => number;
  private claims = 0;

  constructor(protected readonly d: D, private readonly tag: string) {
    this.now = d.now ?? Date.now;
  }

  async claim(n: number): Promise<Claimed<T>[]> {
    const owner = `${this.d.owner}/${this.tag}${++this.claims}`;
    return (await this.claimRows(n, owner, this.d.leaseMs, this.now())).map((row) => ({ row, owner }));
  }

  protected abstract claimRows(n: number, owner: string, leaseMs: number, nowMs: number): Promise<T[]>;
  abstract process(claims: Claimed<T>[]): Promise<void>;
}

/**
 * Extends a batch's leases every third of a lease while it runs (a slow handler, a slow publish),
 * so no other claim takes its rows meanwhile; a failed extension is logged as `what`. The
 * returned stop ends it and gives the extension in flight, for a caller that must not overlap it.
 */
export function leaseHeartbeat(leaseMs: number, extend: () => Promise<void>, log: Logger, what: string): () => Promise<unknown> {
  let beat: Promise<unknown> = Promise.resolve();
  const timer = setInterval(() => {
    beat = extend().catch((err: unknown) => log.warn({ err: loggable(err) }, what));
  }, Math.max(100, Math.floor(leaseMs / 3)));
  return () => {
    clearInterval(timer);
    return beat;
  };
}
