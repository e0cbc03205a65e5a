import type { Logger } from 'pino';
import { maxToleranceSeconds, type EndpointConfig } from '../config/schema.js';
import type { InboxStore } from '../store/port.js';

const DAY_MS = 86_400_000;

/**
 * How long a provider's transmission bindings (webhook_transmission) must be kept, in ms.
 *
 * A binding matters while a request under its transmission id can still be fresh: the first
 * request's signed time t was within ±T of its receipt r, and a later one under the same id (the
 * time is signed, so it is t again) is fresh only until t + T ≤ r + 2T. Past that every such
 * request is refused as stale before the binding is looked at. T is the widest window any
 * configuration may set for the provider (maxToleranceSeconds), not this server's, so a server
 * with another configuration on the same database keeps what it needs; a day more covers the
 * clocks of servers that share it.
 */
export function transmissionHorizonMs(adapter: Parameters<typeof maxToleranceSeconds>[0]): number {
  return 2 * maxToleranceSeconds(adapter) * 1000 + DAY_MS;
}

/** Providers of these endpoints whose bindings this process prunes, each with its horizon. */
export function prunedProviders(endpoints: readonly EndpointConfig[]): Map<string, number> {
  const out = new Map<string, number>();
  for (const e of endpoints) if (e.adapter.bindsTransmissions) out.set(e.provider, transmissionHorizonMs(e.adapter));
  return out;
}

export interface PruneSchedule {
  /** The first run, after start. */
  readonly firstAfterMs: number;
  readonly everyMs: number;
  /** Bindings per statement (one short transaction each). */
  readonly batch: number;
}

export const DEFAULT_PRUNE_SCHEDULE: PruneSchedule = { firstAfterMs: 60_000, everyMs: 3_600_000, batch: 1000 };

/**
 * Deletes transmission bindings past their horizon, hourly, in batches: a binding is ~100 bytes
 * and PayPal sends one per delivery, so without this the table only grew. Best effort: a run that
 * fails is logged and the next one deletes what it left.
 */
export class TransmissionPruner {
  private timer: NodeJS.Timeout | undefined;
  private running: Promise<void> | undefined;
  private stopped = false;

  constructor(
    private readonly store: Pick<InboxStore, 'pruneTransmissions'>,
    private readonly horizons: ReadonlyMap<string, number>,
    private readonly log: Logger,
    private readonly schedule: PruneSchedule = DEFAULT_PRUNE_SCHEDULE,
  ) {}

  start(): void {
    if (this.horizons.size === 0 || this.stopped) return;
    this.arm(this.schedule.firstAfterMs);
  }

  /** Stops the schedule; resolves once a run in progress has finished its statement. */
  async stop(): Promise<void> {
    this.stopped = true;
    clearTimeout(this.timer);
    await this.running;
  }

  /** Prunes every provider's expired bindings now; resolves to how many were deleted. */
  async runOnce(nowMs = Date.now()): Promise<number> {
    let total = 0;
    for (const [provider, horizonMs] of this.horizons) {
      let pruned = 0;
      let n: number;
      do {
        n = await this.store.pruneTransmissions(provider, nowMs - horizonMs, this.schedule.batch);
        pruned += n;
      } while (n === this.schedule.batch && !this.stopped);
      if (pruned > 0) this.log.info({ provider, pruned }, 'transmission bindings past their horizon deleted');
      total += pruned;
    }
    return total;
  }

  private arm(ms: number): void {
    this.timer = setTimeout(() => {
      this.running = this.runOnce()
        .then(() => undefined, (err: unknown) => this.log.warn({ err: (err as Error).message }, 'pruning transmission bindings failed; the next run tries again'))
        .finally(() => {
          this.running = undefined;
          if (!this.stopped) this.arm(this.schedule.everyMs);
        });
    }, ms);
    this.timer.unref();
  }
}
