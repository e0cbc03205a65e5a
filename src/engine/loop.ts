/**
 * The claim loop every runner shares (inbox worker, effects runner, outbox relay): keep up to
 * `concurrency` items in flight, claim at most `batchSize` at a time (claiming again at once
 * only after a full claim; after a partial one, the next claim waits for a batch to finish and
 * at least `gatherMs`),
 * sleep when nothing is due until a wake-up or the backstop poll, and on stop claim nothing
 * more and wait for the batches in flight. Claim errors (database down) back off instead of
 * spinning.
 */
import { Sleeper } from '../sleeper.js';

/** A claimed row with the lease token it was claimed under. */
export interface Claimed<T> {
  readonly row: T;
  readonly owner: string;
}

export interface LoopOptions {
  readonly concurrency: number;
  readonly batchSize: number;
  readonly pollMs: number;
  /** After a partial claim, the next claim waits at least this long (0: as soon as a batch finishes). */
  readonly gatherMs: number;
}

export class ClaimLoop<T> {
  private inFlight = 0;
  private running = false;
  private claiming = false;
  private wakeRequested = false;
  /** A partial batch is in flight: wake-ups wait for it (see run). */
  private gathering = false;
  private readonly sleeper = new Sleeper();
  private idle: (() => void)[] = [];
  private errorDelayMs = 0;

  constructor(
    private readonly opts: LoopOptions,
    private readonly claim: (n: number) => Promise<T[]>,
    /** `settled(n)`: n items of the batch are done before it ends; their places are free at once. */
    private readonly process: (batch: T[], settled: (n: number) => void) => Promise<void>,
    private readonly onError: (err: unknown) => void,
  ) {}

  start(): void {
    if (this.running) return;
    this.running = true;
    void this.run();
  }

  /** New work may be due: claim now instead of at the next poll. */
  wake(): void {
    this.wakeRequested = true;
    if (!this.gathering) this.sleeper.wake();
  }

  /** Claims nothing more; resolves when every batch in flight has settled. */
  async stop(): Promise<void> {
    this.running = false;
    this.sleeper.wake();
    if (this.inFlight === 0 && !this.claiming) return;
    await new Promise<void>((resolve) => this.idle.push(resolve));
  }

  private async run(): Promise<void> {
    while (this.running) {
      const free = this.opts.concurrency - this.inFlight;
      if (free <= 0) {
        await this.sleeper.sleep(this.opts.pollMs);
        continue;
      }
      this.wakeRequested = false;
      this.claiming = true;
      const wanted = Math.min(free, this.opts.batchSize);
      let batch: T[] = [];
      try {
        batch = await this.claim(wanted);
        this.errorDelayMs = 0;
      } catch (err) {
        this.onError(err);
        this.errorDelayMs = Math.min(Math.max(this.errorDelayMs * 2, 100), 5000);
      } finally {
        this.claiming = false;
      }
      if (batch.length > 0) {
        let open = batch.length;
        this.inFlight += open;
        // Items a batch settles early (the inbox worker's, beside a slow HTTP forward) give their
        // places back at once; a loop that was full claims again.
        const settled = (n: number) => {
          const k = Math.min(n, open);
          if (k <= 0) return;
          const wasFull = this.inFlight >= this.opts.concurrency;
          open -= k;
          this.inFlight -= k;
          if (wasFull) this.sleeper.wake();
        };
        void this.process(batch, settled).catch(this.onError).finally(() => {
          this.inFlight -= open;
          open = 0;
          this.sleeper.wake();
          this.checkIdle();
        });
        if (batch.length >= wanted) continue; // a full claim: more may be due, claim again while there is room
        // A partial claim took everything due. Wake-ups (new accepts) now wait until a batch in
        // flight finishes, so a trickle of arrivals gathers into the next batch, as in a group
        // commit, instead of becoming many small batches at once, each with its own claim and
        // commits (under ingress load they starved the accepts of the SQLite writer and of
        // PostgreSQL's pool).
        this.gathering = true;
        // A monotonic clock: a wall clock stepped back (NTP, an operator) would stretch this wait by the step.
        const gatheredAt = performance.now() + this.opts.gatherMs;
        await this.sleeper.sleep(this.opts.pollMs);
        // And at least gatherMs after this claim: at 2,000 events/s, 30 ms gathers ~60 events per
        // claim (e2e, bench/RESULTS.md 2026-11-30: PostgreSQL CPU 92–104 % → 74–81 %, SQLite
        // server 104 → 89 %, for ~20–30 ms more accept → PROCESSED).
        // Wake-ups cut a sleep short, so sleep again until then; stop() ends the loop.
        while (this.running && performance.now() < gatheredAt) await this.sleeper.sleep(gatheredAt - performance.now());
        this.gathering = false;
        continue;
      }
      this.checkIdle();
      if (!this.running) break;
      if (this.errorDelayMs > 0) await this.sleeper.sleep(this.errorDelayMs);
      else if (!this.wakeRequested) await this.sleeper.sleep(this.opts.pollMs);
    }
    this.checkIdle();
  }

  private checkIdle(): void {
    if (this.running || this.inFlight > 0 || this.claiming) return;
    for (const r of this.idle.splice(0)) r();
  }
}
