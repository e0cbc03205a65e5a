import type Database from 'better-sqlite3';
import { bytes } from '../../threads.js';
import type { Ops } from './work-ops.js';

/** A message to the writer thread. `tx` names the handler transaction the op belongs to. */
export interface Msg {
  readonly id: number;
  readonly op: string;
  readonly arg?: unknown;
  readonly tx?: number;
}

export interface UserQuery {
  readonly sql: string;
  readonly params: readonly unknown[];
}

const MAX_USER_STATEMENTS = 200;

/**
 * Reads that run at once even while a handler transaction is open, between its ops (this
 * thread runs one thing at a time, and they write nothing): /readyz's ping waited behind a
 * handler's transaction, up to txTimeoutMs, and a readiness probe with a 1 s timeout took a
 * healthy server out of its load balancer. It reads the schema version, which no transaction
 * here changes.
 */
const NEVER_WAITS: ReadonlySet<string> = new Set(['ping']);
const MAX_REMEMBERED_ABANDONED = 100;

/**
 * The wait between tries of an op that found the file locked. Short: another process working
 * through a backlog leaves the lock free only for moments between its transactions, and SQLite's
 * own busy handler, trying every 100 ms after its first 0.3 s, seldom met one: a `serve` beside a
 * `work` draining a backlog waited out its busy timeout (503) behind transactions of ~100 ms each.
 * A failed try is a lock request that returns at once.
 */
const LOCK_RETRY_MS = 1;
const isBusy = (err: unknown): boolean => {
  const code = (err as { code?: unknown } | null)?.code;
  return typeof code === 'string' && code.startsWith('SQLITE_BUSY');
};

/** better-sqlite3 binds numbers, strings, bigints, buffers and null; map the rest the obvious way. */
const bindable = (v: unknown): unknown =>
  v === undefined ? null : typeof v === 'boolean' ? (v ? 1 : 0) : v instanceof Uint8Array ? bytes(v) : v;

/**
 * The writer thread's transaction protocol. A handler transaction spans async code on the main
 * thread, but the connection lives here, so: `txBegin` runs BEGIN IMMEDIATE; while it is open,
 * every message that does not carry its tx id waits here (FIFO) and runs after COMMIT or
 * ROLLBACK — an accept batch never lands inside a handler's transaction. A transaction open
 * longer than `timeoutMs` (main side hung or gone) is rolled back, and its later ops fail.
 *
 * Another process's write lock (a `work` process's handler transaction on the same file) is
 * waited for here, not in SQLite: the connection's busy_timeout is 0, and an op that finds the
 * file locked (SQLITE_BUSY) is tried again on a timer (LOCK_RETRY_MS), as SQLite's own busy handler
 * would, until `busyTimeoutMs` from its arrival (time behind this process's own transactions not
 * counted; see waiting). SQLite's handler slept inside the op, this thread answered nothing
 * meanwhile, and /readyz's ping waited behind the accept for as long as the other process held
 * the lock (its readiness probe timed out). The ops behind it wait as they do behind an open
 * transaction.
 */
export class TxGate {
  private open: { id: number; timer: NodeJS.Timeout } | undefined;
  /** An op is waiting for another process's write lock (SQLITE_BUSY), tried again after LOCK_RETRY_MS. */
  private blocked = false;
  /**
   * Ops waiting their turn, with when their wait for another process's lock began: their arrival,
   * or the end of this process's own transaction they waited behind (that time does not count).
   * Counted from each op's own first try instead, the ops queued behind a blocked one waited out
   * their busy timeouts one after another: a shutdown beside a `work` holding the lock took ~18 s
   * (a settle's 6 s, then an accept's, then the relay's claim's).
   */
  private readonly waiting: { readonly msg: Msg; since: number }[] = [];
  /** Transactions that ended without their COMMIT or ROLLBACK (timed out, or SQLite ended them): why, by id. */
  private readonly ended = new Map<number, string>();
  /** The handlers' own SQL, prepared once; least recently used out first. */
  private readonly userStatements = new Map<string, Database.Statement>();
  private synchronous: 'FULL' | 'NORMAL' = 'FULL';

  /**
   * `relaxed`: the ops (and transactions begun with txBegin) that commit with synchronous =
   * NORMAL; every other op — accepts above all — runs with FULL. null: everything FULL.
   */
  constructor(
    private readonly db: Database.Database,
    private readonly timeoutMs: number,
    private readonly free: Ops,
    private readonly inTx: Ops,
    private readonly relaxed: ReadonlySet<string> | null,
    private readonly reply: (id: number, run: () => unknown) => void,
    /** How long an op may wait for another process's write lock (the URL's busyTimeoutMs). */
    private readonly busyTimeoutMs = 0,
  ) {}

  receive(msg: Msg): void {
    const busy = this.open !== undefined || this.blocked;
    if (msg.tx !== undefined) this.reply(msg.id, () => this.runInTx(msg.tx!, msg.op, msg.arg));
    else if (busy && NEVER_WAITS.has(msg.op)) this.reply(msg.id, () => this.free[msg.op]!(msg.arg));
    else if (busy) this.waiting.push({ msg, since: performance.now() });
    else this.runFree(msg);
    this.drain();
  }

  /** `since`: when its wait for another process's lock began (see waiting). */
  private runFree(msg: Msg, since = performance.now()): void {
    // Set between transactions only: a transaction's commit runs with the mode it began under.
    if (this.relaxed) {
      const mode = this.relaxed.has(msg.op) ? 'NORMAL' : 'FULL';
      if (mode !== this.synchronous) {
        this.db.pragma(`synchronous = ${mode}`);
        this.synchronous = mode;
      }
    }
    let outcome: { ok: true; value: unknown } | { ok: false; err: unknown };
    try {
      outcome = { ok: true, value: this.runOp(msg) };
    } catch (err) {
      // Locked by another process: nothing was done (each op takes the lock first, or is one
      // statement), so it is tried again later, and this thread answers meanwhile.
      if (isBusy(err) && performance.now() - since + LOCK_RETRY_MS <= this.busyTimeoutMs) {
        this.blocked = true;
        setTimeout(() => {
          this.blocked = false;
          this.runFree(msg, since);
          this.drain();
        }, LOCK_RETRY_MS);
        return;
      }
      outcome = { ok: false, err };
    }
    this.reply(msg.id, () => {
      if (!outcome.ok) throw outcome.err;
      return outcome.value;
    });
  }

  private runOp(msg: Msg): unknown {
    if (msg.op === 'txBegin') return this.begin(msg.arg as number);
    const op = this.free[msg.op];
    if (!op) throw new Error(`unknown writer op "${msg.op}"`);
    return op(msg.arg);
  }

  private drain(): void {
    while (!this.open && !this.blocked && this.waiting.length > 0) {
      const { msg, since } = this.waiting.shift()!;
      this.runFree(msg, since);
    }
  }

  /** Returns when the transaction's time limit started, as a timeOrigin-based time (threads differ in origin). */
  private begin(id: number): number {
    this.db.exec('BEGIN IMMEDIATE');
    this.open = { id, timer: setTimeout(() => this.abandon(id), this.timeoutMs) };
    return performance.timeOrigin + performance.now();
  }

  private abandon(id: number): void {
    if (this.open?.id !== id) return;
    this.end(false);
    this.remember(id, `SQLite transaction was rolled back: it stayed open longer than ${this.timeoutMs} ms`);
    this.drain();
  }

  /** This process's own transaction ended: the ops that waited behind it start their lock wait now. */
  private waitedBehindOwn(): void {
    const now = performance.now();
    for (const w of this.waiting) w.since = now;
  }

  private remember(id: number, why: string): void {
    this.ended.set(id, why);
    if (this.ended.size > MAX_REMEMBERED_ABANDONED) this.ended.delete(this.ended.keys().next().value!);
  }

  /** Closes the transaction either way; a failed COMMIT (e.g. a deferred foreign key) rolls back. */
  private end(commit: boolean): void {
    clearTimeout(this.open!.timer);
    this.open = undefined;
    this.waitedBehindOwn();
    try {
      if (commit) this.db.exec('COMMIT');
    } finally {
      if (this.db.inTransaction) this.db.exec('ROLLBACK');
    }
  }

  private runInTx(txId: number, op: string, arg: unknown): unknown {
    if (this.open?.id !== txId) throw new Error(this.ended.get(txId) ?? 'SQLite transaction is not open');
    switch (op) {
      case 'commit': return this.end(true);
      case 'rollback': return this.end(false);
    }
    const run = op === 'query' ? (q: unknown) => this.query(q as UserQuery) : this.inTx[op];
    if (!run) throw new Error(`unknown transaction op "${op}"`);
    try {
      return run(arg);
    } catch (err) {
      throw this.endedBy(txId, err) ?? err;
    } finally {
      this.endedBy(txId, undefined);
    }
  }

  /**
   * SQLite ends a transaction itself after some errors (SQLITE_FULL, SQLITE_IOERR, SQLITE_NOMEM, a
   * trigger's RAISE(ROLLBACK)), and a handler's own COMMIT or ROLLBACK ends it too. Left open here,
   * the transaction's later ops ran in autocommit mode: the next handler's SAVEPOINT … RELEASE and
   * finishBatch committed on their own, settling PROCESSED events whose writes had been rolled
   * back (a mutation never applied) and committing writes a retry then applied again. So the
   * transaction is over: this op and every later one of it fail. Returns the error to throw, if
   * the transaction ended just now.
   */
  private endedBy(txId: number, err: unknown): Error | undefined {
    if (this.open?.id !== txId || this.db.inTransaction) return undefined;
    clearTimeout(this.open.timer);
    this.open = undefined;
    this.waitedBehindOwn();
    const e = err as { message?: string; code?: string } | undefined;
    const why = e === undefined
      ? 'SQLite transaction was ended by a statement inside it (COMMIT, ROLLBACK or END); nothing after it may run'
      : `SQLite rolled the transaction back after an error: ${e.message ?? String(err)}`;
    this.remember(txId, why);
    return Object.assign(new Error(why), { code: e?.code });
  }

  private query(q: UserQuery): unknown[] {
    let s = this.userStatements.get(q.sql);
    if (s) this.userStatements.delete(q.sql);
    else s = this.db.prepare(q.sql);
    this.userStatements.set(q.sql, s);
    if (this.userStatements.size > MAX_USER_STATEMENTS) this.userStatements.delete(this.userStatements.keys().next().value!);
    const params = q.params.map(bindable);
    return s.reader ? s.all(params) : (s.run(params), []);
  }
}
