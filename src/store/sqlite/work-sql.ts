/**
 * The processing engine's SQL on SQLite, in plain sight. Times are Unix-ms INTEGERs; a list of
 * ids travels as one JSON array parameter (`json_each`), so every statement is prepared once.
 * Rows come out under the column names src/store/rows.ts maps for both stores.
 *
 * A leased claim is three statements in one BEGIN IMMEDIATE transaction (see work-ops.ts):
 * pick the due ids oldest-due first, lease them, read them back in that order. The write lock
 * makes pick-then-lease atomic; picking first is how the result keeps the due order (SQLite's
 * RETURNING sees only the new `next_attempt_at`).
 */

const ACTIVE = `status IN ('PENDING', 'PROCESSING')`;
const IDS = `(SELECT value FROM json_each(@ids))`;

// ── inbox ──────────────────────────────────────────────────────────────────────────────────

/** Matches the partial index webhook_inbox_due. */
export const DUE_INBOX = `
  SELECT inbox_id FROM webhook_inbox WHERE ${ACTIVE} AND next_attempt_at <= @now
  ORDER BY next_attempt_at, inbox_id LIMIT @n`;

export const LEASE_INBOX = `
  UPDATE webhook_inbox SET status = 'PROCESSING', lease_owner = @owner, lease_until = @leaseUntil,
    next_attempt_at = @leaseUntil, attempt_count = attempt_count + 1
  WHERE inbox_id IN ${IDS}`;

/** The leased rows in the order of @ids (their payloads are read apart: READ_PAYLOADS). */
export const READ_CLAIMED_INBOX = `
  SELECT w.* FROM json_each(@ids) j JOIN webhook_inbox w ON w.inbox_id = j.value ORDER BY j.key`;

/**
 * A claim's payloads in the order of @ids, read outside the claim's write lock, only where a
 * target opens them, and only as many as fit in @maxBytes (InboxStore.readPayloads; each counts
 * port.ts heldBytes: ciphertext + raw size). The sizes
 * come first, on their own (`lens`: length() of a BLOB reads its size, not its pages), so the
 * running total never touches a ciphertext and only the payloads that fit are read. (With
 * length(p.ciphertext) inside the window query, SQLite carried every ciphertext through the
 * window's sorter: 163 vs 3.3 ms for 8 of 100 one-MiB payloads, and 600 of them drained in 16 s
 * instead of 2.2–2.3 s: bench/big-bodies.ts, bench/RESULTS.md.)
 */
export const READ_PAYLOADS = `
  WITH lens AS (
    SELECT j.key AS ord, p.payload_id, length(p.ciphertext) + coalesce(p.raw_bytes, length(p.ciphertext)) AS len
    FROM json_each(@ids) j JOIN webhook_payload p ON p.payload_id = j.value
  ),
  sized AS (SELECT ord, payload_id, len, sum(len) OVER (ORDER BY ord) AS upto FROM lens)
  SELECT p.payload_id, p.key_id, p.nonce, p.ciphertext, p.encoding, p.raw_bytes
  FROM sized s JOIN webhook_payload p ON p.payload_id = s.payload_id
  WHERE s.upto = s.len OR s.upto <= @maxBytes
  ORDER BY s.ord`;

export const EXTEND_INBOX_LEASES = `
  UPDATE webhook_inbox SET lease_until = @leaseUntil, next_attempt_at = @leaseUntil
  WHERE inbox_id IN ${IDS} AND lease_owner = @owner AND status = 'PROCESSING'`;

/** Changes nothing unless `owner` still holds the lease. Parameters: rows.ts settlementColumns. */
export const SETTLE_INBOX = `
  UPDATE webhook_inbox SET status = @status, next_attempt_at = @nextAttemptAtMs, lease_owner = NULL, lease_until = NULL,
    attempt_count = attempt_count - @givenBack, last_error = COALESCE(@error, last_error), failure_reason = @reason,
    handler_version = COALESCE(@handlerVersion, handler_version), processed_at = COALESCE(@processedAtMs, processed_at)
  WHERE inbox_id = @id AND lease_owner = @owner AND status = 'PROCESSING'`;

// ── the batch protocol (StoreTx lockLeased, processed, finishBatch) ────────────────────────

/** No ON CONFLICT: a second row for the same (event, consumer) must fail (the PK is the guard). */
export const MARK_PROCESSED = `
  INSERT INTO processed_events (provider, endpoint_id, provider_event_id, consumer, inbox_id, handler_version, processed_at)
  VALUES (?, ?, ?, ?, ?, ?, ?)`;

/**
 * BatchOutcome.relayed: an outbox row written already published at accept (no broker route then;
 * published_to NULL) is owed now, due at once.
 */
export const RELAY_OUTBOX = `
  UPDATE webhook_outbox SET published_at = NULL, next_attempt_at = created_at
  WHERE inbox_id = ? AND published_at IS NOT NULL AND published_to IS NULL`;

export const LOCK_LEASED = `
  SELECT inbox_id FROM webhook_inbox
  WHERE inbox_id IN (SELECT value FROM json_each(@ids)) AND lease_owner = @owner AND status = 'PROCESSING'`;

export const PROCESSED_FOR_EVENT = `
  SELECT consumer FROM processed_events WHERE provider = ? AND endpoint_id = ? AND provider_event_id = ?`;

export const ADD_EFFECT = `
  INSERT INTO webhook_effects (effect_id, inbox_id, name, idempotency_key, data, next_attempt_at, created_at)
  VALUES (@effectId, @inboxId, @name, @idempotencyKey, @data, @nowMs, @nowMs)
  ON CONFLICT (idempotency_key) DO NOTHING`;

// ── effects ────────────────────────────────────────────────────────────────────────────────

export const DUE_EFFECTS = `
  SELECT effect_id FROM webhook_effects WHERE ${ACTIVE} AND next_attempt_at <= @now
  ORDER BY next_attempt_at, effect_id LIMIT @n`;

export const LEASE_EFFECTS = `
  UPDATE webhook_effects SET status = 'PROCESSING', lease_owner = @owner, lease_until = @leaseUntil,
    next_attempt_at = @leaseUntil, attempt_count = attempt_count + 1
  WHERE effect_id IN ${IDS}`;

export const READ_CLAIMED_EFFECTS = `
  SELECT e.* FROM json_each(@ids) j JOIN webhook_effects e ON e.effect_id = j.value ORDER BY j.key`;

/** Parameters: rows.ts effectSettlementColumns. */
export const SETTLE_EFFECT = `
  UPDATE webhook_effects SET status = @status, next_attempt_at = COALESCE(@nextAttemptAtMs, next_attempt_at),
    lease_owner = NULL, lease_until = NULL, last_error = COALESCE(@error, last_error), failure_reason = @reason,
    done_at = @doneAtMs, attempt_count = attempt_count - @givenBack
  WHERE effect_id = @id AND lease_owner = @owner AND status = 'PROCESSING'`;

export const LIST_EFFECTS = `SELECT * FROM webhook_effects WHERE inbox_id = ? ORDER BY created_at, effect_id`;

/** Matches the partial index webhook_effects_failed. Never the data column (it may carry customer details). */
export const LIST_FAILED_EFFECTS = `
  SELECT effect_id, inbox_id, name, idempotency_key, attempt_count, failure_reason, last_error, created_at, done_at
  FROM webhook_effects WHERE status = 'FAILED' ORDER BY created_at, effect_id LIMIT @limit`;

/**
 * An operator's requeue goes through its rows a chunk at a time (see REQUEUE_CHUNK), in the
 * order of the partial index that finds them, (failure_reason, rowid), each chunk after the
 * last one's end (@afterReason, @afterRowid; '' and 0 to begin). So every row is visited once:
 * a row a running worker fails (or parks) again while the requeue goes on is not sent back
 * again and counted again, chunk after chunk (with a relay refusing as fast, that went on for
 * as long as it kept up: "requeued 171000" of 5,000 parked rows).
 */
const CHUNK_AFTER = `(failure_reason, rowid) > (@afterReason, @afterRowid) ORDER BY failure_reason, rowid LIMIT @chunk`;
/** The rows of an operator's requeue chunk, @rows (a JSON array of the chunk's rowids). */
const CHUNK_ROWS = `rowid IN (SELECT value FROM json_each(@rows))`;

/** The next chunk of FAILED effects to retry: @ids NULL, every FAILED effect. */
export const RETRY_FAILED_EFFECTS_CHUNK = `
  SELECT rowid AS rid, failure_reason AS reason FROM webhook_effects
  WHERE status = 'FAILED' AND (@ids IS NULL OR effect_id IN ${IDS}) AND ${CHUNK_AFTER}`;

/**
 * FAILED → PENDING due now, a fresh attempt count, the same idempotency key; last_error stays as
 * the history. Any other status is left alone. The rows of one RETRY_FAILED_EFFECTS_CHUNK.
 */
export const RETRY_FAILED_EFFECTS = `
  UPDATE webhook_effects SET status = 'PENDING', attempt_count = 0, next_attempt_at = @now, failure_reason = NULL,
    lease_owner = NULL, lease_until = NULL, done_at = NULL
  WHERE ${CHUNK_ROWS} AND status = 'FAILED'`;

// ── outbox (no status: unpublished is the state; the lease is lease_owner + next_attempt_at) ──

/** The relay's heartbeat: the lease is next_attempt_at. */
export const EXTEND_OUTBOX_LEASES = `
  UPDATE webhook_outbox SET next_attempt_at = @leaseUntil
  WHERE outbox_id IN ${IDS} AND lease_owner = @owner AND published_at IS NULL`;

export const DUE_OUTBOX = `
  SELECT outbox_id FROM webhook_outbox WHERE published_at IS NULL AND next_attempt_at <= @now
  ORDER BY next_attempt_at, outbox_id LIMIT @n`;

export const LEASE_OUTBOX = `
  UPDATE webhook_outbox SET lease_owner = @owner, next_attempt_at = @leaseUntil, attempt_count = attempt_count + 1
  WHERE outbox_id IN ${IDS}`;

export const READ_CLAIMED_OUTBOX = `
  SELECT o.outbox_id, o.inbox_id, o.topic, o.attempt_count, o.published_to, i.provider, i.endpoint_id, i.provider_event_id,
    i.event_type, i.received_at
  FROM json_each(@ids) j JOIN webhook_outbox o ON o.outbox_id = j.value JOIN webhook_inbox i ON i.inbox_id = o.inbox_id
  ORDER BY j.key`;

/**
 * @publishedAt NULL = not yet: retry at @nextAttemptAtMs, or with a @reason parked (never due).
 * @publishedTo: who has it now. Parameters: rows.ts outboxSettlementColumns.
 */
export const SETTLE_OUTBOX = `
  UPDATE webhook_outbox SET published_at = @publishedAt,
    next_attempt_at = CASE WHEN @reason IS NULL THEN COALESCE(@nextAttemptAtMs, next_attempt_at) END,
    lease_owner = NULL, last_error = COALESCE(@error, last_error), failure_reason = @reason, published_to = @publishedTo
  WHERE outbox_id = @id AND lease_owner = @owner AND published_at IS NULL`;

/** Matches the partial index webhook_outbox_parked. */
const parked = (t: string) => `${t}.published_at IS NULL AND ${t}.failure_reason IS NOT NULL`;

export const LIST_PARKED_OUTBOX = `
  SELECT o.outbox_id, o.inbox_id, i.endpoint_id, i.event_type, o.created_at, o.attempt_count, o.published_to, o.failure_reason, o.last_error
  FROM webhook_outbox o JOIN webhook_inbox i ON i.inbox_id = o.inbox_id
  WHERE ${parked('o')} ORDER BY o.created_at, o.outbox_id LIMIT @limit`;

/** The next chunk of parked rows to requeue (CHUNK_AFTER): @ids NULL, every parked row. */
export const REQUEUE_PARKED_OUTBOX_CHUNK = `
  SELECT rowid AS rid, failure_reason AS reason FROM webhook_outbox
  WHERE ${parked('webhook_outbox')} AND (@ids IS NULL OR outbox_id IN ${IDS}) AND ${CHUNK_AFTER}`;

/** Parked → due now, a fresh attempt count; last_error and published_to stay. The rows of one REQUEUE_PARKED_OUTBOX_CHUNK. */
export const REQUEUE_PARKED_OUTBOX = `
  UPDATE webhook_outbox SET next_attempt_at = @now, attempt_count = 0, failure_reason = NULL
  WHERE ${CHUNK_ROWS} AND ${parked('webhook_outbox')}`;

// ── operator queries ───────────────────────────────────────────────────────────────────────

export const GET_EVENT = `SELECT * FROM webhook_inbox WHERE inbox_id = ?`;

const STATUSES: readonly string[] = ['PENDING', 'PROCESSING', 'PROCESSED', 'FAILED'];

/**
 * Newest first (UUIDv7 ids sort by arrival); only the filters given become conditions (one
 * statement per shape), and a known status is written into the SQL: SQLite plans a statement
 * when it is prepared, so only a literal `status = 'FAILED'` lets it use the partial indexes of
 * the FAILED rows (`@status IS NULL OR status = @status` walked the whole inbox). Parameters:
 * the filter's own names, and `limit`.
 */
export function listEventsSql(f: { status?: string; endpointId?: string; eventType?: string; failureReason?: string; before?: string }): string {
  const where: string[] = [];
  if (f.status !== undefined) where.push(STATUSES.includes(f.status) ? `status = '${f.status}'` : 'status = @status');
  if (f.endpointId !== undefined) where.push('endpoint_id = @endpointId');
  if (f.eventType !== undefined) where.push('event_type = @eventType');
  if (f.failureReason !== undefined) where.push(`status = 'FAILED' AND failure_reason = @failureReason`);
  if (f.before !== undefined) where.push('inbox_id < @before');
  return `SELECT * FROM webhook_inbox ${where.length ? `WHERE ${where.join(' AND ')}` : ''} ORDER BY inbox_id DESC LIMIT @limit`;
}

/** FAILED → PENDING due now with a fresh attempt budget; last_error stays as the history. */
const REQUEUE_SET = `status = 'PENDING', attempt_count = 0, next_attempt_at = @now, failure_reason = NULL,
  lease_owner = NULL, lease_until = NULL`;

/** Not a row whose payload retention deleted: processing it again could only fail. */
export const RETRY_FAILED = `UPDATE webhook_inbox SET ${REQUEUE_SET} WHERE inbox_id = @id AND status = 'FAILED' AND raw_payload_ref IS NOT NULL`;
export const INBOX_STATE = `SELECT status, raw_payload_ref IS NULL AS purged FROM webhook_inbox WHERE inbox_id = ?`;

/** The next chunk of FAILED rows with one of @reasons to requeue (CHUNK_AFTER). */
export const REQUEUE_FAILED_CHUNK = `
  SELECT rowid AS rid, failure_reason AS reason FROM webhook_inbox
  WHERE status = 'FAILED' AND failure_reason IN (SELECT value FROM json_each(@reasons)) AND ${CHUNK_AFTER}`;

/**
 * The rows of one REQUEUE_FAILED_CHUNK, but those whose payload retention deleted (they could only
 * fail again). Tested here, by key, so the chunk's read stays on its covering index.
 */
export const REQUEUE_FAILED = `UPDATE webhook_inbox SET ${REQUEUE_SET} WHERE ${CHUNK_ROWS} AND status = 'FAILED' AND raw_payload_ref IS NOT NULL`;

/** Its condition is a partial index's predicate, as on PostgreSQL (postgres/work-sql.ts BACKLOG). */
export const BACKLOG = `
  SELECT endpoint_id, event_type, status, count(*) AS count, min(received_at) AS oldest_received_at
  FROM webhook_inbox WHERE status IN ('PENDING', 'PROCESSING')
  GROUP BY endpoint_id, event_type, status ORDER BY endpoint_id, event_type, status`;

/**
 * Rows for rows.ts toQueueStats, as on PostgreSQL (postgres/work-sql.ts QUEUE_STATS): the FAILED
 * inbox rows counted from a covering partial index (read at every scrape, on the reader thread:
 * SqliteStore.stats), the unpublished outbox (how much of it is parked, and its oldest row not
 * parked, for the relay's lag), and effects still to do or FAILED (not DONE: see migration 5).
 */
export const QUEUE_STATS = `
  SELECT 'inbox_failed' AS kind, count(*) AS count, NULL AS oldest FROM webhook_inbox WHERE status = 'FAILED'
  UNION ALL
  SELECT 'outbox', count(*) AS count, min(created_at) FILTER (WHERE NOT (${parked('webhook_outbox')})) AS oldest FROM webhook_outbox WHERE published_at IS NULL
  UNION ALL
  SELECT 'outbox_parked', count(*), NULL FROM webhook_outbox WHERE ${parked('webhook_outbox')}
  UNION ALL
  SELECT status, count(*), NULL FROM webhook_effects WHERE status IN ('PENDING', 'PROCESSING') GROUP BY status
  UNION ALL
  SELECT 'FAILED', count(*), NULL FROM webhook_effects WHERE status = 'FAILED'`;

/** Payload key rotation (`keys`): payloads per key id. No index on key_id: an operator's count, read rarely. */
export const PAYLOAD_KEY_USAGE = `
  SELECT key_id, count(*) AS payloads FROM webhook_payload GROUP BY key_id ORDER BY key_id`;

/** The newest payloads an event points at under a key, and the newest effects sealed under it (postgres/work-sql.ts NEWEST_PAYLOAD_UNDER). */
export const NEWEST_PAYLOAD_UNDER = `
  SELECT p.payload_id, i.provider, i.endpoint_id, i.provider_event_id
  FROM webhook_payload p JOIN webhook_inbox i ON i.raw_payload_ref = p.payload_id
  WHERE p.key_id = @keyId ORDER BY p.payload_id DESC LIMIT @limit`;
export const NEWEST_EFFECT_UNDER = `
  SELECT effect_id, idempotency_key, data FROM webhook_effects
  WHERE substr(data, 1, length(@prefix)) = @prefix ORDER BY effect_id DESC LIMIT @limit`;

/**
 * Payloads under another key than @keyId, after @after in id order (the primary key: each page
 * starts where the last ended). `> coalesce(@after, '')`, not `@after IS NULL OR …`: SQLite plans
 * the OR as a scan of the key from its start, every page (test/store/sqlite-plans.test.ts).
 */
export const PAYLOADS_TO_RESEAL = `
  SELECT p.payload_id, i.provider, i.endpoint_id, i.provider_event_id
  FROM webhook_payload p JOIN webhook_inbox i ON i.raw_payload_ref = p.payload_id
  WHERE p.key_id <> @keyId AND p.payload_id > coalesce(@after, '')
  ORDER BY p.payload_id LIMIT @limit`;

/** Effects by the key their data is sealed under (its base64url form; NULL: stored plain). */
export const EFFECT_KEY_USAGE = `
  SELECT CASE WHEN substr(data, 1, 7) = 'sealed:' THEN substr(data, 8, instr(data, '.') - 8) END AS sealed_key_id, count(*) AS effects
  FROM webhook_effects GROUP BY 1 ORDER BY 1`;

/** Effects whose data is not sealed under the current key (@prefix), after @after in id order. */
export const EFFECTS_TO_RESEAL = `
  SELECT effect_id, idempotency_key, data FROM webhook_effects
  WHERE substr(data, 1, length(@prefix)) <> @prefix AND effect_id > coalesce(@after, '')
  ORDER BY effect_id LIMIT @limit`;

/** One effect's data sealed again, only while it still holds what was read. */
export const RESEAL_EFFECT = `UPDATE webhook_effects SET data = @data WHERE effect_id = @effectId AND data = @oldData`;

/** One payload's new sealing, only while it still holds the nonce it was read with. */
export const RESEAL_PAYLOAD = `
  UPDATE webhook_payload SET key_id = @keyId, nonce = @nonce, ciphertext = @ciphertext WHERE payload_id = @payloadId AND nonce = @oldNonce`;
