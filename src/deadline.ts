/**
 * Waits for `p` at most `ms`, then rejects with `expired()`. The operation itself is not
 * cancelled (a handler, an executor, a broker offer no way to): its late outcome is ignored.
 */
export function withDeadline<T>(p: Promise<T>, ms: number, expired: () => Error): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const deadline = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(expired()), ms);
  });
  return Promise.race([p, deadline]).finally(() => clearTimeout(timer));
}

/**
 * A time limit that can stand still: `pause()` stops the clock (for a wait that is not the
 * limited operation's own, such as a queue for a connection) until the function it returns is
 * called. Pauses may overlap; the clock runs again when the last one ends.
 */
export class PausableDeadline {
  /** Rejects with `expired()` once `ms` of unpaused time have passed. */
  readonly expired: Promise<never>;
  private reject!: (err: Error) => void;
  private timer: NodeJS.Timeout | undefined;
  private leftMs: number;
  private runningSince = 0;
  private pauses = 0;
  private done = false;

  constructor(ms: number, private readonly onExpiry: () => Error) {
    this.leftMs = ms;
    this.expired = new Promise<never>((_, reject) => (this.reject = reject));
    this.expired.catch(() => undefined); // raced by the caller; never unhandled on its own
    this.run();
  }

  pause(): () => void {
    if (this.done) return () => undefined;
    if (this.pauses++ === 0) {
      clearTimeout(this.timer);
      this.leftMs -= performance.now() - this.runningSince;
    }
    let resumed = false;
    return () => {
      if (resumed || this.done) return;
      resumed = true;
      if (--this.pauses === 0) this.run();
    };
  }

  /** Stops the clock for good (the operation finished). */
  clear(): void {
    this.done = true;
    clearTimeout(this.timer);
  }

  private run(): void {
    this.runningSince = performance.now();
    this.timer = setTimeout(() => {
      this.done = true;
      this.reject(this.onExpiry());
    }, Math.max(0, this.leftMs));
  }
}
