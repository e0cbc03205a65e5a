import { bytes } from '../threads.js';
import type { PayloadEncoding } from '../crypto/payload-cipher.js';
import type { InboxRow, StoredPayload } from './port.js';
import type {
  BacklogStat, ClaimedInbox, EffectKeyUsage, EffectRow, EffectSettlement, EffectToReseal, FailedEffect, InboxDetail, OutboxClaim, OutboxSettle, ParkedOutbox, PayloadKeyUsage, QueueStats, ResealRef, RetryOutcome, Settlement,
} from './work-port.js';

/**
 * Row → port mapping shared by both stores. Both select the same column names; timestamps
 * arrive as Unix ms (SQLite INTEGER, PostgreSQL epoch expression) and blobs as byte arrays.
 */
export type RawRow = Record<string, unknown>;

const ms = (v: unknown): number | null => (v === null || v === undefined ? null : Number(v));

export function toInboxRow(r: RawRow): InboxRow {
  return {
    inboxId: r.inbox_id as string,
    provider: r.provider as string,
    endpointId: r.endpoint_id as string,
    providerEventId: r.provider_event_id as string,
    eventType: r.event_type as string,
    objectId: r.object_id as string | null,
    objectVersion: r.object_version as string | null,
    providerCreatedAtMs: ms(r.provider_created_at),
    receivedAtMs: Number(r.received_at),
    rawPayloadRef: r.raw_payload_ref as string | null,
    payloadHash: bytes(r.payload_hash),
    matchedSecretVersion: r.matched_secret_version as string,
    status: r.status as InboxRow['status'],
    attemptCount: Number(r.attempt_count),
    nextAttemptAtMs: ms(r.next_attempt_at),
    leaseUntilMs: ms(r.lease_until),
    lastError: r.last_error as string | null,
    verification: r.verification === 'fetch-required' ? 'fetch-required' : 'signature',
  };
}

export function toStoredPayload(r: RawRow): StoredPayload {
  const p = { payloadId: r.payload_id as string, keyId: r.key_id as string, nonce: bytes(r.nonce), ciphertext: bytes(r.ciphertext) };
  return r.encoding == null ? p : { ...p, encoding: r.encoding as PayloadEncoding, rawBytes: Number(r.raw_bytes) };
}

export function toPayloadKeyUsage(r: RawRow): PayloadKeyUsage {
  return { keyId: r.key_id as string, payloads: Number(r.payloads) };
}

export function toResealRef(r: RawRow): ResealRef {
  return { payloadId: r.payload_id as string, provider: r.provider as string, endpointId: r.endpoint_id as string, providerEventId: r.provider_event_id as string };
}

/** An inbox row with the engine's columns (lease_owner, failure_reason, handler_version, processed_at). */
export function toInboxDetail(r: RawRow): InboxDetail {
  return {
    ...toInboxRow(r),
    failureReason: r.failure_reason as string | null,
    handlerVersion: r.handler_version as string | null,
    processedAtMs: ms(r.processed_at),
  };
}

/** Why retryFailed did not requeue a row, from its INBOX_STATE (`status`, `purged`; undefined: no such row). */
export function retryRefusal(r: RawRow | undefined): Exclude<RetryOutcome, 'requeued'> {
  if (!r) return 'not_found';
  return r.status === 'FAILED' && Boolean(r.purged) ? 'payload_purged' : 'not_failed';
}

export function toClaimedInbox(r: RawRow): ClaimedInbox {
  return { ...toInboxRow(r), leaseOwner: r.lease_owner as string };
}

export function toEffectRow(r: RawRow): EffectRow {
  return {
    effectId: r.effect_id as string,
    inboxId: r.inbox_id as string,
    name: r.name as string,
    idempotencyKey: r.idempotency_key as string,
    data: r.data as string,
    status: r.status as EffectRow['status'],
    attemptCount: Number(r.attempt_count),
    nextAttemptAtMs: ms(r.next_attempt_at),
    lastError: r.last_error as string | null,
    failureReason: r.failure_reason as string | null,
    createdAtMs: Number(r.created_at),
    doneAtMs: ms(r.done_at),
  };
}

export function toEffectKeyUsage(r: RawRow): EffectKeyUsage {
  return { sealedKeyId: r.sealed_key_id as string | null, effects: Number(r.effects) };
}

export function toEffectToReseal(r: RawRow): EffectToReseal {
  return { effectId: r.effect_id as string, idempotencyKey: r.idempotency_key as string, data: r.data as string };
}

/** A FAILED effect without its data. */
export function toFailedEffect(r: RawRow): FailedEffect {
  return {
    effectId: r.effect_id as string,
    inboxId: r.inbox_id as string,
    name: r.name as string,
    idempotencyKey: r.idempotency_key as string,
    attemptCount: Number(r.attempt_count),
    failureReason: r.failure_reason as string,
    lastError: r.last_error as string | null,
    createdAtMs: Number(r.created_at),
    failedAtMs: ms(r.done_at),
  };
}

/** An outbox row joined with its inbox row's event metadata. */
export function toOutboxClaim(r: RawRow): OutboxClaim {
  return {
    outboxId: r.outbox_id as string,
    inboxId: r.inbox_id as string,
    topic: r.topic as string,
    provider: r.provider as string,
    endpointId: r.endpoint_id as string,
    providerEventId: r.provider_event_id as string,
    eventType: r.event_type as string,
    receivedAtMs: Number(r.received_at),
    attemptCount: Number(r.attempt_count),
    publishedTo: publishedTo(r),
  };
}

const publishedTo = (r: RawRow): string[] => (r.published_to == null ? [] : (JSON.parse(r.published_to as string) as string[]));

/** A parked outbox row joined with its inbox row's endpoint and type. */
export function toParkedOutbox(r: RawRow): ParkedOutbox {
  return {
    outboxId: r.outbox_id as string,
    inboxId: r.inbox_id as string,
    endpointId: r.endpoint_id as string,
    eventType: r.event_type as string,
    createdAtMs: Number(r.created_at),
    attemptCount: Number(r.attempt_count),
    publishedTo: publishedTo(r),
    failureReason: r.failure_reason as string,
    lastError: r.last_error as string | null,
  };
}

/** One backlog group: `count` and `oldest_received_at` (ms) per endpoint, type and status. */
export function toBacklogStat(r: RawRow): BacklogStat {
  return {
    endpointId: r.endpoint_id as string,
    eventType: r.event_type as string,
    status: r.status as string,
    count: Number(r.count),
    oldestReceivedAtMs: Number(r.oldest_received_at),
  };
}

/** Rows of `kind` ('inbox_failed', 'outbox', 'outbox_parked' or an effect status), `count`, `oldest` (outbox created_at ms) → queue stats. */
export function toQueueStats(rows: readonly RawRow[]): QueueStats {
  const effects: QueueStats['effects'] = { PENDING: 0, PROCESSING: 0, FAILED: 0 };
  let inboxFailed = 0;
  let outboxUnpublished = 0;
  let outboxOldestMs: number | null = null;
  let outboxParked = 0;
  for (const r of rows) {
    if (r.kind === 'inbox_failed') {
      inboxFailed = Number(r.count);
    } else if (r.kind === 'outbox') {
      outboxUnpublished = Number(r.count);
      outboxOldestMs = ms(r.oldest);
    } else if (r.kind === 'outbox_parked') {
      outboxParked = Number(r.count);
    } else {
      effects[r.kind as keyof QueueStats['effects']] = Number(r.count);
    }
  }
  return { inboxFailed, outboxUnpublished, outboxOldestMs, outboxParked, effects };
}

// Port → column values, for the settle statements of both stores.

/**
 * The inbox columns a Settlement writes. NULL `error`/`handlerVersion`/`processedAtMs` keep what
 * is there; a NULL `nextAttemptAtMs` ends the row's schedule (terminal states).
 */
export function settlementColumns(s: Settlement): {
  status: string; nextAttemptAtMs: number | null; error: string | null; reason: string | null; handlerVersion: string | null; processedAtMs: number | null;
  /** Subtracted from attempt_count: 1 gives the claim's attempt back. */
  givenBack: number;
} {
  switch (s.status) {
    case 'PROCESSED': return { status: s.status, nextAttemptAtMs: null, error: null, reason: null, handlerVersion: s.handlerVersion, processedAtMs: s.nowMs, givenBack: 0 };
    case 'PENDING': return { status: s.status, nextAttemptAtMs: s.nextAttemptAtMs, error: s.error, reason: null, handlerVersion: null, processedAtMs: null, givenBack: s.attemptGivenBack ? 1 : 0 };
    case 'FAILED': return { status: s.status, nextAttemptAtMs: null, error: s.error, reason: s.reason, handlerVersion: null, processedAtMs: null, givenBack: 0 };
  }
}

/** The effect columns an EffectSettlement writes (effects keep `next_attempt_at`, NOT NULL, once terminal). */
export function effectSettlementColumns(s: EffectSettlement): {
  status: string; nextAttemptAtMs: number | null; error: string | null; reason: string | null; doneAtMs: number | null;
  /** Subtracted from attempt_count: 1 gives the claim's attempt back. */
  givenBack: number;
} {
  switch (s.status) {
    case 'DONE': return { status: s.status, nextAttemptAtMs: null, error: null, reason: null, doneAtMs: s.nowMs, givenBack: 0 };
    case 'PENDING': return { status: s.status, nextAttemptAtMs: s.nextAttemptAtMs, error: s.error, reason: null, doneAtMs: null, givenBack: s.attemptGivenBack ? 1 : 0 };
    // done_at is when the effect ended, either way: an operator listing FAILED ones sees when.
    case 'FAILED': return { status: s.status, nextAttemptAtMs: null, error: s.error, reason: s.reason, doneAtMs: s.nowMs, givenBack: 0 };
  }
}

/** The page size `listEvents` uses: the filter's limit, 50 by default, within 1…1000. */
export function eventListLimit(limit: number | undefined): number {
  return Math.min(Math.max(1, Math.floor(limit ?? 50)), 1000);
}

/**
 * The outbox columns a settle writes (`publishedAt` NULL: not yet, retry at `nextAttemptAtMs`;
 * a `reason`: parked, next_attempt_at NULL; `publishedTo` a JSON array of destination ids, NULL
 * when none has the message).
 */
export function outboxSettlementColumns({ s, publishedTo }: OutboxSettle): {
  publishedAt: number | null; nextAttemptAtMs: number | null; error: string | null; reason: string | null; publishedTo: string | null;
} {
  const to = publishedTo.length === 0 ? null : JSON.stringify(publishedTo);
  if (s.published) return { publishedAt: s.nowMs, nextAttemptAtMs: null, error: null, reason: null, publishedTo: to };
  if ('parked' in s) return { publishedAt: null, nextAttemptAtMs: null, error: s.error, reason: s.parked, publishedTo: to };
  return { publishedAt: null, nextAttemptAtMs: s.nextAttemptAtMs, error: s.error, reason: null, publishedTo: to };
}
