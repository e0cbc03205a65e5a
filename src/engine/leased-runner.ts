import type { Logger } from 'pino';
import type { RetryPolicy } from '../config/engine.js';
import type { EngineMetrics } from '../metrics/engine.js';
import type { WorkStore } from '../store/work-port.js';
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
