import type { SealedPayload } from '../crypto/payload-cipher.js';
import type { InboxRow, StoredPayload } from './port.js';

/**
 * The part of the storage port the processing engine uses: leased claims, one transaction per
 * settled batch (the batch protocol on StoreTx), the effects outbox, the broker relay's
 * outbox, and the operator queries. Times are Unix ms chosen by the caller (`nowMs`), so
 * tests can drive the clock and both stores agree on what "due" means.
 *
 * Lease protocol (inbox, effects and outbox alike): a claim sets status PROCESSING,
 * `lease_owner`, `lease_until = now + leaseMs` AND `next_attempt_at = lease_until`, and
 * increments `attempt_count`. "Due" is then one indexed condition for both fresh and
 * abandoned rows: `status IN ('PENDING','PROCESSING') AND next_attempt_at <= now`.
 * Every settle is guarded by `lease_owner = owner AND status = 'PROCESSING'`: a worker whose
 * lease expired and was taken over changes nothing.
 */

/** The stable provider key of a logical event (the inbox UNIQUE key). */
export interface EventKey {
  readonly provider: string;
  readonly endpointId: string;
  readonly providerEventId: string;
}

/**
 * A claimed inbox row. Its sealed payload is not part of the claim (`rawPayloadRef` names it;
 * null once purged): the worker reads it with `readPayloads` only for events whose targets
 * need the body, so a claim never ships ~10 KiB of ciphertext per event that nobody opens.
 */
export interface ClaimedInbox extends InboxRow {
  readonly leaseOwner: string;
}

export type FailureReason = string;

/** How an attempt ends. `PENDING` = retry at `nextAttemptAtMs`. */
export type Settlement =
  | { readonly status: 'PROCESSED'; readonly handlerVersion: string | null; readonly nowMs: number }
  | {
    readonly status: 'PENDING'; readonly nextAttemptAtMs: number; readonly error: string; readonly nowMs: number;
    /** The attempt is given back (attempt_count as before the claim): it failed on this gateway's own setup, not on the event. */
    readonly attemptGivenBack?: boolean;
  }
  | { readonly status: 'FAILED'; readonly reason: FailureReason; readonly error: string; readonly nowMs: number };

export interface NewEffect {
  readonly effectId: string;
  readonly inboxId: string;
  readonly name: string;
  /** `<inbox_id>:<effect name>` — UNIQUE, so a re-run of the same handler records it once. */
  readonly idempotencyKey: string;
  /** JSON text. */
  readonly data: string;
  readonly nowMs: number;
}

/** A (logical event, consumer) that has applied its work: a processed_events row. */
export interface ProcessedMarker extends EventKey {
  readonly consumer: string;
}

export interface NewMarker extends ProcessedMarker {
  readonly inboxId: string;
  readonly handlerVersion: string | null;
  readonly nowMs: number;
}

/** Everything one batch writes at its end, in one round trip. */
export interface BatchOutcome {
  readonly markers: readonly NewMarker[];
  readonly effects: readonly NewEffect[];
  readonly settlements: readonly { readonly inboxId: string; readonly s: Settlement }[];
  /**
   * Settled events that have a broker route in this worker's config. One accepted while it had
   * none has its outbox row written already published (`published_to` NULL: the relay never took
   * it); it is made due for the relay in the same commit, as the worker's PROCESSED counts on it.
   */
  readonly relayed?: readonly string[];
}

/** Statement results from the user's SQL. */
export type Row = Record<string, unknown>;

/**
 * An open transaction. `query` is the handler's own SQL on the inbox database (PostgreSQL
 * `$1` placeholders, SQLite `?`); the engine isolates each handler with plain SQL savepoints
 * through it. The other methods are the batch protocol, the engine's bookkeeping for a whole
 * batch: `lockLeased`, then `processed`, then one `finishBatch`.
 */
export interface StoreTx {
  readonly kind: 'sqlite' | 'postgres';
  query<R extends Row = Row>(sql: string, params?: readonly unknown[]): Promise<R[]>;
  /**
   * Begins the transaction (the first `query` does too): waits for its connection — a work-pool
   * connection on PostgreSQL, the one writer on SQLite — behind other handler transactions.
   * Waiting is not the handler's time, and a store's transaction limit starts after it (begunAt).
   */
  begin(): Promise<void>;
  /** performance.now() once begun (after the wait), else undefined. */
  readonly begunAt: number | undefined;
  /**
   * Ends savepoint `name`: a handler's, its writes kept, or undone first when `rollback` (it
   * failed). Either way whatever session state a statement since it left behind ends with it
   * (PostgreSQL: settings, role, session advisory locks, cursors, LISTENs).
   */
  releaseSavepoint(name: string, opts?: { rollback?: boolean }): Promise<void>;
  /**
   * The batch protocol's first step: of these rows, the ones `owner` still leases, locked until
   * this transaction ends (PostgreSQL `FOR UPDATE`), so their settle at the end cannot be lost to
   * a takeover. SQLite begins its transactions lazily (sqlite/tx.ts): before a handler's first
   * query this is a plain read, and finishBatch's owner guard decides.
   */
  lockLeased(inboxIds: readonly string[], owner: string): Promise<string[]>;
  /** The processed markers that exist for these events (every consumer). */
  processed(keys: readonly EventKey[]): Promise<ProcessedMarker[]>;
  /**
   * The batch protocol's last step: settles the rows (guarded by `owner`), then inserts the
   * markers (a duplicate throws: the PK is the guard) and records the effects (a repeated
   * idempotency key is ignored), none for a row whose settlement the guard refused. Returns
   * how many rows were settled. In a begun transaction (a handler wrote), a row no longer
   * leased throws LeaseLostError: the handlers' writes must not commit for an event another
   * worker now owns.
   */
  finishBatch(owner: string, outcome: BatchOutcome): Promise<number>;
}

export type EffectStatus = 'PENDING' | 'PROCESSING' | 'DONE' | 'FAILED';

/**
 * What /metrics reads of the queues. Effects are counted only while still to do or FAILED: DONE
 * rows grow without bound (their rate is webhook_effect_attempts_total{result="success"}).
 */
export interface QueueStats {
  /** FAILED inbox rows (they wait for an operator), all endpoints and types together. */
  readonly inboxFailed: number;
  /** Parked rows included: they are not on the bus either. */
  readonly outboxUnpublished: number;
  readonly outboxParked: number;
  /**
   * created_at of the oldest unpublished row the relay still tries to publish (parked ones are
   * not: they wait for an operator, and outboxParked counts them); null when there is none.
   */
  readonly outboxOldestMs: number | null;
  readonly effects: Record<Exclude<EffectStatus, 'DONE'>, number>;
}

export interface EffectRow {
  readonly effectId: string;
  readonly inboxId: string;
  readonly name: string;
  readonly idempotencyKey: string;
  readonly data: string;
  readonly status: EffectStatus;
  readonly attemptCount: number;
  readonly nextAttemptAtMs: number | null;
  readonly lastError: string | null;
  readonly failureReason: string | null;
  readonly createdAtMs: number;
  /** When it ended: DONE, or FAILED (null while it has not, and again once an operator retries it). */
  readonly doneAtMs: number | null;
}

/**
 * An effect that ended FAILED, as an operator lists it. Never its data: that may carry customer
 * details (`events show` lists an event's effects by name and key).
 */
export interface FailedEffect {
  readonly effectId: string;
  readonly inboxId: string;
  readonly name: string;
  readonly idempotencyKey: string;
  readonly attemptCount: number;
  readonly failureReason: string;
  /** Already redacted when it was stored (engine/failure.ts). */
  readonly lastError: string | null;
  /** When the handler recorded it. */
  readonly createdAtMs: number;
  /** When it ended FAILED (null for one that failed before this was recorded). */
  readonly failedAtMs: number | null;
}

export type EffectSettlement =
  | { readonly status: 'DONE'; readonly nowMs: number }
  | {
    readonly status: 'PENDING'; readonly nextAttemptAtMs: number; readonly error: string; readonly nowMs: number;
    /** The attempt is given back (attempt_count as before the claim): its data's key is configured but not loaded yet. */
    readonly attemptGivenBack?: boolean;
  }
  | { readonly status: 'FAILED'; readonly reason: FailureReason; readonly error: string; readonly nowMs: number };

/** An unpublished outbox row with the event metadata a broker message carries. */
export interface OutboxClaim {
  readonly outboxId: string;
  readonly inboxId: string;
  readonly topic: string;
  readonly provider: string;
  readonly endpointId: string;
  readonly providerEventId: string;
  readonly eventType: string;
  readonly receivedAtMs: number;
  readonly attemptCount: number;
  /** Ids of the broker destinations that have already taken this row's message (earlier attempts). */
  readonly publishedTo: readonly string[];
}

export type OutboxSettlement =
  | { readonly published: true; readonly nowMs: number }
  | { readonly published: false; readonly nextAttemptAtMs: number; readonly error: string; readonly nowMs: number }
  /** Parked: a destination refused it for good; never due again until an operator requeues it. */
  | { readonly published: false; readonly parked: string; readonly error: string; readonly nowMs: number };

/** An outbox row parked after a destination refused it for good, as an operator lists it. */
export interface ParkedOutbox {
  readonly outboxId: string;
  readonly inboxId: string;
  readonly endpointId: string;
  readonly eventType: string;
  readonly createdAtMs: number;
  readonly attemptCount: number;
  /** Destinations that have the message (the others are owed). */
  readonly publishedTo: readonly string[];
  readonly failureReason: string;
  readonly lastError: string | null;
}

export interface OutboxSettle {
  readonly outboxId: string;
  /** Every destination that has the message now (the claim's `publishedTo` and this attempt's): stored with the settle. */
  readonly publishedTo: readonly string[];
  readonly s: OutboxSettlement;
}

export interface EventFilter {
  readonly status?: string;
  readonly endpointId?: string;
  readonly eventType?: string;
  readonly failureReason?: string;
  readonly limit?: number;
  /** Keyset paging: rows with inbox_id < before (ids are time-ordered UUIDv7). */
  readonly before?: string;
}

export interface InboxDetail extends InboxRow {
  readonly failureReason: string | null;
  readonly handlerVersion: string | null;
  readonly processedAtMs: number | null;
}

export interface BacklogStat {
  readonly endpointId: string;
  readonly eventType: string;
  readonly status: string;
  readonly count: number;
  /** received_at of the oldest row in this group. */
  readonly oldestReceivedAtMs: number;
}

/** Payload key rotation: how many stored payloads one key id seals. */
export interface PayloadKeyUsage {
  readonly keyId: string;
  readonly payloads: number;
}

/** Effects per key their data is sealed under: the key id as stored (base64url), null for data stored plain. */
export interface EffectKeyUsage {
  readonly sealedKeyId: string | null;
  readonly effects: number;
}

/** An effect whose data `keys reseal` seals again (under the current key). */
export interface EffectToReseal {
  readonly effectId: string;
  readonly idempotencyKey: string;
  readonly data: string;
}

export interface ResealedEffect {
  readonly effectId: string;
  readonly oldData: string;
  readonly data: string;
}

/** A stored payload to seal again, and its row's unique key (what its associated data binds). */
export interface ResealRef extends EventKey {
  readonly payloadId: string;
}

/** The newest rows sealed under one key (newestSealedUnder), newest first. */
export interface SealedSamples {
  readonly payloads: readonly ResealRef[];
  readonly effects: readonly EffectToReseal[];
}

/** A new sealing for a payload, swapped in only while the row still holds `oldNonce`. */
export interface Resealed {
  readonly payloadId: string;
  readonly oldNonce: Buffer;
  readonly sealed: SealedPayload;
}

export interface TxOptions {
  /**
   * PostgreSQL ends the session of a transaction idle (no statement running) longer than this
   * (`idle_in_transaction_session_timeout`), rolling it back. A worker frozen inside a handler
   * (SIGSTOP, a stalled VM) otherwise keeps its row locks, and the next owner of its events
   * waits on them until it wakes or dies. SQLite has maxTxMs instead.
   */
  readonly idleLimitMs?: number;
}

/** What `retryFailed` did: requeued the row, or why not. */
export type RetryOutcome = 'requeued' | 'not_found' | 'not_failed' | 'payload_purged';

export interface WorkStore {
  /**
   * A handler transaction open longer than this is rolled back by the store (SQLite: it holds the
   * one writer, accepts included); undefined = no such limit. The engine keeps under it.
   */
  readonly maxTxMs?: number;
  /**
   * Calls fn when new inbox rows may be due: PostgreSQL LISTEN/NOTIFY (the accept statement
   * notifies `webhook_inbox`), so it works across processes; SQLite: after an accept commits
   * in this process. Best effort — the engine polls as a backstop. Returns an unsubscribe.
   * `lost`: PostgreSQL's listening connection was lost (an error, a close, or no answer to its
   * liveness check); it reconnects, then calls fn once. SQLite has no such connection.
   */
  onNewWork(fn: () => void, lost?: (reason: Error) => void): () => void;
  /**
   * The database server's clock (Unix ms), which every process sharing the database sees alike;
   * null where processes share one host's clock anyway (SQLite).
   */
  databaseNowMs(): Promise<number | null>;
  /** Claims up to n due inbox rows (oldest due first) under a lease for `owner`. */
  claimInbox(n: number, owner: string, leaseMs: number, nowMs: number): Promise<ClaimedInbox[]>;
  /**
   * The sealed payloads of these ids that still exist (purged ones are absent), in the order of
   * `payloadIds`. With `maxBytes`, a prefix whose `heldBytes` add up to at most `maxBytes` (but
   * always the first payload, however large): the caller reads the rest later, so a claim of
   * many large bodies is never loaded at once.
   */
  readPayloads(payloadIds: readonly string[], maxBytes?: number): Promise<StoredPayload[]>;
  /** Heartbeat: pushes the lease (and next_attempt_at) of rows `owner` still holds. */
  extendInboxLeases(inboxIds: readonly string[], owner: string, leaseUntilMs: number): Promise<void>;
  /** BEGIN … COMMIT around fn (ROLLBACK if it throws). SQLite: BEGIN IMMEDIATE. */
  transaction<T>(fn: (tx: StoreTx) => Promise<T>, opts?: TxOptions): Promise<T>;

  claimEffects(n: number, owner: string, leaseMs: number, nowMs: number): Promise<EffectRow[]>;
  settleEffect(effectId: string, owner: string, s: EffectSettlement): Promise<boolean>;
  listEffects(inboxId: string): Promise<EffectRow[]>;
  /** FAILED effects, oldest first, at most `limit`. */
  listFailedEffects(limit: number): Promise<FailedEffect[]>;
  /**
   * FAILED effects (these ids; null: every one) → PENDING due now with a fresh attempt count and
   * the same idempotency key; any other status is left alone (a DONE effect never runs again).
   * Returns how many were requeued.
   */
  retryFailedEffects(effectIds: readonly string[] | null, nowMs: number): Promise<number>;

  claimOutbox(n: number, owner: string, leaseMs: number, nowMs: number): Promise<OutboxClaim[]>;
  /** Pushes the lease of unpublished rows `owner` still holds to `leaseUntilMs` (the relay's heartbeat while it publishes). */
  extendOutboxLeases(outboxIds: readonly string[], owner: string, leaseUntilMs: number): Promise<void>;
  /**
   * Settles the rows of one relay claim in one transaction and one round trip (rows `owner`
   * no longer leases are left alone). Returns the ids it settled.
   */
  settleOutboxBatch(owner: string, settles: readonly OutboxSettle[]): Promise<string[]>;
  /** Parked outbox rows, oldest first, at most `limit`. */
  listParkedOutbox(limit: number): Promise<ParkedOutbox[]>;
  /**
   * Parked rows (these ids; null: every one) → due now with a fresh attempt count; the
   * destinations that already have the message keep it. Returns how many were requeued.
   */
  requeueParkedOutbox(outboxIds: readonly string[] | null, nowMs: number): Promise<number>;

  listEvents(filter: EventFilter): Promise<InboxDetail[]>;
  getEvent(inboxId: string): Promise<InboxDetail | null>;
  /**
   * FAILED → PENDING (due now), keeping attempt_count history out of the way: resets it to 0.
   * Not a FAILED row whose payload retention deleted (`payload_purged`): it could only fail again.
   */
  retryFailed(inboxId: string, nowMs: number): Promise<RetryOutcome>;
  /** Every FAILED row whose failure_reason is in `reasons` and whose payload is still stored → PENDING due now; returns the count. */
  requeueFailed(reasons: readonly string[], nowMs: number): Promise<number>;
  /** Inbox counts and oldest age by endpoint, type and status, of the non-terminal rows (FAILED ones: queueStats). */
  backlog(): Promise<BacklogStat[]>;
  /** Stored payloads per key id, by key id. */
  payloadKeyUsage(): Promise<PayloadKeyUsage[]>;
  /**
   * Up to `limit` payloads sealed under any key but `keyId`, in payload id order after
   * `afterPayloadId` (null: from the first). Payloads no inbox row points at have no binding and
   * are left out.
   */
  payloadsToReseal(keyId: string, afterPayloadId: string | null, limit: number): Promise<ResealRef[]>;
  /**
   * The newest `limit` payloads sealed under `keyId` that an event points at, and the newest
   * `limit` effects whose data starts with `sealedPrefix` (that key's): what `keys reseal` tries
   * each key's value on.
   */
  newestSealedUnder(keyId: string, sealedPrefix: string, limit: number): Promise<SealedSamples>;
  /**
   * Swaps in each new sealing (key id, nonce, ciphertext; the packing columns stay) where the
   * row still holds `oldNonce`, all in one transaction; returns how many rows changed. A row
   * resealed or purged meanwhile is left alone.
   */
  resealPayloads(items: readonly Resealed[]): Promise<number>;
  /** Effects per key their data is sealed under (crypto/effect-data.ts). */
  effectKeyUsage(): Promise<EffectKeyUsage[]>;
  /**
   * Up to `limit` effects whose stored data does not start with `sealedPrefix` (sealed under the
   * current key), in effect id order after `afterEffectId` (null: from the first), with their data.
   */
  effectsToReseal(sealedPrefix: string, afterEffectId: string | null, limit: number): Promise<EffectToReseal[]>;
  /** Swaps in each effect's new data where it still holds `oldData`, in one transaction; returns how many changed. */
  resealEffects(items: readonly ResealedEffect[]): Promise<number>;
  /** FAILED inbox rows; outbox: unpublished rows and the oldest one's created_at; effects by status. */
  queueStats(): Promise<QueueStats>;
}

/** A handler transaction's rows changed hands before it committed: it must roll back. */
export class LeaseLostError extends Error {
  /** Carried by the SQLite writer thread's reply, since the class does not cross threads. */
  static readonly CODE = 'LEASE_LOST';
  readonly code = LeaseLostError.CODE;

  constructor(message: string) {
    super(message);
    this.name = 'LeaseLostError';
  }

  static of(lost: number, of: number): LeaseLostError {
    return new LeaseLostError(`${lost} of ${of} events changed hands (lease expired, another worker claimed them) before this batch committed; its writes are rolled back`);
  }
}

/** Throws LeaseLostError unless every settlement of `outcome` took effect. */
export function assertStillLeased(settled: number, outcome: BatchOutcome): void {
  const of = outcome.settlements.length;
  if (settled < of) throw LeaseLostError.of(of - settled, of);
}
