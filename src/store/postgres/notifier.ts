import { Sleeper } from '../../sleeper.js';

/**
 * NOTIFY after accepts commit, in a statement of its own. Inside the accept transaction it
 * would take PostgreSQL's cluster-wide notify lock and hold it through the commit's WAL flush,
 * so concurrent accept commits (of every process) could no longer share a flush: measured
 * here, 8 concurrent single-row committers were capped near 800 commits/s with it, 900–2,300
 * without.
 *
 * Coalesced and paced: the first accept after a quiet spell notifies at once; accepts that
 * commit while a NOTIFY is in flight, or within `minIntervalMs` of the last one's start, cause
 * exactly one more, sent when that interval is over. A NOTIFY is a transaction of its own (a
 * round trip: bare ones cost 43–47 µs of PostgreSQL CPU and 107–232 µs of client CPU on the
 * slow box of 2026-11-30). Unpaced, 4 connections committing 3-row batches sent about one
 * per two accept commits (bench/pg-accept-cost.ts, 6,000 events: 2,100–2,255 transactions for
 * 1,334 accept statements; paced: 1,500–1,690). A claim loop busy with a backlog is not waiting
 * for it (it gathers for `workers.gatherMs` anyway), and an idle one is woken within the interval.
 * Best effort: a lost wake-up only delays work until the engine's next poll.
 */
export class Notifier {
  private busy = false;
  private again = false;
  private closed = false;
  private lastStart = Number.NEGATIVE_INFINITY;
  private readonly pacer = new Sleeper();

  constructor(private readonly send: () => Promise<unknown>, private readonly minIntervalMs = 20) {}

  poke(): void {
    if (this.closed) return;
    if (this.busy) {
      this.again = true;
      return;
    }
    this.busy = true;
    void this.drain();
  }

  /** Sends nothing more; a pending paced NOTIFY is dropped (nothing waits on it). */
  close(): void {
    this.closed = true;
    this.pacer.wake();
  }

  private async drain(): Promise<void> {
    do {
      const wait = this.lastStart + this.minIntervalMs - performance.now();
      if (wait > 0) {
        await this.pacer.sleep(wait);
        if (this.closed) break;
      }
      // Every accept that poked before this point committed before it: this NOTIFY covers them.
      this.again = false;
      this.lastStart = performance.now();
      await this.send().catch(() => undefined);
    } while (this.again && !this.closed);
    this.busy = false;
  }
}
