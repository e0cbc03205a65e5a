/** Token bucket per endpoint: `perSecond` refill, `burst` capacity. */
export class TokenBucket {
  private tokens: number;
  private last: number;

  constructor(private readonly perSecond: number, private readonly burst: number) {
    this.tokens = burst;
    this.last = performance.now();
  }

  /** Takes one token; false (and the seconds until one is available) when empty. */
  take(): { ok: true } | { ok: false; retryAfterSeconds: number } {
    const now = performance.now();
    this.tokens = Math.min(this.burst, this.tokens + ((now - this.last) / 1000) * this.perSecond);
    this.last = now;
    if (this.tokens >= 1) {
      this.tokens -= 1;
      return { ok: true };
    }
    return { ok: false, retryAfterSeconds: Math.max(1, Math.ceil((1 - this.tokens) / this.perSecond)) };
  }
}
