/**
 * A circuit breaker for one destination, so that a service that stopped answering does not hold
 * the workers' places. Without it, every delivery to a service that hangs or drops packets waits
 * out its whole `timeoutMs` (and those queued for a connection wait behind them first): a backlog
 * for one dead service fills `workers.concurrency`, and every other endpoint and destination waits.
 *
 * Closed: deliveries go. `failures` timeouts in a row open it. Anything else resets the count: any
 * HTTP answer (even a 500), and a connection refused or reset, which fails fast and so holds no
 * place (a port that refuses is retried as before, and is delivered to as soon as it is back).
 * Open: deliveries fail at once, without a request, until `cooldownMs` has passed. Then one
 * delivery goes as a probe (the others still fail at once): a timeout opens it again, anything
 * else closes it.
 *
 * A delivery refused by the open circuit is an attempt that failed like the requests it stands in
 * for would have (same retry policy), only without waiting for a timeout; its retry is not due
 * before the next probe.
 */
export interface CircuitOptions {
  /** Timeouts in a row that open the circuit. */
  readonly failures: number;
  /** How long it stays open before one probe may go. */
  readonly cooldownMs: number;
}

/**
 * Enough timeouts that one slow request among answered ones never opens it, few enough that a
 * dead service is found out by its first batch of them.
 */
export const CIRCUIT_DEFAULTS: CircuitOptions = { failures: 5, cooldownMs: 30_000 };

/** May a delivery go now: as an ordinary one, as the probe, or not for `waitMs`. */
export type Admission = { readonly go: 'yes' } | { readonly go: 'probe' } | { readonly go: 'no'; readonly waitMs: number };

export class Circuit {
  private inARow = 0;
  /** When the circuit opened (performance.now(); undefined = closed); it may probe from `openedAt + cooldownMs`. */
  private openedAt: number | undefined;
  private probing = false;

  constructor(
    private readonly o: CircuitOptions,
    /** Told when the circuit opens (with the failures that opened it) or closes. */
    private readonly onChange: (open: boolean, failuresInARow: number) => void,
    /** How long a probe may take (the destination's own timeout): the wait given while one is out. */
    private readonly probeMs: number,
  ) {}

  /**
   * A monotonic clock: the cooldown is a span within this process. On the wall clock, a clock
   * stepped back (chrony, an operator) while the circuit was open kept it open that much longer,
   * every delivery failing at once without a request, spending the events' attempts.
   */
  private now(): number {
    return performance.now();
  }

  admit(): Admission {
    if (this.openedAt === undefined) return { go: 'yes' };
    const probeAt = this.openedAt + this.o.cooldownMs;
    const now = this.now();
    // Whole ms (the monotonic clock's are fractional): it becomes a retry's next_attempt_at, which
    // SQLite keeps in a STRICT INTEGER column and refuses as a REAL, failing the settle.
    if (now < probeAt) return { go: 'no', waitMs: Math.ceil(probeAt - now) };
    if (this.probing) return { go: 'no', waitMs: this.probeMs };
    this.probing = true;
    return { go: 'probe' };
  }

  /** Not a timeout: an answer (any status), or a connection refused or reset. */
  responsive(): void {
    this.inARow = 0;
    this.probing = false;
    if (this.openedAt === undefined) return;
    this.openedAt = undefined;
    this.onChange(false, 0);
  }

  /** No answer within the timeout. `probe`: this delivery was the probe. */
  timedOut(probe: boolean): void {
    if (probe) this.probing = false;
    if (this.openedAt !== undefined) {
      if (probe) this.openedAt = this.now(); // a fresh cooldown
      return; // else a request sent before the circuit opened, failing late
    }
    // Closed meanwhile (a request sent before it opened answered while the probe was out, with
    // timeoutMs > cooldownMs): the probe's timeout counts like any other. Opening it here at once
    // did so without telling (the log and gauge said closed) and on one timeout, not `failures`.
    if (++this.inARow < this.o.failures) return;
    this.openedAt = this.now();
    this.onChange(true, this.inARow);
  }

  /** A probe that ended without telling either way (the gateway is closing): let another go. */
  released(probe: boolean): void {
    if (probe) this.probing = false;
  }
}
