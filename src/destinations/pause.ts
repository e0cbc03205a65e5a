import { DEFAULT_RETRY } from '../config/engine.js';

/**
 * A destination that asked to be left alone for a while (a 429 or 503 with Retry-After). The ask is
 * about the service, not the one event that got it: without a pause, every other event bound there
 * was still sent at once, got the same answer and spent one of its attempts, hammering a receiver
 * that had asked for quiet, and a backlog burnt its attempts toward FAILED for nothing. Its own
 * class beside the circuit (circuit.ts), which is about a service that does not answer at all:
 * this one answered, and said when to come back.
 */

/** The longest pause one answer can ask for: the default retry.capMs, so no Retry-After parks a destination for days. */
export const MAX_PAUSE_MS = DEFAULT_RETRY.capMs;

export class Pause {
  /** When the pause ends (on `now`'s clock); undefined or past = not paused. */
  private until: number | undefined;
  /** The status that asked for the pause now running (for the message). */
  private askedBy = 0;

  /**
   * `onStart`: told when a pause begins (not when a running one is extended), with its length in ms.
   * `now`: monotonic, as the circuit's cooldown is: on the wall clock, a clock stepped back during
   * a pause would keep the destination refused that much longer.
   */
  constructor(
    private readonly onStart: (ms: number, status: number) => void,
    private readonly now: () => number = () => performance.now(),
  ) {}

  /** The destination answered `status` asking to wait `ms`: paused until then, unless already for longer. */
  askedToWait(ms: number, status: number): void {
    const now = this.now();
    const length = Math.min(ms, MAX_PAUSE_MS);
    const until = now + length;
    const running = this.until !== undefined && this.until > now;
    // A shorter ask does not shorten it: the longer one may come from a stricter limit.
    if (length <= 0 || (running && until <= this.until!)) return;
    this.until = until;
    this.askedBy = status;
    if (!running) this.onStart(length, status);
  }

  /**
   * How long the pause has left, in whole ms rounded up (it becomes a retry's next_attempt_at, a
   * SQLite STRICT INTEGER column), with the status that asked for it; undefined when not paused.
   */
  left(): { readonly ms: number; readonly status: number } | undefined {
    if (this.until === undefined) return undefined;
    // Less a nanosecond: `now + ms - now` in floating point can come out a hair above ms, and
    // rounding that up gave a 1 s pause 1,001 ms left as it began.
    const ms = Math.ceil(this.until - this.now() - 1e-6);
    if (ms > 0) return { ms, status: this.askedBy };
    this.until = undefined;
    return undefined;
  }
}
