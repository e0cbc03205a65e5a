/**
 * At most `size` handler transactions hold a work-pool connection at once; the others wait here,
 * first come first served, for as long as it takes. The pool's own queue gives up after
 * connectionTimeoutMillis (3 s) and so cannot tell a busy pool from a dead database: many small
 * batches whose handlers each held a connection a while failed with "storage unavailable"
 * although every one of them was within its limits. A transaction ends (its handlers are bounded
 * by their time limits, its statements by query_timeout), so the wait is bounded too. One
 * connection is kept out of reach of handler transactions: claims, lease heartbeats and the
 * settles of batches that never wrote go on while the handlers run.
 */
export class TxSlots {
  private used = 0;
  private readonly waiting: (() => void)[] = [];

  constructor(private readonly size: number) {}

  /** Resolves with the function that gives the slot back (once; later calls do nothing). */
  async take(): Promise<() => void> {
    if (this.used < this.size) this.used++;
    else await new Promise<void>((resolve) => this.waiting.push(resolve));
    let held = true;
    return () => {
      if (!held) return;
      held = false;
      const next = this.waiting.shift();
      if (next) next(); // the slot passes straight on: `used` stays
      else this.used--;
    };
  }
}
