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
const MAX_REMEMBERED_ABANDONED = 100;

/** better-sqlite3 binds numbers, strings, bigints, buffers and null; map the rest the obvious way. */
const bindable = (v: unknown): unknown =>
  v === undefined ? null : typeof v === 'boolean' ? (v ? 1 : 0) : v instanceof Uint8Array ? bytes(v) : v;

/**
 * The writer thread's transaction protocol. A handler transaction spans async code on the main
 * thread, but the connection lives here, so: `txBegin` runs BEGIN IMMEDIATE; while it is open,
 * every message that does not carry its tx id waits here (FIFO) and runs after COMMIT or
 * ROLLBACK — an accept batch never lands inside a handler's transaction. A transaction open
 * longer than `timeoutMs` (main side hung or gone) is rolled back, and its later ops fail.
 */
export class TxGate {
  private open: { id: number; timer: NodeJS.Timeout } | undefined;
  private readonly waiting: Msg[] = [];
  private readonly abandoned: number[] = [];
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
  ) {}

  receive(msg: Msg): void {
    if (msg.tx !== undefined) this.reply(msg.id, () => this.runInTx(msg.tx!, msg.op, msg.arg));
    else if (this.open) this.waiting.push(msg);
    else this.runFree(msg);
    this.drain();
  }

  private runFree(msg: Msg): void {
    // Set between transactions only: a transaction's commit runs with the mode it began under.
    if (this.relaxed) {
      const mode = this.relaxed.has(msg.op) ? 'NORMAL' : 'FULL';
      if (mode !== this.synchronous) {
        this.db.pragma(`synchronous = ${mode}`);
        this.synchronous = mode;
      }
    }
    this.reply(msg.id, () => {
      if (msg.op === 'txBegin') return this.begin(msg.arg as number);
      const op = this.free[msg.op];
      if (!op) throw new Error(`unknown writer op "${msg.op}"`);
      return op(msg.arg);
    });
  }

  private drain(): void {
    while (!this.open && this.waiting.length > 0) this.runFree(this.waiting.shift()!);
  }

  private begin(id: number): void {
    this.db.exec('BEGIN IMMEDIATE');
    this.open = { id, timer: setTimeout(() => this.abandon(id), this.timeoutMs) };
  }

  private abandon(id: number): void {
    if (this.open?.id !== id) return;
    this.end(false);
    this.abandoned.push(id);
    if (this.abandoned.length > MAX_REMEMBERED_ABANDONED) this.abandoned.shift();
    this.drain();
  }

  /** Closes the transaction either way; a failed COMMIT (e.g. a deferred foreign key) rolls back. */
  private end(commit: boolean): void {
    clearTimeout(this.open!.timer);
    this.open = undefined;
    try {
      if (commit) this.db.exec('COMMIT');
    } finally {
      if (this.db.inTransaction) this.db.exec('ROLLBACK');
    }
  }

  private runInTx(txId: number, op: string, arg: unknown): unknown {
    if (this.open?.id !== txId) {
      throw new Error(this.abandoned.includes(txId)
        ? `SQLite transaction was rolled back: it stayed open longer than ${this.timeoutMs} ms`
        : 'SQLite transaction is not open');
    }
    switch (op) {
      case 'commit': return this.end(true);
      case 'rollback': return this.end(false);
      case 'query': return this.query(arg as UserQuery);
    }
    const run = this.inTx[op];
    if (!run) throw new Error(`unknown transaction op "${op}"`);
    return run(arg);
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
