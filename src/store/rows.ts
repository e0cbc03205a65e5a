import type { InboxRow, StoredPayload } from './port.js';

/**
 * Row → port mapping shared by both stores. Both select the same column names; timestamps
 * arrive as Unix ms (SQLite INTEGER, PostgreSQL epoch expression) and blobs as byte arrays.
 */
export type RawRow = Record<string, unknown>;

const ms = (v: unknown): number | null => (v === null || v === undefined ? null : Number(v));
/** A Buffer view (no copy) of bytes that crossed a thread as a plain Uint8Array. */
export const bytes = (v: unknown): Buffer => {
  const u = v as Uint8Array;
  return Buffer.isBuffer(u) ? u : Buffer.from(u.buffer, u.byteOffset, u.byteLength);
};

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
  };
}

export function toStoredPayload(r: RawRow): StoredPayload {
  return { payloadId: r.payload_id as string, keyId: r.key_id as string, nonce: bytes(r.nonce), ciphertext: bytes(r.ciphertext) };
}
