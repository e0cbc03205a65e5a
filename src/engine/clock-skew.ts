import type { Logger } from 'pino';
import type { Gauge } from '../metrics/registry.js';
import type { WorkStore } from '../store/work-port.js';

/** How often the clocks are compared again. */
export const CLOCK_CHECK_MS = 60_000;

/**
 * Leases are timed by each process's own clock (a claim writes `lease_until = now + leaseMs`), so
 * a process whose clock runs ahead of another's by more than about 2/3 of `leaseMs` takes over
 * leases that are still live: the lease token keeps the first batch from settling (nothing applies
 * twice), but the work is done twice and the first attempt is wasted. The database's clock is the
 * one every process shares: this compares ours with it, as a gauge, and warns while the two
 * differ by more than a quarter of a lease (fix the host's time sync).
 */
export class ClockSkewWatch {
  private timer: NodeJS.Timeout | undefined;
  private warned = false;

  constructor(
    private readonly store: Pick<WorkStore, 'databaseNowMs'>,
    private readonly leaseMs: number,
    private readonly gauge: Gauge,
    private readonly log: Logger,
    private readonly now: () => number = Date.now,
  ) {}

  start(everyMs = CLOCK_CHECK_MS): void {
    void this.check();
    this.timer = setInterval(() => void this.check(), everyMs).unref();
  }

  stop(): void {
    clearInterval(this.timer);
  }

  /** This process's clock minus the database's, in ms (undefined: no shared clock, or the database is away). */
  async check(): Promise<number | undefined> {
    const before = this.now();
    let db: number | null;
    try {
      db = await this.store.databaseNowMs();
    } catch {
      return undefined; // the database is away: the claim loops say so
    }
    if (db === null) return undefined;
    const after = this.now();
    // The database read its clock somewhere within the round trip: take the middle, and count
    // only the part of the difference the round trip cannot explain.
    const skewMs = (before + after) / 2 - db;
    this.gauge.set([], skewMs / 1000);
    const off = Math.abs(skewMs) - (after - before) / 2 > this.leaseMs / 4;
    if (off && !this.warned) {
      this.log.warn({ skew_seconds: Math.round(skewMs) / 1000, lease_ms: this.leaseMs },
        `this process's clock is ${Math.abs(Math.round(skewMs / 1000))} s ${skewMs > 0 ? 'ahead of' : 'behind'} the database's: leases are timed by each process's clock, so processes whose clocks differ by more than ~2/3 of workers.leaseMs take over each other's live leases (work done twice, never applied twice); fix this host's time sync`);
    } else if (!off && this.warned) {
      this.log.info({ skew_seconds: Math.round(skewMs) / 1000 }, "this process's clock is in step with the database's again");
    }
    this.warned = off;
    return skewMs;
  }
}
