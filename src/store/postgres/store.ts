import pg from 'pg';
import { MigrationError, StorageUnavailableError } from '../../errors.js';
import { NIL_UUID, uuidv7Floor } from '../../crypto/ids.js';
import { acceptUnique } from '../dedupe.js';
import { assertSchemaCurrent, migrationStep, MIGRATIONS } from '../migrations.js';
import type { AcceptRecord, AcceptResult, InboxRow, InboxStore, PurgeableStatus, StoredPayload, TransmissionBinding } from '../port.js';
import {
  eventListLimit, toBacklogStat, toClaimedInbox, toEffectKeyUsage, toEffectRow, toEffectToReseal, toInboxDetail, toInboxRow,
  toFailedEffect, toOutboxClaim, toParkedOutbox, toPayloadKeyUsage, toQueueStats, toResealRef, toStoredPayload, retryRefusal, type RawRow,
} from '../rows.js';
import type {
  BacklogStat, ClaimedInbox, EffectRow, EffectKeyUsage, EffectSettlement, EventFilter, FailedEffect, InboxDetail, OutboxClaim, OutboxSettle, ParkedOutbox, PayloadKeyUsage, QueueStats,
  Resealed, ResealedEffect, ResealRef, RetryOutcome, SealedSamples, StoreTx, EffectToReseal, TxOptions,
} from '../work-port.js';
import { acceptValues, COLS, insertUnique, queryOn, warmPool } from './accept.js';
import type { BindByReferenceQuery } from './bind-by-reference.js';
import { checkIn, closedWithin, endBackendOf, guardCheckedOut } from './client-guard.js';
import { PgListener } from './listener.js';
import { inLockOrder } from './lock-order.js';
import { Notifier } from './notifier.js';
import * as SQL from './sql.js';
import { fillSessionDefaults } from './session-defaults.js';
import { TxSlots } from './tx-slots.js';
import { PgTx } from './tx.js';
import * as W from './work-sql.js';

export interface PostgresOptions {
  readonly poolSize?: number;
  /** Connections for the processing engine (default 4). */
  readonly workPoolSize?: number;
  /** Client-side bound on one statement; past it the outcome is unknown → 503. */
  readonly queryTimeoutMs?: number;
  readonly connectTimeoutMs?: number;
  /** false: the engine's connections commit with synchronous_commit = off (accepts never do). */
  readonly durableEngineCommits?: boolean;
  /** How long the new-work listener waits, silent, before it checks its connection, and then for the answer (default LIVENESS_MS; tests shorten it). */
  readonly listenLivenessMs?: number;
}

/** The text a notice's advisory lock hashes (SQL.LOCK_NOTICE_KEY): notices are locked in its order. */
const noticeLockKey = (r: AcceptRecord): string => `${r.provider}/${r.endpointId}/${r.coalesceKey}`;

/** Inbox ids are UUIDs: anything else cannot name a row (and must not reach a uuid cast as an error). */
const UUID_RE = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/**
 * How each pool plans (test/store/postgres-plans.test.ts holds both to their indexes).
 * Accept: accept statements differ only in their row count and are prepared once per count; a
 * generic plan skips re-planning thousands of parameters on every execution. Its other
 * statements are written to plan as index lookups whatever the tables' size (SELECT_WINNERS).
 * Work: the engine's statements are planned at each call, for the tables as they are then. A
 * generic plan is made once, at a statement's first use, on a new database for empty tables,
 * where a full scan is cheapest; kept, it read the whole inbox on every claim (on a server
 * without autovacuum, for good). A few plans per batch of events cost little.
 */
export const ACCEPT_PLANS = '-c plan_cache_mode=force_generic_plan';
export const WORK_PLANS = '-c plan_cache_mode=force_custom_plan';

/**
 * A 2xx is sent after the accept's COMMIT returns, so that COMMIT must wait for the WAL flush
 * whatever the database or role says (`ALTER DATABASE … SET synchronous_commit = off` would
 * otherwise make every 2xx a promise a crash can break). `on` also waits for a synchronous
 * standby when one is configured.
 */
const DURABLE = '-c synchronous_commit=on';

/** Migrations are bounded by the server's own statement_timeout, if any, not by ours (the most setTimeout takes). */
const MIGRATION_TIMEOUT_MS = 2_147_483_647;

/**
 * The connection string and the startup options to open it with: `ours` after the URL's own
 * `options` parameter, if it has one (`?options=-c search_path=…`). The driver lets a connection
 * string's parameters override the config object's, so an `options` left in the URL replaced
 * ours whole: the accept connections then committed with the database's synchronous_commit
 * (`off`: a 2xx a crash can break). PostgreSQL applies `-c` settings in order, so ours, last, win.
 */
export function withStartupOptions(url: string, ours: string): { connectionString: string; options: string } {
  const q = url.indexOf('?');
  if (q < 0) return { connectionString: url, options: ours };
  const params = new URLSearchParams(url.slice(q + 1));
  const own = params.get('options');
  if (own === null) return { connectionString: url, options: ours };
  params.delete('options');
  const rest = params.toString();
  return { connectionString: rest ? `${url.slice(0, q)}?${rest}` : url.slice(0, q), options: own.trim() ? `${own} ${ours}` : ours };
}

/**
 * PostgreSQL adapter. Accept = one statement (one implicit transaction) per batch, on the event
 * loop. (A separate accept thread for batches of 16+ events, kept until 2026-12-03, made the
 * tail worse on two busy cores: at 2,000 req/s p99 15.9-64.9 ms with it against 12.0-50.7 without,
 * 12 of 14 alternating pairs favouring without, and no better at 4,000: bench/RESULTS.md.)
 */
export class PostgresStore implements InboxStore {
  readonly kind = 'postgres' as const;
  /**
   * Up to 4 batches at once (the accept pool's size), each past the first only while a quarter of
   * maxBatch waits: 7,000 req/s passed 4 of 4 ladder steps at 4 and 1 of 3 at 2. No linger: here
   * it raised p50 at 2,000 req/s by 4-6 ms for no better p99 (bench/RESULTS.md, 2026-11-30 and
   * 2026-12-01).
   */
  readonly groupCommitDefaults = { maxInFlight: 4, maxWaitMs: 0 };
  /** Accept batches, notices, NOTIFYs, readiness and reads. */
  readonly pool: pg.Pool;
  /**
   * The processing engine's own connections (claims, settles, handler transactions), so a
   * busy engine never makes an accept wait for a connection: 2xx latency stays the ingress's.
   */
  private readonly workPool: pg.Pool;
  /** Handler transactions' hold on the work pool (tx-slots.ts). */
  private readonly txSlots: TxSlots;
  private readonly listener: PgListener;
  private readonly notifier = new Notifier(() => this.pool.query(SQL.NOTIFY_NEW_WORK));
  private closed = false;
  private closing: Promise<void> | undefined;
  /** Both pools' connections until their sockets close: close() waits for them, and cuts the ones a hung server holds. */
  private readonly connections = new Set<pg.PoolClient>();

  constructor(url: string, opts: PostgresOptions = {}) {
    this.listener = new PgListener({
      connectionString: url, connectionTimeoutMillis: opts.connectTimeoutMs ?? 3000, keepAlive: true, application_name: 'webhook-inbox-listen',
    }, SQL.NEW_WORK_CHANNEL, opts.listenLivenessMs);
    const poolConfig = {
      connectionTimeoutMillis: opts.connectTimeoutMs ?? 3000,
      query_timeout: opts.queryTimeoutMs ?? 10_000,
      keepAlive: true,
      application_name: 'webhook-inbox',
      ...withStartupOptions(url, `${ACCEPT_PLANS} ${DURABLE}`),
      onConnect: fillSessionDefaults,
    };
    // The accept connections stay open while idle (min = max), and with them their prepared statements (warm).
    const size = opts.poolSize ?? 4;
    this.pool = new pg.Pool({ ...poolConfig, max: size, min: size });
    const workSize = opts.workPoolSize ?? 4;
    this.txSlots = new TxSlots(Math.max(1, workSize - 1));
    this.workPool = new pg.Pool({
      ...poolConfig,
      max: workSize,
      application_name: 'webhook-inbox-work',
      // Engine commits need not wait for the WAL flush (see WorkersConfig.durableCommits): a lost
      // one is redone, while an accept's flush must never queue behind them.
      ...withStartupOptions(url, opts.durableEngineCommits === false ? `${WORK_PLANS} -c synchronous_commit=off` : `${WORK_PLANS} ${DURABLE}`),
    });
    // An idle client losing its connection must not crash the process; the next query reconnects.
    this.pool.on('error', () => undefined);
    this.workPool.on('error', () => undefined);
    // Nor one being handed out. A backend terminated just after it connected sends its FATAL in the
    // same read as its first ReadyForQuery: the parser reports it synchronously after pg-pool has
    // taken its idle listener off and before the caller's continuation can add one, and an 'error'
    // with no listener ended the process (seen terminating `work` backends under load). Each
    // client keeps a listener for good; its queries still fail, and the pool still drops it.
    for (const p of [this.pool, this.workPool]) {
      p.on('connect', (client: pg.PoolClient) => {
        client.on('error', () => undefined);
        this.connections.add(client);
        client.connection.stream.once('close', () => this.connections.delete(client));
      });
    }
  }

  /** A query on a pool (the accept's by-reference Bind included), a driver error as StorageUnavailableError. */
  private async query<R extends pg.QueryResultRow>(config: pg.QueryConfig | BindByReferenceQuery, pool: pg.Pool = this.pool): Promise<pg.QueryResult<R>> {
    try {
      return await queryOn(pool)<R>(config);
    } catch (err) {
      throw new StorageUnavailableError(`PostgreSQL: ${(err as Error).message}`, { cause: err });
    }
  }

  async migrate(): Promise<number[]> {
    let client: pg.PoolClient;
    try {
      client = await this.pool.connect();
    } catch (err) {
      throw new StorageUnavailableError(`PostgreSQL: ${(err as Error).message}`, { cause: err });
    }
    const unguard = guardCheckedOut(client);
    // A migration, or the wait for another server's, may take longer than an accept may: under the
    // pool's query timeout (commitTimeoutMs) a large table's migration failed at every start.
    const run = <R extends pg.QueryResultRow = { version: number }>(text: string, values?: unknown[]) => {
      const config: pg.QueryConfig & { query_timeout: number } = { text, values, query_timeout: MIGRATION_TIMEOUT_MS }; // the driver reads it; its types omit it
      return client.query<R>(config);
    };
    let failed: Error | undefined;
    let step = 'the schema_migrations table';
    try {
      await run('BEGIN');
      // Two servers starting together must not both migrate.
      await run("SELECT pg_advisory_xact_lock(hashtext('webhook-inbox:migrations'))");
      // Created only when missing from the search_path, as every later statement finds it. CREATE TABLE
      // IF NOT EXISTS asks for CREATE on the schema even when the table is there (a role that may only
      // read and write, on a schema its owner migrated, failed every start), and looks only in the
      // schema it would create in: a role with a schema of its own first on the path ("$user") got an
      // empty copy there, every migration ran again into it, and the rows in public were out of sight.
      // The lock above makes look-then-create exact.
      const { rows: [table] } = await run<{ present: boolean }>("SELECT to_regclass('schema_migrations') IS NOT NULL AS present");
      if (!table?.present) {
        await run(`CREATE TABLE schema_migrations (
          version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())`);
      }
      const { rows } = await run('SELECT version FROM schema_migrations');
      const applied = new Set(rows.map((r) => r.version));
      const now: number[] = [];
      for (const m of MIGRATIONS) {
        if (applied.has(m.version)) continue;
        step = migrationStep(m);
        await run(m.postgres);
        await run('INSERT INTO schema_migrations (version, name) VALUES ($1, $2)', [m.version, m.name]);
        now.push(m.version);
      }
      step = 'the commit';
      await run('COMMIT');
      return now;
    } catch (err) {
      failed = err as Error;
      // A COMMIT whose reply was lost may have committed: say so, not "nothing was applied".
      const outcome = step === 'the commit'
        ? "the commit's outcome is unknown (it may have applied every pending migration, or none): run migrate again, it applies only what is missing"
        : 'nothing was applied (every pending migration runs in one transaction)';
      throw new MigrationError(`PostgreSQL: ${step} failed: ${failed.message}; ${outcome}`, { cause: err });
    } finally {
      // Discarded after a failure, as in acceptWithNotices: closing it rolls the transaction back.
      checkIn(client, unguard, failed);
    }
  }

  acceptBatch(records: readonly AcceptRecord[]): Promise<AcceptResult[]> {
    return acceptUnique(records, (unique) => (unique.every((r) => r.coalesceKey === undefined) ? this.acceptEvents(unique) : this.acceptWithNotices(unique)));
  }

  /**
   * A batch holding notices (rare, rate-limited), in ONE transaction on one connection: each
   * notice under its key's advisory lock (so two concurrent notices cannot both miss each other,
   * a row with the same key still PENDING answering it; else a new row), then the events'
   * statement. A batch that fails (a notice's lock held by another process's stalled notice) is
   * answered 503 to every caller, and then none of its records may be stored: each notice in a
   * transaction of its own had committed the ones before the failure, and their senders were told
   * 503 for rows that were there. Locks are taken in key order, so batches cannot deadlock.
   */
  private async acceptWithNotices(unique: AcceptRecord[]): Promise<AcceptResult[]> {
    if (this.closed) throw new StorageUnavailableError('store is closed');
    let client: pg.PoolClient;
    try {
      client = await this.pool.connect();
    } catch (err) {
      throw new StorageUnavailableError(`PostgreSQL: ${(err as Error).message}`, { cause: err });
    }
    const unguard = guardCheckedOut(client);
    let failed: Error | undefined;
    try {
      await client.query('BEGIN');
      const byId = new Map<string, AcceptResult>();
      const notices = unique.filter((r) => r.coalesceKey !== undefined);
      for (const r of inLockOrder(notices, noticeLockKey)) byId.set(r.inboxId, await this.acceptNotice(client, r));
      const events = unique.filter((r) => r.coalesceKey === undefined);
      const accepted = events.length > 0 ? await insertUnique(queryOn(client), events) : { results: [], inserted: false };
      events.forEach((r, i) => byId.set(r.inboxId, accepted.results[i]!));
      await client.query('COMMIT');
      if (accepted.inserted || notices.some((r) => !byId.get(r.inboxId)!.duplicate)) this.notifier.poke();
      return unique.map((r) => byId.get(r.inboxId)!);
    } catch (err) {
      failed = err as Error;
      throw err instanceof StorageUnavailableError ? err : new StorageUnavailableError(`PostgreSQL: ${failed.message}`, { cause: err });
    } finally {
      // Never back to the pool after a failure, and no ROLLBACK sent: closing the connection rolls
      // the transaction back. A statement that timed out client-side is still running, and a
      // ROLLBACK queued behind it could time out too (a second wait before the 503), leaving the
      // connection in this transaction: the next accept on it returned rows that never committed.
      checkIn(client, unguard, failed);
      // A link that died silently left the transaction, and its keys' advisory locks, at the server.
      if (failed) endBackendOf(this.pool, client);
    }
  }

  /** One notice, inside acceptWithNotices' transaction: a row with its key still PENDING answers it; otherwise a new row. */
  private async acceptNotice(client: pg.PoolClient, r: AcceptRecord): Promise<AcceptResult> {
    await client.query(SQL.LOCK_NOTICE_KEY, [r.provider, r.endpointId, r.coalesceKey]);
    const pending = await client.query<{ inbox_id: string }>(SQL.PENDING_NOTICE, [r.provider, r.endpointId, r.coalesceKey]);
    if (pending.rows[0]) return { inboxId: pending.rows[0].inbox_id, duplicate: true };
    const inserted = await client.query<{ inbox_id: string }>(SQL.acceptStatement(1, COLS), acceptValues(r));
    if (inserted.rows.length !== 1) throw new Error('a notice id was not unique');
    await client.query(SQL.MARK_NOTICE, [r.inboxId, r.coalesceKey]);
    return { inboxId: r.inboxId, duplicate: false };
  }

  /** Events with distinct keys, in one statement. */
  private async acceptEvents(records: AcceptRecord[]): Promise<AcceptResult[]> {
    if (this.closed) throw new StorageUnavailableError('store is closed');
    const { results, inserted } = await insertUnique((q) => this.query(q), records);
    if (inserted) this.notifier.poke();
    return results;
  }

  async bindTransmissions(ts: readonly TransmissionBinding[]): Promise<boolean[]> {
    if (this.closed) throw new StorageUnavailableError('store is closed');
    const key = (provider: string, transmissionId: string) => JSON.stringify([provider, transmissionId]);
    const held = new Map<string, Buffer>();
    const inserted = await this.query<{ provider: string; transmission_id: string; payload_hash: Buffer }>({
      ...SQL.BIND_TRANSMISSIONS,
      values: [ts.map((t) => t.provider), ts.map((t) => t.endpointId), ts.map((t) => t.transmissionId), ts.map((t) => t.payloadHash), ts.map((t) => t.receivedAtMs)],
    });
    for (const r of inserted.rows) held.set(key(r.provider, r.transmission_id), r.payload_hash);
    const unseen = ts.filter((t) => !held.has(key(t.provider, t.transmissionId)));
    if (unseen.length > 0) {
      const { rows } = await this.query<{ provider: string; transmission_id: string; payload_hash: Buffer }>({
        ...SQL.READ_TRANSMISSIONS, values: [unseen.map((t) => t.provider), unseen.map((t) => t.transmissionId)],
      });
      for (const r of rows) held.set(key(r.provider, r.transmission_id), r.payload_hash);
    }
    return ts.map((t) => {
      const bytes = held.get(key(t.provider, t.transmissionId));
      // A binding is pruned only once every request under it is stale (refused before this), so
      // one that conflicted is there to read.
      if (bytes === undefined) throw new StorageUnavailableError('a transmission binding conflicted but cannot be read');
      return bytes.equals(t.payloadHash);
    });
  }

  async pruneTransmissions(provider: string, receivedBeforeMs: number, limit: number): Promise<number> {
    if (this.closed) throw new StorageUnavailableError('store is closed');
    return (await this.query({ ...SQL.PRUNE_TRANSMISSIONS, values: [provider, receivedBeforeMs, limit] })).rowCount ?? 0;
  }

  async purgePayloads(status: PurgeableStatus, receivedBeforeMs: number, afterPayloadId: string | undefined, limit: number): Promise<{ deleted: number; last: string | undefined }> {
    if (this.closed) throw new StorageUnavailableError('store is closed');
    const values = [afterPayloadId ?? NIL_UUID, uuidv7Floor(receivedBeforeMs), receivedBeforeMs, limit, status];
    const { rows: [r] } = await this.query<{ deleted: number; last: string | null }>({ ...SQL.PURGE_PAYLOADS, values });
    return { deleted: r!.deleted, last: r!.last ?? undefined };
  }

  /**
   * Opens every accept connection and prepares on each the statements of the batch sizes it may
   * run, up to `maxBatch`: a restart under load otherwise queued its first second of requests
   * behind connections and first executions (bench/RESULTS.md, 2026-12-01 "cold start").
   */
  async warm(maxBatch: number): Promise<void> {
    await warmPool(this.pool, SQL.acceptSizesUpTo(maxBatch));
  }

  async ping(): Promise<void> {
    assertSchemaCurrent(await this.schemaVersion());
  }

  async schemaVersion(): Promise<number | null> {
    try {
      return (await this.query<{ v: number | null }>({ text: 'SELECT max(version) AS v FROM schema_migrations' })).rows[0]?.v ?? null;
    } catch (err) {
      if ((err as { cause?: { code?: string } }).cause?.code !== '42P01') throw err; // undefined_table: never migrated
      return null;
    }
  }

  async getInbox(inboxId: string): Promise<InboxRow | null> {
    const { rows } = await this.query<Record<string, unknown>>({ text: SQL.SELECT_INBOX, values: [inboxId] });
    return rows[0] ? toInboxRow(rows[0]) : null;
  }

  async getPayload(payloadId: string): Promise<StoredPayload | null> {
    return UUID_RE.test(payloadId) ? (await this.readPayloads([payloadId]))[0] ?? null : null;
  }

  async countRows(): Promise<{ inbox: number; outbox: number; payload: number }> {
    const { rows } = await this.query<{ inbox: string; outbox: string; payload: string }>({ text: SQL.COUNT_ROWS });
    const r = rows[0]!;
    return { inbox: Number(r.inbox), outbox: Number(r.outbox), payload: Number(r.payload) };
  }

  async listInboxIds(): Promise<string[]> {
    const { rows } = await this.query<{ inbox_id: string }>({ text: 'SELECT inbox_id::text FROM webhook_inbox ORDER BY inbox_id' });
    return rows.map((r) => r.inbox_id);
  }

  onNewWork(fn: () => void, lost?: (reason: Error) => void): () => void {
    return this.listener.subscribe(fn, lost);
  }

  async databaseNowMs(): Promise<number> {
    const { rows } = await this.query<{ ms: number }>({ text: 'SELECT (extract(epoch FROM clock_timestamp()) * 1000)::float8 AS ms' }, this.workPool);
    return rows[0]!.ms;
  }

  private async rows(q: W.Statement | { text: string }, values: unknown[] = []): Promise<RawRow[]> {
    return (await this.query<RawRow>({ ...q, values }, this.workPool)).rows;
  }

  async claimInbox(n: number, owner: string, leaseMs: number, nowMs: number): Promise<ClaimedInbox[]> {
    return (await this.rows(W.CLAIM_INBOX, [n, owner, nowMs, nowMs + leaseMs])).map(toClaimedInbox);
  }

  async readPayloads(payloadIds: readonly string[], maxBytes = Number.MAX_SAFE_INTEGER): Promise<StoredPayload[]> {
    if (payloadIds.length === 0) return [];
    return (await this.rows(W.READ_PAYLOADS, [payloadIds, maxBytes])).map(toStoredPayload);
  }

  async extendInboxLeases(inboxIds: readonly string[], owner: string, leaseUntilMs: number): Promise<void> {
    if (inboxIds.length > 0) await this.query({ ...W.EXTEND_INBOX_LEASES, values: [inboxIds, owner, leaseUntilMs] }, this.workPool);
  }

  async transaction<T>(fn: (tx: StoreTx) => Promise<T>, opts?: TxOptions): Promise<T> {
    const tx = new PgTx(this.workPool, this.txSlots, opts?.idleLimitMs);
    let result: T;
    try {
      result = await fn(tx);
    } catch (err) {
      await tx.end(err);
      throw err;
    }
    await tx.end();
    return result;
  }

  async claimEffects(n: number, owner: string, leaseMs: number, nowMs: number): Promise<EffectRow[]> {
    return (await this.rows(W.CLAIM_EFFECTS, [n, owner, nowMs, nowMs + leaseMs])).map(toEffectRow);
  }

  async settleEffect(effectId: string, owner: string, s: EffectSettlement): Promise<boolean> {
    return (await this.query({ ...W.SETTLE_EFFECT, values: [effectId, owner, ...W.settleEffectValues(s)] }, this.workPool)).rowCount === 1;
  }

  async listEffects(inboxId: string): Promise<EffectRow[]> {
    if (!UUID_RE.test(inboxId)) return [];
    return (await this.rows(W.LIST_EFFECTS, [inboxId])).map(toEffectRow);
  }

  async listFailedEffects(limit: number): Promise<FailedEffect[]> {
    return (await this.rows(W.LIST_FAILED_EFFECTS, [limit])).map(toFailedEffect);
  }

  retryFailedEffects(effectIds: readonly string[] | null, nowMs: number): Promise<number> {
    return this.dueAgain(W.RETRY_FAILED_EFFECTS, effectIds, nowMs);
  }

  async claimOutbox(n: number, owner: string, leaseMs: number, nowMs: number): Promise<OutboxClaim[]> {
    return (await this.rows(W.CLAIM_OUTBOX, [n, owner, nowMs, nowMs + leaseMs])).map(toOutboxClaim);
  }

  async extendOutboxLeases(outboxIds: readonly string[], owner: string, leaseUntilMs: number): Promise<void> {
    if (outboxIds.length > 0) await this.query({ ...W.EXTEND_OUTBOX_LEASES, values: [outboxIds, owner, leaseUntilMs] }, this.workPool);
  }

  async settleOutboxBatch(owner: string, settles: readonly OutboxSettle[]): Promise<string[]> {
    if (settles.length === 0) return [];
    return (await this.rows(W.SETTLE_OUTBOX_BATCH, W.settleOutboxBatchValues(owner, settles))).map((r) => String(r.outbox_id));
  }

  async listParkedOutbox(limit: number): Promise<ParkedOutbox[]> {
    return (await this.rows(W.LIST_PARKED_OUTBOX, [limit])).map(toParkedOutbox);
  }

  requeueParkedOutbox(outboxIds: readonly string[] | null, nowMs: number): Promise<number> {
    return this.dueAgain(W.REQUEUE_PARKED_OUTBOX, outboxIds, nowMs);
  }

  /**
   * An operator's requeue: `statement` ($1 ids, NULL = every row it selects; $2 now) on the rows of
   * `ids` (null: all). Ids that are not UUIDs name no row (and must not reach a uuid cast as an error).
   */
  private async dueAgain(statement: pg.QueryConfig, ids: readonly string[] | null, nowMs: number): Promise<number> {
    const valid = ids?.filter((id) => UUID_RE.test(id)) ?? null;
    if (valid?.length === 0) return 0;
    return (await this.query({ ...statement, values: [valid, nowMs] }, this.workPool)).rowCount ?? 0;
  }

  async listEvents(filter: EventFilter): Promise<InboxDetail[]> {
    if (filter.before !== undefined && !UUID_RE.test(filter.before)) return [];
    const { text, values } = W.listEventsQuery(filter, eventListLimit(filter.limit));
    return (await this.rows({ text }, values)).map(toInboxDetail);
  }

  async getEvent(inboxId: string): Promise<InboxDetail | null> {
    if (!UUID_RE.test(inboxId)) return null;
    const [row] = await this.rows(W.GET_EVENT, [inboxId]);
    return row ? toInboxDetail(row) : null;
  }

  async retryFailed(inboxId: string, nowMs: number): Promise<RetryOutcome> {
    if (!UUID_RE.test(inboxId)) return 'not_found';
    if ((await this.rows(W.RETRY_FAILED, [inboxId, nowMs])).length > 0) return 'requeued';
    return retryRefusal((await this.rows(W.INBOX_STATE, [inboxId]))[0]);
  }

  async requeueFailed(reasons: readonly string[], nowMs: number): Promise<number> {
    if (reasons.length === 0) return 0;
    return (await this.query({ ...W.REQUEUE_FAILED, values: [reasons, nowMs] }, this.workPool)).rowCount ?? 0;
  }

  async backlog(): Promise<BacklogStat[]> {
    return (await this.rows(W.BACKLOG)).map(toBacklogStat);
  }

  async queueStats(): Promise<QueueStats> {
    return toQueueStats(await this.rows(W.QUEUE_STATS));
  }

  async payloadKeyUsage(): Promise<PayloadKeyUsage[]> {
    return (await this.rows(W.PAYLOAD_KEY_USAGE)).map(toPayloadKeyUsage);
  }

  async payloadsToReseal(keyId: string, afterPayloadId: string | null, limit: number): Promise<ResealRef[]> {
    if (afterPayloadId !== null && !UUID_RE.test(afterPayloadId)) throw new Error(`not a payload id: ${afterPayloadId}`);
    return (await this.rows(W.PAYLOADS_TO_RESEAL, [keyId, afterPayloadId, limit])).map(toResealRef);
  }

  async newestSealedUnder(keyId: string, sealedPrefix: string, limit: number): Promise<SealedSamples> {
    const [payloads, effects] = await Promise.all([this.rows(W.NEWEST_PAYLOAD_UNDER, [keyId, limit]), this.rows(W.NEWEST_EFFECT_UNDER, [sealedPrefix, limit])]);
    return { payloads: payloads.map(toResealRef), effects: effects.map(toEffectToReseal) };
  }

  async resealPayloads(items: readonly Resealed[]): Promise<number> {
    if (items.length === 0) return 0;
    const values = items.flatMap((x) => [x.payloadId, x.sealed.keyId, x.sealed.nonce, x.sealed.ciphertext, x.oldNonce]);
    // The accept pool, always synchronous_commit on (the work pool may not be: durableEngineCommits):
    // an operator removes the old key once `keys list` shows it sealing nothing, so this must not be lost.
    return (await this.query({ text: W.resealStatement(items.length), values })).rowCount ?? 0;
  }

  async effectKeyUsage(): Promise<EffectKeyUsage[]> {
    return (await this.rows(W.EFFECT_KEY_USAGE)).map(toEffectKeyUsage);
  }

  async effectsToReseal(sealedPrefix: string, afterEffectId: string | null, limit: number): Promise<EffectToReseal[]> {
    if (afterEffectId !== null && !UUID_RE.test(afterEffectId)) throw new Error(`not an effect id: ${afterEffectId}`);
    return (await this.rows(W.EFFECTS_TO_RESEAL, [sealedPrefix, afterEffectId, limit])).map(toEffectToReseal);
  }

  async resealEffects(items: readonly ResealedEffect[]): Promise<number> {
    if (items.length === 0) return 0;
    // The accept pool (synchronous_commit on), as resealPayloads: an old key is removed on the strength of this.
    return (await this.query({ ...W.RESEAL_EFFECTS, values: [items.map((x) => x.effectId), items.map((x) => x.oldData), items.map((x) => x.data)] })).rowCount ?? 0;
  }

  /** Every call resolves once the pools have ended (a second call does not return before the first is done). */
  close(): Promise<void> {
    this.closing ??= (async () => {
      this.closed = true;
      this.notifier.close();
      const ended = Promise.all([this.listener.close(), this.pool.end(), this.workPool.end()]);
      // pool.end() resolves once each idle connection has been sent its goodbye, not once it has
      // closed, and waits for each checked-out one to come back, which one stuck in a hung
      // database's commit (answered 503 at the shutdown's grace) does only at its own timeout.
      await Promise.all([...this.connections].map((c) => closedWithin(c)));
      await ended;
    })();
    return this.closing;
  }
}
