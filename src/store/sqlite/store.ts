import { mkdirSync } from 'node:fs';
import { dirname } from 'node:path';
import { MigrationError, StorageUnavailableError } from '../../errors.js';
import { movableCiphertexts, startWorker, WorkerCalls, type ThreadReply } from '../../threads.js';
import { NIL_UUID, uuidv7Floor } from '../../crypto/ids.js';
import { acceptUnique } from '../dedupe.js';
import { assertSchemaCurrent } from '../migrations.js';
import type { AcceptRecord, AcceptResult, InboxRow, InboxStore, PurgeableStatus, StoredPayload, TransmissionBinding } from '../port.js';
import {
  toBacklogStat, toClaimedInbox, toEffectKeyUsage, toEffectRow, toEffectToReseal, toFailedEffect, toInboxDetail, toInboxRow, toOutboxClaim, toParkedOutbox, toPayloadKeyUsage, toQueueStats, toResealRef, toStoredPayload, type RawRow,
} from '../rows.js';
import type {
  BacklogStat, ClaimedInbox, EffectRow, EffectKeyUsage, EffectSettlement, EventFilter, FailedEffect, InboxDetail, OutboxClaim, OutboxSettle, ParkedOutbox, PayloadKeyUsage, QueueStats,
  Resealed, ResealedEffect, ResealRef, RetryOutcome, SealedSamples, StoreTx, EffectToReseal,
} from '../work-port.js';
import { LeaseLostError } from '../work-port.js';
import { SqliteTx } from './tx.js';
import type { ChunkCursor, ChunkDone, ClaimArgs, ResealArg } from './work-ops.js';
import { parseSqliteUrl } from './url.js';
import type { ReaderInit } from './reader.js';
import type { WorkerInit } from './worker.js';

/** How often a store with new-work listeners looks for commits by other processes. */
const OTHER_WRITERS_POLL_MS = 50;
/** Rows per transaction of an operator's requeue (inChunks): a few ms of the one writer each. */
export const REQUEUE_CHUNK = 1000;
const REQUEUE_PAUSE_MS = 5;

/**
 * A failed op from the writer thread's reply. Another process holding the write lock past
 * busyTimeoutMs is the store being unavailable for now (retry later), as the callers treat it.
 */
function failure(message: string, code: string | undefined): Error {
  if (code === 'SQLITE_BUSY' || code?.startsWith('SQLITE_BUSY_')) {
    return new StorageUnavailableError(`SQLite: ${message} (another process held its write lock past busyTimeoutMs)`);
  }
  return Object.assign(new Error(message), { code });
}

/**
 * One of the store's threads (worker.ts, the writer; reader.ts): its replies as values or typed
 * errors. One that dies is replaced by the next call; the requests it held fail (503).
 */
function sqliteThread(name: 'worker' | 'reader', init: WorkerInit | ReaderInit, what: string): WorkerCalls<ThreadReply> {
  return new WorkerCalls<ThreadReply>({
    start: () => startWorker(import.meta.url, name, init),
    settle: (m) => {
      // The engine tells a lost lease (stop: the batch is someone else's now) from other failures by its class.
      if (!m.ok) throw m.code === LeaseLostError.CODE ? new LeaseLostError(m.message ?? '') : failure(m.message ?? '', m.code);
      return m.result;
    },
    stopped: (cause) => new StorageUnavailableError(`${what} stopped`, { cause }),
  });
}

/**
 * SQLite adapter: a single writer thread owns the connection; this side only passes messages.
 * The statistics /metrics reads go to a read-only connection on a thread of its own (stats).
 */
export class SqliteStore implements InboxStore {
  readonly kind = 'sqlite' as const;
  /**
   * One writer, so one batch at a time. The 1 ms linger before a batch of fewer than 8 makes
   * batches at moderate load: at 2,000 req/s 5-7 items instead of 1.5-2.7, for a third less CPU
   * per request (bench/RESULTS.md, 2026-12-01).
   */
  readonly groupCommitDefaults = { maxInFlight: 1, maxWaitMs: 1 };
  private readonly writer: WorkerCalls<ThreadReply>;
  /** The reader thread, started by the first stats read (none for `:memory:`). */
  private reader: WorkerCalls<ThreadReply> | undefined;
  /** The writer has opened the file (a read-only connection cannot create it): the reader may start. */
  private fileOpened: Promise<void> | undefined;
  /** Transaction ids are unique across writer restarts, so a stale op never hits a new transaction. */
  private nextTxId = 1;
  private readonly newWork = new Set<() => void>();
  private watcher: NodeJS.Timeout | undefined;
  private closed = false;
  private closing: Promise<void> | undefined;

  get maxTxMs(): number {
    return this.init.txTimeoutMs;
  }

  constructor(readonly init: WorkerInit) {
    if (init.file !== ':memory:') {
      try {
        mkdirSync(dirname(init.file), { recursive: true });
      } catch (err) {
        // Typed, as a file that cannot be opened is: a library caller (and the CLI's one line) sees
        // the store is unusable and why, not a bare EEXIST / EACCES from mkdir.
        throw new StorageUnavailableError(`SQLite: cannot create the directory of ${init.file}: ${(err as Error).message}`, { cause: err });
      }
    }
    this.writer = sqliteThread('worker', this.init, 'SQLite worker');
  }

  static fromUrl(url: string, durableEngineCommits = true): SqliteStore {
    return new SqliteStore({ ...parseSqliteUrl(url), durableEngineCommits });
  }

  private async call<T>(op: string, arg?: unknown, transfer: ArrayBuffer[] = [], tx?: number): Promise<T> {
    if (this.closed) throw new StorageUnavailableError('store is closed');
    return this.writer.call<T>({ op, arg, tx }, transfer);
  }

  async migrate(): Promise<number[]> {
    try {
      return await this.call<number[]>('migrate');
    } catch (err) {
      // The store itself unavailable (locked past busyTimeoutMs, its thread stopped) stays that.
      if (err instanceof StorageUnavailableError) throw err;
      throw new MigrationError(`SQLite: ${(err as Error).message}; the migrations before it are applied (each runs in its own transaction)`, { cause: err });
    }
  }

  async acceptBatch(records: readonly AcceptRecord[]): Promise<AcceptResult[]> {
    const results = await acceptUnique(records, (unique) => this.call<AcceptResult[]>('accept', unique, movableCiphertexts(unique))).catch((err) => {
      throw err instanceof StorageUnavailableError ? err : new StorageUnavailableError(`SQLite commit failed: ${(err as Error).message}`, { cause: err });
    });
    if (results.some((r) => !r.duplicate)) this.notifyNewWork();
    return results;
  }

  async bindTransmissions(ts: readonly TransmissionBinding[]): Promise<boolean[]> {
    return this.callOrUnavailable<boolean[]>('bindTransmissions', ts);
  }

  async pruneTransmissions(provider: string, receivedBeforeMs: number, limit: number): Promise<number> {
    return this.callOrUnavailable<number>('pruneTransmissions', { provider, receivedBeforeMs, limit });
  }

  async purgePayloads(status: PurgeableStatus, receivedBeforeMs: number, afterPayloadId: string | undefined, limit: number): Promise<{ deleted: number; last: string | undefined }> {
    const args = { status, after: afterPayloadId ?? NIL_UUID, below: uuidv7Floor(receivedBeforeMs), receivedBeforeMs, limit };
    return this.callOrUnavailable<{ deleted: number; last: string | undefined }>('purgePayloads', args);
  }

  /** `call`, with any error of the database itself as StorageUnavailableError (as PostgresStore's query). */
  private callOrUnavailable<T>(op: string, arg: unknown): Promise<T> {
    return this.call<T>(op, arg).catch((err) => {
      throw err instanceof StorageUnavailableError ? err : new StorageUnavailableError(`SQLite: ${(err as Error).message}`, { cause: err });
    });
  }

  /** Listeners run before the accepting caller resumes; one that throws does not stop the others. */
  private notifyNewWork(): void {
    for (const fn of this.newWork) {
      try {
        fn();
      } catch {
        // best effort: the engine polls as a backstop
      }
    }
  }

  async databaseNowMs(): Promise<null> {
    return null; // a SQLite file is on this host: its processes read one clock
  }

  onNewWork(fn: () => void): () => void {
    this.newWork.add(fn);
    this.watchOtherWriters();
    return () => void this.newWork.delete(fn);
  }

  async claimInbox(n: number, owner: string, leaseMs: number, nowMs: number): Promise<ClaimedInbox[]> {
    return (await this.call<RawRow[]>('claimInbox', { n, owner, leaseMs, nowMs } satisfies ClaimArgs)).map(toClaimedInbox);
  }

  async extendInboxLeases(inboxIds: readonly string[], owner: string, leaseUntilMs: number): Promise<void> {
    if (inboxIds.length > 0) await this.call('extendInboxLeases', { ids: inboxIds, owner, leaseUntilMs });
  }

  /**
   * BEGIN IMMEDIATE on the writer thread, which holds back every other message until
   * COMMIT/ROLLBACK — begun lazily, at the first op that needs it (see SqliteTx).
   */
  async transaction<T>(fn: (tx: StoreTx) => Promise<T>): Promise<T> {
    const txId = this.nextTxId++;
    const tx = new SqliteTx(<R>(op: string, arg: unknown, inTx: boolean) =>
      op === 'txBegin' ? this.call<R>(op, txId) : this.call<R>(op, arg, [], inTx ? txId : undefined));
    let result: T;
    try {
      result = await fn(tx);
    } catch (err) {
      if (tx.open) await this.call('rollback', undefined, [], txId).catch(() => undefined); // already rolled back if the thread gave up on it
      throw err;
    }
    if (tx.open) await this.call('commit', undefined, [], txId); // a failed COMMIT is rolled back on the thread
    return result;
  }

  async claimEffects(n: number, owner: string, leaseMs: number, nowMs: number): Promise<EffectRow[]> {
    return (await this.call<RawRow[]>('claimEffects', { n, owner, leaseMs, nowMs } satisfies ClaimArgs)).map(toEffectRow);
  }

  settleEffect(effectId: string, owner: string, s: EffectSettlement): Promise<boolean> {
    return this.call('settleEffect', { id: effectId, owner, s });
  }

  async listEffects(inboxId: string): Promise<EffectRow[]> {
    return (await this.call<RawRow[]>('listEffects', inboxId)).map(toEffectRow);
  }

  async listFailedEffects(limit: number): Promise<FailedEffect[]> {
    return (await this.call<RawRow[]>('listFailedEffects', limit)).map(toFailedEffect);
  }

  async retryFailedEffects(effectIds: readonly string[] | null, nowMs: number): Promise<number> {
    return effectIds?.length === 0 ? 0 : this.inChunks('retryFailedEffects', { ids: effectIds, nowMs });
  }

  async claimOutbox(n: number, owner: string, leaseMs: number, nowMs: number): Promise<OutboxClaim[]> {
    return (await this.call<RawRow[]>('claimOutbox', { n, owner, leaseMs, nowMs } satisfies ClaimArgs)).map(toOutboxClaim);
  }

  async extendOutboxLeases(outboxIds: readonly string[], owner: string, leaseUntilMs: number): Promise<void> {
    if (outboxIds.length > 0) await this.call('extendOutboxLeases', { ids: outboxIds, owner, leaseUntilMs });
  }

  async settleOutboxBatch(owner: string, settles: readonly OutboxSettle[]): Promise<string[]> {
    return settles.length === 0 ? [] : this.call('settleOutboxBatch', { owner, settles });
  }

  async listParkedOutbox(limit: number): Promise<ParkedOutbox[]> {
    return (await this.call<RawRow[]>('listParkedOutbox', limit)).map(toParkedOutbox);
  }

  async requeueParkedOutbox(outboxIds: readonly string[] | null, nowMs: number): Promise<number> {
    return outboxIds?.length === 0 ? 0 : this.inChunks('requeueParkedOutbox', { ids: outboxIds, nowMs });
  }

  /**
   * An operator's requeue, REQUEUE_CHUNK rows per transaction until fewer are found. SQLite has one
   * writer, and a running serve's accepts wait for it: one UPDATE of a million FAILED rows held it
   * for seconds (~3.3 µs a row here), past the 6 s busy timeout at ~2 million, and the accepts
   * meanwhile were answered 503. A pause between chunks lets a waiting writer in (its busy
   * handler polls every few ms).
   */
  private async inChunks(op: string, arg: Record<string, unknown>): Promise<number> {
    let total = 0;
    // Each chunk after the last one's end (work-sql.ts CHUNK_AFTER): a row is visited once.
    let cursor: ChunkCursor = { afterReason: '', afterRowid: 0 };
    for (;;) {
      const done = await this.call<ChunkDone>(op, { ...arg, ...cursor, chunk: REQUEUE_CHUNK });
      total += done.changed;
      if (done.found < REQUEUE_CHUNK) return total;
      cursor = { afterReason: done.afterReason, afterRowid: done.afterRowid };
      await new Promise((r) => setTimeout(r, REQUEUE_PAUSE_MS));
    }
  }

  async listEvents(filter: EventFilter): Promise<InboxDetail[]> {
    return (await this.call<RawRow[]>('listEvents', filter)).map(toInboxDetail);
  }

  async getEvent(inboxId: string): Promise<InboxDetail | null> {
    const r = await this.call<RawRow | null>('getEvent', inboxId);
    return r ? toInboxDetail(r) : null;
  }

  retryFailed(inboxId: string, nowMs: number): Promise<RetryOutcome> {
    return this.call('retryFailed', { id: inboxId, nowMs });
  }

  async requeueFailed(reasons: readonly string[], nowMs: number): Promise<number> {
    return reasons.length === 0 ? 0 : this.inChunks('requeueFailed', { reasons, nowMs });
  }

  async backlog(): Promise<BacklogStat[]> {
    return (await this.stats<RawRow[]>('backlog')).map(toBacklogStat);
  }

  async queueStats(): Promise<QueueStats> {
    return toQueueStats(await this.stats<RawRow[]>('queueStats'));
  }

  /**
   * A read of the statistics every scrape asks for (work-ops.ts statsOps), on the reader thread:
   * on the writer, every accept waited behind it (~340 ms at 300,000 PENDING rows) and it waited
   * behind every handler transaction. Each read sees the commits made before it began (WAL).
   * `:memory:` stays on the writer: an in-memory database is its one connection's alone.
   */
  private async stats<T>(op: 'backlog' | 'queueStats'): Promise<T> {
    if (this.init.file === ':memory:') return this.call<T>(op);
    // The writer opens (and creates) the file at its first op; ping is answered even during a handler transaction.
    this.fileOpened ??= this.call('ping').then(() => undefined, (err: unknown) => {
      this.fileOpened = undefined;
      throw err;
    });
    await this.fileOpened;
    if (this.closing) throw new StorageUnavailableError('store is closed'); // no new reader once close() began
    this.reader ??= sqliteThread('reader', { file: this.init.file, busyTimeoutMs: this.init.busyTimeoutMs } satisfies ReaderInit, 'SQLite reader');
    return this.reader.call<T>({ op });
  }

  async payloadKeyUsage(): Promise<PayloadKeyUsage[]> {
    return (await this.call<RawRow[]>('payloadKeyUsage')).map(toPayloadKeyUsage);
  }

  async payloadsToReseal(keyId: string, afterPayloadId: string | null, limit: number): Promise<ResealRef[]> {
    return (await this.call<RawRow[]>('payloadsToReseal', { keyId, after: afterPayloadId, limit })).map(toResealRef);
  }

  async newestSealedUnder(keyId: string, sealedPrefix: string, limit: number): Promise<SealedSamples> {
    const r = await this.call<{ payloads: RawRow[]; effects: RawRow[] }>('newestSealedUnder', { keyId, prefix: sealedPrefix, limit });
    return { payloads: r.payloads.map(toResealRef), effects: r.effects.map(toEffectToReseal) };
  }

  async resealPayloads(items: readonly Resealed[]): Promise<number> {
    if (items.length === 0) return 0;
    const arg: ResealArg[] = items.map((x) => ({ payloadId: x.payloadId, oldNonce: x.oldNonce, keyId: x.sealed.keyId, nonce: x.sealed.nonce, ciphertext: x.sealed.ciphertext }));
    return this.call('resealPayloads', arg);
  }

  async effectKeyUsage(): Promise<EffectKeyUsage[]> {
    return (await this.call<RawRow[]>('effectKeyUsage')).map(toEffectKeyUsage);
  }

  async effectsToReseal(sealedPrefix: string, afterEffectId: string | null, limit: number): Promise<EffectToReseal[]> {
    return (await this.call<RawRow[]>('effectsToReseal', { prefix: sealedPrefix, after: afterEffectId, limit })).map(toEffectToReseal);
  }

  async resealEffects(items: readonly ResealedEffect[]): Promise<number> {
    return items.length === 0 ? 0 : this.call('resealEffects', items.map((x) => ({ effectId: x.effectId, oldData: x.oldData, data: x.data })));
  }

  async ping(): Promise<void> {
    assertSchemaCurrent(await this.schemaVersion());
  }

  schemaVersion(): Promise<number | null> {
    return this.call<number | null>('ping');
  }

  async getInbox(inboxId: string): Promise<InboxRow | null> {
    const r = await this.call<RawRow | null>('getInbox', inboxId);
    return r ? toInboxRow(r) : null;
  }

  async getPayload(payloadId: string): Promise<StoredPayload | null> {
    return (await this.readPayloads([payloadId]))[0] ?? null;
  }

  async readPayloads(payloadIds: readonly string[], maxBytes = Number.MAX_SAFE_INTEGER): Promise<StoredPayload[]> {
    if (payloadIds.length === 0) return [];
    return (await this.call<RawRow[]>('readPayloads', { ids: JSON.stringify(payloadIds), maxBytes })).map(toStoredPayload);
  }

  countRows(): Promise<{ inbox: number; outbox: number; payload: number }> {
    return this.call('count');
  }

  listInboxIds(): Promise<string[]> {
    return this.call('listIds');
  }

  /**
   * Accepts by another process (a `serve` next to this `work`) wake the listeners too: SQLite's
   * `data_version` changes when another connection commits, and reading it takes no lock.
   */
  private watchOtherWriters(): void {
    if (this.watcher) return;
    let last: number | undefined;
    this.watcher = setInterval(() => {
      if (this.newWork.size === 0) return;
      this.call<number>('dataVersion').then((v) => {
        if (last !== undefined && v !== last) for (const fn of this.newWork) fn();
        last = v;
      }, () => undefined);
    }, OTHER_WRITERS_POLL_MS);
    this.watcher.unref();
  }

  /** Every call resolves once the writer and reader threads have ended (a second call does not return before the first is done). */
  close(): Promise<void> {
    this.closing ??= (async () => {
      clearInterval(this.watcher);
      this.newWork.clear();
      // The reader first: the writer, closing last, checkpoints the WAL and removes it (a read-only connection cannot).
      await this.reader?.call({ op: 'close' }).catch(() => undefined);
      await this.reader?.close();
      await this.call('close').catch(() => undefined);
      this.closed = true;
      await this.writer.close();
    })();
    return this.closing;
  }
}
