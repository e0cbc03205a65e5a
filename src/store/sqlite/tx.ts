import { bytes } from '../../threads.js';
import type { BatchOutcome, EventKey, ProcessedMarker, Row, StoreTx } from '../work-port.js';

/** Posts one op to the writer thread: `inTx` ops carry this transaction's id, the others run on their own. */
export type TxSend = <T>(op: string, arg: unknown, inTx: boolean) => Promise<T>;

/** Blobs cross the thread as plain Uint8Arrays; hand the handler Buffers, as PostgreSQL does. */
function withBuffers<R extends Row>(row: R): R {
  for (const k of Object.keys(row)) if (row[k] instanceof Uint8Array) (row as Row)[k] = bytes(row[k]);
  return row;
}

/**
 * The main side of a handler transaction on SQLite; tx-gate.ts is the thread side.
 *
 * BEGIN IMMEDIATE holds the one writer, accepts included, until COMMIT, across every round
 * trip to this thread in between, so the transaction begins lazily: the batch protocol's reads
 * (`lockLeased`, `processed`) run on their own before it, and a `finishBatch` that finds no
 * transaction begun (no handler touched the database) is BEGIN … COMMIT in ONE message. Only a
 * handler's own SQL (`query`) begins it. Nothing is lost by reading first: the
 * writes are guarded as ever (settles by lease owner, markers by their primary key), and a row
 * that changed hands in between is simply not settled, as if its lease had been lost later.
 */
export class SqliteTx implements StoreTx {
  readonly kind = 'sqlite' as const;
  private begun: Promise<void> | undefined;
  /** finishBatch ran as its own transaction: nothing may follow it. */
  private finished = false;

  constructor(private readonly send: TxSend) {}

  /** Whether BEGIN was sent: the caller then owes a COMMIT or ROLLBACK. */
  get open(): boolean {
    return this.begun !== undefined;
  }

  /** When BEGIN IMMEDIATE ran (performance.now()), after the writer's earlier transactions. */
  begunAt: number | undefined;

  begin(): Promise<void> {
    if (this.finished) return Promise.reject(new Error('this transaction already committed with finishBatch'));
    return (this.begun ??= this.send<number>('txBegin', undefined, false).then((at) => {
      // The writer thread's own moment: its limit started then, not when this thread heard of it
      // (a stalled event loop would otherwise eat the margin the main-side limits keep).
      this.begunAt = Math.min(at - performance.timeOrigin, performance.now());
    }));
  }

  private async inTx<T>(op: string, arg?: unknown): Promise<T> {
    await this.begin();
    return this.send<T>(op, arg, true);
  }

  async query<R extends Row = Row>(sql: string, params: readonly unknown[] = []): Promise<R[]> {
    return (await this.inTx<R[]>('query', { sql, params })).map(withBuffers);
  }

  /** A handler's savepoint ended (rolled back first when `rollback`): SQLite has no session settings a statement could leave (PRAGMA is refused). */
  async releaseSavepoint(name: string, opts: { rollback?: boolean } = {}): Promise<void> {
    if (opts.rollback) await this.query(`ROLLBACK TO SAVEPOINT ${name}`);
    await this.query(`RELEASE SAVEPOINT ${name}`);
  }

  lockLeased(inboxIds: readonly string[], owner: string): Promise<string[]> {
    const arg = { ids: inboxIds, owner };
    return this.begun ? this.inTx('lockLeased', arg) : this.send('lockLeased', arg, false);
  }

  processed(keys: readonly EventKey[]): Promise<ProcessedMarker[]> {
    return this.begun ? this.inTx('processed', keys) : this.send('processed', keys, false);
  }

  finishBatch(owner: string, outcome: BatchOutcome): Promise<number> {
    if (this.begun) return this.inTx('finishBatch', { owner, outcome });
    if (this.finished) return Promise.reject(new Error('this transaction already committed with finishBatch'));
    this.finished = true;
    return this.send('finishBatchTx', { owner, outcome }, false);
  }
}
