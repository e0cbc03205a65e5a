import type Database from 'better-sqlite3';
import { effectSettlementColumns, eventListLimit, outboxSettlementColumns, retryRefusal, settlementColumns, type RawRow } from '../rows.js';
import { assertStillLeased, type BatchOutcome, type EffectSettlement, type EventFilter, type EventKey, type OutboxSettle, type ProcessedMarker, type ResealedEffect } from '../work-port.js';
import { bytes } from '../../threads.js';
import * as W from './work-sql.js';

/** A writer-thread operation: one message in, one structured-clonable answer out. */
export type Ops = Record<string, (arg: any) => unknown>;

export interface ClaimArgs { readonly n: number; readonly owner: string; readonly leaseMs: number; readonly nowMs: number }
interface Guarded<S> { readonly id: string; readonly owner: string; readonly s: S }
/** Where an operator's requeue chunk begins: after this (failure_reason, rowid); '' and 0 to begin. */
export interface ChunkCursor { readonly afterReason: string; readonly afterRowid: number }
/** One chunk done: the rows it found (fewer than the chunk: the last), the rows it changed, and where the next begins. */
export interface ChunkDone extends ChunkCursor { readonly found: number; readonly changed: number }
/** An operator's requeue: these ids (null: every row the statement selects), due at `nowMs`. */
interface IdsDueNow extends ChunkCursor { readonly ids: readonly string[] | null; readonly nowMs: number; readonly chunk: number }
const idsChunk = (a: IdsDueNow) => ({ ids: a.ids === null ? null : JSON.stringify(a.ids), afterReason: a.afterReason, afterRowid: a.afterRowid, chunk: a.chunk });
/** One Resealed, flat: its byte fields arrive from the event loop as plain Uint8Arrays. */
export interface ResealArg { readonly payloadId: string; readonly oldNonce: Uint8Array; readonly keyId: string; readonly nonce: Uint8Array; readonly ciphertext: Uint8Array }

/** Each statement prepared once, on first use: the tables exist only after migrate. */
function preparedOnce(db: Database.Database): (sql: string) => Database.Statement {
  const prepared = new Map<string, Database.Statement>();
  return (sql) => {
    let s = prepared.get(sql);
    if (!s) prepared.set(sql, (s = db.prepare(sql)));
    return s;
  };
}

/**
 * The statistics every /metrics scrape reads (Engine.refreshGauges): read-only, each one statement
 * (its own snapshot). They run on the reader thread (reader.ts), beside the writer, so an accept
 * never waits for a scrape nor a scrape for a handler transaction; on the writer only for `:memory:`.
 */
export function statsOps(db: Database.Database): Ops {
  const st = preparedOnce(db);
  return {
    backlog: () => st(W.BACKLOG).all(),
    queueStats: () => st(W.QUEUE_STATS).all(),
  };
}

/**
 * The WorkStore's operations on the writer thread. `free` ops run on their own (each an
 * autocommit statement or its own transaction); `inTx` ops run only inside the handler
 * transaction the message names (tx-gate.ts). Statements are prepared on first use: the
 * tables exist only after migrate.
 */
export function workOps(db: Database.Database): { free: Ops; inTx: Ops } {
  const st = preparedOnce(db);

  /** Pick the due ids, lease them, read them back in due order — under one write lock. */
  const claim = (due: string, lease: string, read: string) =>
    db.transaction((a: ClaimArgs) => {
      const picked = st(due).pluck(true).all({ now: a.nowMs, n: a.n });
      if (picked.length === 0) return [];
      const ids = JSON.stringify(picked);
      st(lease).run({ ids, owner: a.owner, leaseUntil: a.nowMs + a.leaseMs });
      return st(read).all({ ids });
    });
  const claimInbox = claim(W.DUE_INBOX, W.LEASE_INBOX, W.READ_CLAIMED_INBOX);
  const claimEffects = claim(W.DUE_EFFECTS, W.LEASE_EFFECTS, W.READ_CLAIMED_EFFECTS);
  const claimOutbox = claim(W.DUE_OUTBOX, W.LEASE_OUTBOX, W.READ_CLAIMED_OUTBOX);

  const settleOutboxBatch = db.transaction((a: { owner: string; settles: OutboxSettle[] }) =>
    a.settles.filter((x) => st(W.SETTLE_OUTBOX).run({ id: x.outboxId, owner: a.owner, ...outboxSettlementColumns(x) }).changes === 1).map((x) => x.outboxId));

  // The batch protocol: a whole batch's bookkeeping in one message each (no per-event trips).
  // The two reads also run on their own, and finishBatch as its own transaction (SqliteTx).
  const lockLeased = (a: { ids: string[]; owner: string }) => st(W.LOCK_LEASED).pluck(true).all({ ids: JSON.stringify(a.ids), owner: a.owner });
  const processed = (keys: EventKey[]) => {
    const out: ProcessedMarker[] = [];
    for (const k of keys) {
      for (const consumer of st(W.PROCESSED_FOR_EVENT).pluck(true).all(k.provider, k.endpointId, k.providerEventId) as string[]) {
        out.push({ provider: k.provider, endpointId: k.endpointId, providerEventId: k.providerEventId, consumer });
      }
    }
    return out;
  };
  /** Settles first: no marker or effect for a row whose settlement the lease guard refused (the fence). */
  const finishBatch = (a: { owner: string; outcome: BatchOutcome }) => {
    const refused = new Set<string>();
    let settled = 0;
    for (const x of a.outcome.settlements) {
      if (st(W.SETTLE_INBOX).run({ id: x.inboxId, owner: a.owner, ...settlementColumns(x.s) }).changes === 1) settled++;
      else refused.add(x.inboxId);
    }
    for (const m of a.outcome.markers) {
      if (!refused.has(m.inboxId)) st(W.MARK_PROCESSED).run(m.provider, m.endpointId, m.providerEventId, m.consumer, m.inboxId, m.handlerVersion, m.nowMs);
    }
    for (const e of a.outcome.effects) if (!refused.has(e.inboxId)) st(W.ADD_EFFECT).run(e);
    for (const id of a.outcome.relayed ?? []) if (!refused.has(id)) st(W.RELAY_OUTBOX).run(id);
    return settled;
  };
  const finishBatchTx = db.transaction(finishBatch);

  const retryFailed = db.transaction((a: { id: string; nowMs: number }) => {
    if (st(W.RETRY_FAILED).run({ id: a.id, now: a.nowMs }).changes === 1) return 'requeued';
    return retryRefusal(st(W.INBOX_STATE).get(a.id) as RawRow | undefined);
  });

  const resealPayloads = db.transaction((items: ResealArg[]) => {
    let changed = 0;
    for (const x of items) {
      changed += st(W.RESEAL_PAYLOAD).run({ payloadId: x.payloadId, keyId: x.keyId, nonce: bytes(x.nonce), ciphertext: bytes(x.ciphertext), oldNonce: bytes(x.oldNonce) }).changes;
    }
    return changed;
  });

  const resealEffects = db.transaction((items: ResealedEffect[]) => {
    let changed = 0;
    for (const x of items) changed += st(W.RESEAL_EFFECT).run(x).changes;
    return changed;
  });

  /** One chunk of an operator's requeue: its rows found (`select`, in cursor order), then changed (`update`), in one transaction. */
  const requeueChunk = (select: string, update: string) => db.transaction((params: Record<string, unknown>, nowMs: number, cursor: ChunkCursor): ChunkDone => {
    const rows = st(select).all(params) as { rid: number; reason: string }[];
    const last = rows.at(-1);
    if (!last) return { found: 0, changed: 0, ...cursor };
    const changed = st(update).run({ rows: JSON.stringify(rows.map((r) => r.rid)), now: nowMs }).changes;
    return { found: rows.length, changed, afterReason: last.reason, afterRowid: last.rid };
  });
  const retryFailedEffectsChunk = requeueChunk(W.RETRY_FAILED_EFFECTS_CHUNK, W.RETRY_FAILED_EFFECTS);
  const requeueParkedOutboxChunk = requeueChunk(W.REQUEUE_PARKED_OUTBOX_CHUNK, W.REQUEUE_PARKED_OUTBOX);
  const requeueFailedChunk = requeueChunk(W.REQUEUE_FAILED_CHUNK, W.REQUEUE_FAILED);

  const free: Ops = {
    claimInbox: (a: ClaimArgs) => claimInbox.immediate(a),
    claimEffects: (a: ClaimArgs) => claimEffects.immediate(a),
    claimOutbox: (a: ClaimArgs) => claimOutbox.immediate(a),
    extendInboxLeases: (a: { ids: string[]; owner: string; leaseUntilMs: number }) =>
      void st(W.EXTEND_INBOX_LEASES).run({ ids: JSON.stringify(a.ids), owner: a.owner, leaseUntil: a.leaseUntilMs }),
    extendOutboxLeases: (a: { ids: string[]; owner: string; leaseUntilMs: number }) =>
      void st(W.EXTEND_OUTBOX_LEASES).run({ ids: JSON.stringify(a.ids), owner: a.owner, leaseUntil: a.leaseUntilMs }),
    settleEffect: (a: Guarded<EffectSettlement>) =>
      st(W.SETTLE_EFFECT).run({ id: a.id, owner: a.owner, ...effectSettlementColumns(a.s) }).changes === 1,
    // One transaction (one fsync) for a relay claim, not one per row.
    settleOutboxBatch: (a: { owner: string; settles: OutboxSettle[] }) => settleOutboxBatch.immediate(a),
    lockLeased,
    processed,
    finishBatchTx: (a: { owner: string; outcome: BatchOutcome }) => finishBatchTx.immediate(a),
    readPayloads: (a: { ids: string; maxBytes: number }) => st(W.READ_PAYLOADS).all(a),
    listEffects: (inboxId: string) => st(W.LIST_EFFECTS).all(inboxId),
    listFailedEffects: (limit: number) => st(W.LIST_FAILED_EFFECTS).all({ limit }),
    retryFailedEffects: (a: IdsDueNow) => retryFailedEffectsChunk.immediate(idsChunk(a), a.nowMs, a),
    getEvent: (inboxId: string) => st(W.GET_EVENT).get(inboxId) ?? null,
    // Parameters the statement's shape does not name are ignored.
    listEvents: (f: EventFilter) => st(W.listEventsSql(f)).all({ ...f, limit: eventListLimit(f.limit) }),
    listParkedOutbox: (limit: number) => st(W.LIST_PARKED_OUTBOX).all({ limit }),
    requeueParkedOutbox: (a: IdsDueNow) => requeueParkedOutboxChunk.immediate(idsChunk(a), a.nowMs, a),
    retryFailed: (a: { id: string; nowMs: number }) => retryFailed.immediate(a),
    requeueFailed: (a: ChunkCursor & { reasons: string[]; nowMs: number; chunk: number }) =>
      requeueFailedChunk.immediate({ reasons: JSON.stringify(a.reasons), afterReason: a.afterReason, afterRowid: a.afterRowid, chunk: a.chunk }, a.nowMs, a),
    payloadKeyUsage: () => st(W.PAYLOAD_KEY_USAGE).all(),
    payloadsToReseal: (a: { keyId: string; after: string | null; limit: number }) => st(W.PAYLOADS_TO_RESEAL).all(a),
    newestSealedUnder: (a: { keyId: string; prefix: string; limit: number }) => ({
      payloads: st(W.NEWEST_PAYLOAD_UNDER).all({ keyId: a.keyId, limit: a.limit }),
      effects: st(W.NEWEST_EFFECT_UNDER).all({ prefix: a.prefix, limit: a.limit }),
    }),
    resealPayloads: (items: ResealArg[]) => resealPayloads.immediate(items),
    effectKeyUsage: () => st(W.EFFECT_KEY_USAGE).all(),
    effectsToReseal: (a: { prefix: string; after: string | null; limit: number }) => st(W.EFFECTS_TO_RESEAL).all(a),
    resealEffects: (items: ResealedEffect[]) => resealEffects.immediate(items),
    ...statsOps(db), // `:memory:` only: see SqliteStore.stats
  };

  const inTx: Ops = {
    lockLeased,
    processed,
    // In a handler transaction: a row lost meanwhile means its handler's writes must not commit.
    finishBatch: (a: { owner: string; outcome: BatchOutcome }) => {
      const settled = finishBatch(a);
      assertStillLeased(settled, a.outcome);
      return settled;
    },
  };

  return { free, inTx };
}
