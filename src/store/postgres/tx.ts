import pg from 'pg';
import { StorageUnavailableError } from '../../errors.js';
import { assertStillLeased, type BatchOutcome, type EventKey, type ProcessedMarker, type Row, type StoreTx } from '../work-port.js';
import { checkIn, endBackendOf, guardCheckedOut } from './client-guard.js';
import type { TxSlots } from './tx-slots.js';
import * as W from './work-sql.js';

/**
 * What a handler may leave on its session besides its writes (releaseSavepoint): settings, role,
 * session advisory locks, cursors, LISTENs. Not its temporary tables: DISCARD TEMP fails on a
 * table with deferred trigger events pending (a deferred foreign key), and with it the batch; a
 * handler's temp table is its own to drop (README: ON COMMIT DROP).
 */
const SESSION_RESET = 'RESET ALL; RESET ROLE; SELECT pg_advisory_unlock_all(); CLOSE ALL; UNLISTEN *';

/**
 * A server-reported SQL error (it carries a SQLSTATE) propagates as is, so the engine can tell
 * a deadlock (40P01) or a serialization failure (40001) from a constraint violation. Anything
 * else — connection lost, client-side timeout — means the outcome is unknown: 503 territory.
 * SQLSTATE classes 08 (connection) and 57P (server shutting down) are the connection too.
 */
export function storageError(err: unknown): Error {
  if (err instanceof pg.DatabaseError && !/^(08|57P)/.test(err.code ?? '')) return err;
  if (err instanceof StorageUnavailableError) return err;
  return new StorageUnavailableError(`PostgreSQL: ${(err as Error).message}`, { cause: err });
}

/** A statement: the engine's own (named, prepared), or SQL text (`queryMode`: pg's, not in its types). */
type Query = string | W.Statement | { readonly text: string; readonly queryMode: 'extended' };

/**
 * A transaction on one pooled client, begun lazily (as on SQLite, sqlite/tx.ts): the batch
 * protocol's reads (`lockLeased`, `processed`) run on their own until something needs the
 * transaction, and a `finishBatch` that finds none begun (no handler touched the database)
 * is one autocommit statement — no BEGIN, row locks or COMMIT round trips. Nothing is lost by
 * reading first: the writes are guarded as ever (settles by lease owner, markers by their
 * primary key), and a row that changed hands in between is simply not settled.
 */
export class PgTx implements StoreTx {
  readonly kind = 'postgres' as const;
  private client: pg.PoolClient | undefined;
  private begun: Promise<pg.PoolClient> | undefined;
  /** finishBatch ran on its own: nothing may follow it. */
  private finished = false;
  /** The client's connection failed: it is destroyed, not returned to the pool. */
  private broken = false;
  /** Set once a statement inside the transaction ended it (see run). */
  private endedWhy: string | undefined;
  /** Removes the client's 'error' guard (guardCheckedOut) when it goes back to the pool (checkIn). */
  private unguard: () => void = () => undefined;
  /** Gives this transaction's slot back (TxSlots); set once it holds one. */
  private giveBack: () => void = () => undefined;

  constructor(private readonly pool: pg.Pool, private readonly slots: TxSlots, private readonly idleLimitMs?: number) {}

  /** Whether BEGIN was sent: `end` then owes a COMMIT or ROLLBACK. */
  get open(): boolean {
    return this.begun !== undefined;
  }

  /** When the transaction began (performance.now()): after its wait for a slot (TxSlots). */
  begunAt: number | undefined;

  async begin(): Promise<void> {
    await this.connection();
  }

  private connection(): Promise<pg.PoolClient> {
    if (this.finished) return Promise.reject(new Error('this transaction already committed with finishBatch'));
    return (this.begun ??= (async () => {
      this.giveBack = await this.slots.take();
      let client: pg.PoolClient;
      try {
        client = await this.pool.connect();
      } catch (err) {
        this.giveBack();
        throw storageError(err);
      }
      // A connection lost mid-transaction: the next query on it fails, and that surfaces.
      this.unguard = guardCheckedOut(client, () => { this.broken = true; });
      this.client = client;
      await this.exec(client, `BEGIN; ${this.ownSettings}`);
      this.begunAt = performance.now();
      return client;
    })());
  }

  /**
   * The transaction's own settings (one round trip with what they follow: one simple query). The
   * pool forces generic plans for the accept statement; the handler's own SQL gets PostgreSQL's
   * usual choice back. And the idle limit (TxOptions.idleLimitMs).
   */
  private get ownSettings(): string {
    const idle = this.idleLimitMs === undefined ? '' : `; SET LOCAL idle_in_transaction_session_timeout = ${Math.max(1, Math.ceil(this.idleLimitMs))}`;
    return `SET LOCAL plan_cache_mode = auto${idle}`;
  }

  /**
   * Ends a handler's savepoint (rolled back first when `rollback`: a handler that failed) and the
   * session state it may have left on this pooled connection, in one round trip, then sets the
   * transaction's own settings again. SET is refused by its first word (engine/tx-control.ts), but
   * `set_config()`, or a function that sets something, is not seen there: what it set outlived the
   * handler, into the batch's other events and the engine's settle, and (not local) the
   * connection's later batches. RESET ALL keeps what the connection was opened with; the role is
   * no RESET ALL setting. A session advisory lock survives even a rollback to the savepoint (it
   * stayed with the engine's connection for good, every other holder-to-be waiting on it), and a
   * temporary table or a LISTEN outlived the handler too (the next handler creating the table
   * failed); a cursor ends with it as well. Prepared statements are left alone: the driver's own are among them.
   */
  async releaseSavepoint(name: string, opts: { rollback?: boolean } = {}): Promise<void> {
    const undo = opts.rollback ? `ROLLBACK TO SAVEPOINT ${name}; ` : '';
    await this.run(`${undo}RELEASE SAVEPOINT ${name}; ${SESSION_RESET}; ${this.ownSettings}`);
  }

  /** COMMIT (or ROLLBACK after `failure`) if the transaction was begun, and release the client. */
  async end(failure?: unknown): Promise<void> {
    // A BEGIN still under way (the caller failed without awaiting its query) holds a client too:
    // left behind, it stayed checked out in its transaction for good, and the pool ran dry.
    await this.begun?.catch(() => undefined);
    const client = this.client;
    if (!client) return;
    try {
      if (failure === undefined) {
        await this.exec(client, 'COMMIT');
        return;
      }
      // A lost connection cannot be rolled back over; the server rolls back when it notices.
      this.broken ||= failure instanceof StorageUnavailableError;
      if (!this.broken) await client.query('ROLLBACK').catch(() => { this.broken = true; });
    } catch (err) {
      this.broken = true;
      throw err;
    } finally {
      checkIn(client, this.unguard, this.broken);
      // Its transaction may live on at the server, locks and all, if the link died silently.
      if (this.broken) endBackendOf(this.pool, client);
      this.client = undefined;
      this.giveBack();
    }
  }

  /**
   * One statement, always with the extended protocol (the simple one, used for SQL without
   * parameters, runs several separated by `;`): as on SQLite, and so the engine's refusal of
   * transaction control (engine/tx-control.ts) can read a statement by its first word.
   */
  async query<R extends Row = Row>(sql: string, params?: readonly unknown[]): Promise<R[]> {
    return (await this.run<R>({ text: sql, queryMode: 'extended' }, params)).rows;
  }

  private async exec<R extends Row = Row>(on: pg.Pool | pg.PoolClient, q: Query, values?: readonly unknown[]): Promise<pg.QueryResult<R>> {
    try {
      const config = typeof q === 'string' ? { text: q } : q;
      return await on.query<R>({ ...config, values: values as unknown[] | undefined });
    } catch (err) {
      throw storageError(err);
    }
  }

  private async run<R extends Row = Row>(q: Query, values?: readonly unknown[]): Promise<pg.QueryResult<R>> {
    if (this.endedWhy) throw new Error(this.endedWhy);
    const client = await this.connection();
    const r = await this.exec<R>(client, q, values);
    // Every statement here runs inside BEGIN … COMMIT, so the server must still report a
    // transaction ('T', or 'E' after an error). Idle means a statement ended it: what follows
    // would run in autocommit, markers committed beside writes rolled back or a retry's
    // writes applied twice. So the transaction is over: this statement and every later one fail.
    if ((client as unknown as { getTransactionStatus(): string | null }).getTransactionStatus() === 'I') {
      this.endedWhy = 'PostgreSQL transaction was ended by a statement inside it (COMMIT, ROLLBACK or END); nothing after it may run';
      throw new Error(this.endedWhy);
    }
    return r;
  }

  /** In the transaction if it is open, else on its own. */
  private runHere<R extends Row = Row>(q: W.Statement, values: readonly unknown[]): Promise<pg.QueryResult<R>> {
    return this.open ? this.run<R>(q, values) : this.exec<R>(this.pool, q, values);
  }

  async lockLeased(inboxIds: readonly string[], owner: string): Promise<string[]> {
    // Row locks only inside a begun transaction; before it, the read is what the guard needs.
    const q = this.open ? W.LOCK_LEASED : W.READ_LEASED;
    return (await this.runHere<{ inbox_id: string }>(q, [inboxIds, owner])).rows.map((r) => r.inbox_id);
  }

  async processed(keys: readonly EventKey[]): Promise<ProcessedMarker[]> {
    if (keys.length === 0) return [];
    const r = await this.runHere<{ provider: string; endpoint_id: string; provider_event_id: string; consumer: string }>(W.PROCESSED_FOR_EVENTS,
      [keys.map((k) => k.provider), keys.map((k) => k.endpointId), keys.map((k) => k.providerEventId)]);
    return r.rows.map((m) => ({ provider: m.provider, endpointId: m.endpoint_id, providerEventId: m.provider_event_id, consumer: m.consumer }));
  }

  async finishBatch(owner: string, outcome: BatchOutcome): Promise<number> {
    const wasOpen = this.open;
    const r = await this.runHere<{ settled: number }>(W.FINISH_BATCH, W.finishBatchValues(owner, outcome));
    if (!wasOpen) this.finished = true;
    const settled = r.rows[0]!.settled;
    if (wasOpen) assertStillLeased(settled, outcome);
    return settled;
  }
}
