import type { Logger } from 'pino';

/**
 * One kind of row that expires: deletes at most `limit` of them as of `nowMs`, in one short
 * transaction, going on from `cursor` (what the previous call of this run returned; undefined at
 * a run's start). Resolves with how many it deleted, whether any may be left (`done` false), and
 * where the next call goes on.
 */
export interface PruneTask {
  /** The `what` label of webhook_pruned_rows_total: payload, transmission. */
  readonly kind: string;
  /** For the log: what goes, e.g. "transmission bindings (paypal)". */
  readonly what: string;
  prune(nowMs: number, limit: number, cursor: string | undefined): Promise<{ deleted: number; done: boolean; cursor?: string }>;
}

export interface PruneSchedule {
  /** The first run, after start. */
  readonly firstAfterMs: number;
  readonly everyMs: number;
  /** Rows per statement (one short transaction each). */
  readonly batch: number;
}

/** Where a Pruner counts (the server's metrics). */
export interface PruneCounters {
  readonly pruned: { inc(labels: string[], by: number): void };
  readonly pruneFailures: { inc(): void };
}

export const DAY_MS = 86_400_000;

export const DEFAULT_PRUNE_SCHEDULE: PruneSchedule = { firstAfterMs: 60_000, everyMs: 3_600_000, batch: 1000 };

/**
 * Runs the serving process's prune tasks a minute after start, then hourly, each in batches until
 * it has nothing left: rows that would otherwise only grow (transmission bindings), or that an
 * operator asked to keep no longer (retention). Best effort: a run that fails is logged and the
 * next one deletes what it left. Several servers on one database may all run it: a row deleted
 * twice is deleted once.
 */
export class Pruner {
  private timer: NodeJS.Timeout | undefined;
  private running: Promise<void> | undefined;
  private stopped = false;

  constructor(
    private readonly tasks: readonly PruneTask[],
    private readonly log: Logger,
    private readonly counters: PruneCounters,
    private readonly schedule: PruneSchedule = DEFAULT_PRUNE_SCHEDULE,
  ) {
    // Each series from 0 at start: one that appears only at its first deletion reads as "no data".
    for (const t of tasks) counters.pruned.inc([t.kind], 0);
  }

  start(): void {
    if (this.tasks.length === 0 || this.stopped) return;
    this.arm(this.schedule.firstAfterMs);
  }

  /** Stops the schedule; resolves once a run in progress has finished its statement. */
  async stop(): Promise<void> {
    this.stopped = true;
    clearTimeout(this.timer);
    await this.running;
  }

  /** Runs every task to its end now; resolves to how many rows each task deleted, in task order. */
  async runOnce(nowMs = Date.now()): Promise<{ what: string; deleted: number }[]> {
    const out: { what: string; deleted: number }[] = [];
    for (const task of this.tasks) {
      let deleted = 0;
      let cursor: string | undefined;
      let done = false;
      while (!done && !this.stopped) {
        const r = await task.prune(nowMs, this.schedule.batch, cursor);
        deleted += r.deleted;
        // Per statement: what a run deleted before it failed is counted too.
        if (r.deleted > 0) this.counters.pruned.inc([task.kind], r.deleted);
        ({ done, cursor } = r);
      }
      if (deleted > 0) this.log.info({ pruned: deleted }, `${task.what} deleted`);
      out.push({ what: task.what, deleted });
    }
    return out;
  }

  private arm(ms: number): void {
    this.timer = setTimeout(() => {
      this.running = this.runOnce()
        .then(() => undefined, (err: unknown) => {
          this.counters.pruneFailures.inc();
          this.log.warn({ err: (err as Error).message }, 'pruning failed; the next run tries again');
        })
        .finally(() => {
          this.running = undefined;
          if (!this.stopped) this.arm(this.schedule.everyMs);
        });
    }, ms);
    this.timer.unref();
  }
}
