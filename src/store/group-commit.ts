import { StorageUnavailableError } from '../errors.js';

export interface GroupCommitOptions {
  /** Most items in one transaction. */
  readonly maxBatch: number;
  /**
   * Most bytes (as `sizeOf` counts them) in one transaction; a single larger item still commits
   * alone. Undefined = no byte cap.
   */
  readonly maxBatchBytes?: number;
  /**
   * Linger: when the store is free to start a batch that is not full, it waits this long for more
   * items first (as Kafka's linger.ms). 0 = natural batching only.
   */
  readonly maxWaitMs: number;
  /**
   * Batches committing at once (SQLite: 1 writer; PostgreSQL: a few connections). A second
   * concurrent commit starts only when a quarter of a full batch is waiting (of `maxBatch` or of
   * `maxBatchBytes`), so overlap never shrinks batches at moderate load — it only adds
   * throughput when one commit can't keep up — or when the newest running commit has run for
   * OVERLAP_AFTER_MS (it is stuck, and what waits should not wait for its deadline).
   */
  readonly maxInFlight: number;
  /**
   * A commit not answered by then is reported unavailable (its outcome is unknown). An item still
   * queued after as long is answered unavailable too (it was never sent), so a slow store cannot
   * queue requests for ever: while each failed batch takes `maxBatch` items, arrivals past that
   * pace waited for the whole outage (46 s behind a locked SQLite in an outside audit).
   */
  readonly commitTimeoutMs: number;
}

export interface BatchStats {
  size: number;
  commitMs: number;
  ok: boolean;
  /** Why it failed (the store's message), when it did. */
  error?: string;
}

/**
 * A batch lingers only while fewer items than this wait: at that size the per-commit cost is
 * already shared, and at high rates a linger after every commit only adds latency.
 */
const LINGER_BELOW = 8;

/**
 * A commit running this long is not one to gather behind: commits take 1–30 ms here, so it is
 * stuck (a stalled connection, a lock), and the next batch starts on a free slot. Before,
 * at a low rate (fewer than a quarter of maxBatch arriving in commitTimeoutMs), everything that
 * arrived waited for that commit's deadline (10 s: past GitHub's and Shopify's timeouts) though
 * the pool's other connections were fine.
 */
export const OVERLAP_AFTER_MS = 250;

interface Pending<I, R> {
  item: I;
  /** sizeOf(item), taken once at submit. */
  size: number;
  /** performance.now() at submit. */
  queuedAt: number;
  resolve(r: R): void;
  reject(e: unknown): void;
}

/**
 * Group commit: concurrent submissions share one transaction, so one fsync serves many
 * requests. Natural batching — while a commit is in flight, new items queue; when it ends,
 * everything queued goes in the next batch, after lingering `maxWaitMs` for more unless it is
 * full. So an item waits one commit time plus `maxWaitMs` before its own batch starts while the
 * store keeps up, and never more than `commitTimeoutMs` when it does not (then it gets 503).
 * The linger's default is each store's (groupCommitDefaults): 1 ms on SQLite, 0 on PostgreSQL.
 * Every item's promise settles only after its own batch committed or failed.
 */
export class GroupCommitter<I, R> {
  private queue: Pending<I, R>[] = [];
  private queuedBytes = 0;
  private inFlight = 0;
  /** In-flight commits past commitTimeoutMs whose store call has not returned: they keep their slot. */
  private stuck = 0;
  private scheduled = false;
  /** Each running commit not yet past commitTimeoutMs: its start (OVERLAP_AFTER_MS), and how to give up on it (abandon). */
  private readonly running = new Set<{ readonly started: number; giveUp(err: StorageUnavailableError): void }>();
  /** Calls schedule() once the newest running commit reaches OVERLAP_AFTER_MS. */
  private overlapTimer: NodeJS.Timeout | undefined;
  /** The timer that answers items queued past commitTimeoutMs (running while anything is queued). */
  private expiry: NodeJS.Timeout | undefined;

  constructor(
    private readonly commit: (items: I[]) => Promise<R[]>,
    private readonly opts: GroupCommitOptions,
    private readonly onBatch?: (stats: BatchStats) => void,
    private readonly sizeOf: (item: I) => number = () => 0,
  ) {}

  submit(item: I): Promise<R> {
    if (this.blocked()) return Promise.reject(blockedError());
    return new Promise<R>((resolve, reject) => {
      const size = this.sizeOf(item);
      this.queue.push({ item, size, queuedAt: performance.now(), resolve, reject });
      this.queuedBytes += size;
      this.expiry ??= setTimeout(() => this.expire(), this.opts.commitTimeoutMs).unref();
      this.schedule();
    });
  }

  get queued(): number {
    return this.queue.length;
  }

  /**
   * Every slot is held by a commit that timed out and has not returned (a hung disk or
   * connection): nothing queued could start, so it is answered now, not when the client gives up.
   */
  private blocked(): boolean {
    return this.stuck >= this.opts.maxInFlight;
  }

  private canStart(): boolean {
    if (this.queue.length === 0 || this.inFlight >= this.opts.maxInFlight) return false;
    // A commit past its timeout (already answered, its call not returned) is no batch to gather
    // behind: counted as running, it held every later small batch until its deadline (503) while
    // other slots were free.
    if (this.inFlight === this.stuck || this.queue.length >= Math.max(1, this.opts.maxBatch >> 2)) return true;
    if (this.opts.maxBatchBytes !== undefined && this.queuedBytes >= this.opts.maxBatchBytes / 4) return true;
    // Gather behind the newest running commit while it may still be a normal one.
    let newest = -Infinity;
    for (const r of this.running) newest = Math.max(newest, r.started);
    const overlapAt = newest + OVERLAP_AFTER_MS;
    if (performance.now() >= overlapAt) return true;
    this.overlapTimer ??= setTimeout(() => {
      this.overlapTimer = undefined;
      this.schedule();
    }, overlapAt - performance.now()).unref();
    return false;
  }

  /** The next batch: at most maxBatch items and maxBatchBytes bytes, but always at least one item. */
  private take(): Pending<I, R>[] {
    const cap = this.opts.maxBatchBytes ?? Infinity;
    let n = 0;
    let bytes = 0;
    while (n < this.queue.length && n < this.opts.maxBatch) {
      const size = this.queue[n]!.size;
      if (n > 0 && bytes + size > cap) break;
      bytes += size;
      n++;
    }
    this.queuedBytes -= bytes;
    return this.queue.splice(0, n);
  }

  private schedule(): void {
    if (this.scheduled || !this.canStart()) return;
    this.scheduled = true;
    // setImmediate lets the other requests of this I/O turn join the batch.
    if (this.opts.maxWaitMs > 0 && this.queue.length < LINGER_BELOW && this.queuedBytes < (this.opts.maxBatchBytes ?? Infinity)) setTimeout(() => this.flush(), this.opts.maxWaitMs);
    else setImmediate(() => this.flush());
  }

  private flush(): void {
    this.scheduled = false;
    if (!this.canStart()) return;
    const batch = this.take();
    this.inFlight++;
    const started = performance.now();
    let settled = false;
    let timedOut = false;
    const settle = (ok: boolean, results: R[] | null, err: unknown) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      try {
        this.onBatch?.({ size: batch.length, commitMs: performance.now() - started, ok, error: ok ? undefined : (err as Error | undefined)?.message });
      } catch {
        // Bookkeeping must never leave the batch's callers unanswered.
      }
      if (ok && results) for (let i = 0; i < batch.length; i++) batch[i]!.resolve(results[i]!);
      else for (const p of batch) p.reject(err);
    };
    // Its callers are answered unavailable (outcome unknown); its slot stays held until the store returns.
    const giveUp = (err: StorageUnavailableError) => {
      timedOut = true;
      this.stuck++;
      this.running.delete(run);
      settle(false, null, err);
    };
    const run = { started, giveUp };
    this.running.add(run);
    const timer = setTimeout(() => {
      giveUp(new StorageUnavailableError(`commit did not finish within ${this.opts.commitTimeoutMs} ms; outcome unknown`));
      if (this.blocked()) this.failQueued();
      else this.schedule(); // what queued behind it may start now
    }, this.opts.commitTimeoutMs);
    let committing: Promise<R[]>;
    try {
      committing = this.commit(batch.map((p) => p.item));
    } catch (err) {
      committing = Promise.reject(err); // a store that throws instead of rejecting must not keep its slot
    }
    committing.then(
      (results) => {
        if (results.length !== batch.length) settle(false, null, new StorageUnavailableError('store returned a wrong result count'));
        else settle(true, results, null);
      },
      (err) => settle(false, null, err instanceof StorageUnavailableError ? err : new StorageUnavailableError('commit failed', { cause: err })),
    ).finally(() => {
      // The slot frees only when the store is really done, even if callers were already answered.
      this.inFlight--;
      this.running.delete(run);
      if (timedOut) this.stuck--;
      this.schedule();
    });
    this.schedule();
  }

  /** Answers the items queued for commitTimeoutMs or more (the oldest are first), then waits for the next oldest. */
  private expire(): void {
    this.expiry = undefined;
    const now = performance.now();
    let n = 0;
    while (n < this.queue.length && now - this.queue[n]!.queuedAt >= this.opts.commitTimeoutMs) n++;
    if (n > 0) {
      const expired = this.queue.splice(0, n);
      const err = new StorageUnavailableError(`waited ${this.opts.commitTimeoutMs} ms for a commit to start; nothing was sent to the store`);
      for (const p of expired) {
        this.queuedBytes -= p.size;
        p.reject(err);
      }
    }
    const next = this.queue[0];
    if (next) this.expiry = setTimeout(() => this.expire(), Math.max(1, next.queuedAt + this.opts.commitTimeoutMs - now)).unref();
  }

  /**
   * Answers everything still waiting as unavailable, now: the running commits' callers (outcome
   * unknown) and what is queued (never sent). For a shutdown whose grace ends while a hung store
   * holds commits: their senders get a 503 to retry instead of a reset.
   */
  abandon(why: string): void {
    for (const run of [...this.running]) run.giveUp(new StorageUnavailableError(`${why}: the commit had not finished; outcome unknown`));
    this.failQueued(new StorageUnavailableError(`${why}: nothing was sent to the store`));
  }

  /** Answers everything queued (never sent to the store) as unavailable. */
  private failQueued(err = blockedError()): void {
    const queued = this.queue;
    this.queue = [];
    this.queuedBytes = 0;
    for (const p of queued) p.reject(err);
  }
}

const blockedError = () => new StorageUnavailableError('every commit slot is held by a commit that did not finish; nothing was sent to the store');
