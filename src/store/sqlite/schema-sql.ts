/** The SQL the SQLite worker runs; kept apart from the thread plumbing so it reads as plain SQL. */
export const INSERT_INBOX = `
  INSERT INTO webhook_inbox (inbox_id, provider, endpoint_id, provider_event_id, event_type, object_id,
    object_version, provider_created_at, received_at, raw_payload_ref, payload_hash, matched_secret_version,
    status, attempt_count, next_attempt_at)
  VALUES (@inboxId, @provider, @endpointId, @providerEventId, @eventType, @objectId,
    @objectVersion, @providerCreatedAtMs, @receivedAtMs, @payloadId, @payloadHash, @matchedSecretVersion,
    'PENDING', 0, @receivedAtMs)
  ON CONFLICT (provider, endpoint_id, provider_event_id) DO NOTHING
  RETURNING inbox_id`;

export const INSERT_PAYLOAD = `
  INSERT INTO webhook_payload (payload_id, key_id, nonce, ciphertext, created_at, encoding, raw_bytes)
  VALUES (?, ?, ?, ?, ?, ?, ?)`;

export const INSERT_OUTBOX = `
  INSERT INTO webhook_outbox (outbox_id, inbox_id, topic, created_at, next_attempt_at, published_at) VALUES (?, ?, ?, ?, ?, ?)`;

export const SELECT_WINNER = `
  SELECT inbox_id FROM webhook_inbox WHERE provider = ? AND endpoint_id = ? AND provider_event_id = ?`;

/** A transmission's binding (InboxStore.bindTransmissions); the one writer makes look-then-insert exact. */
export const READ_TRANSMISSION = `
  SELECT payload_hash FROM webhook_transmission WHERE provider = ? AND transmission_id = ?`;
export const INSERT_TRANSMISSION = `
  INSERT INTO webhook_transmission (provider, endpoint_id, transmission_id, payload_hash, received_at) VALUES (?, ?, ?, ?, ?)`;

/** The oldest of a provider's bindings received before a time, at most a limit of them (InboxStore.pruneTransmissions). */
export const PRUNE_TRANSMISSIONS = `
  DELETE FROM webhook_transmission WHERE (provider, transmission_id) IN (
    SELECT provider, transmission_id FROM webhook_transmission
    WHERE provider = ? AND received_at < ?
    ORDER BY received_at
    LIMIT ?)`;

/**
 * Retention (InboxStore.purgePayloads): payload ids are UUIDv7 minted from the receipt time, so
 * `raw_payload_ref` between the cursor and the cutoff's lowest id is a range of the
 * webhook_inbox_payload index; `received_at` keeps the cutoff exact whatever an id holds. The
 * foreign key sets each inbox row's `raw_payload_ref` to NULL. (One writer: nothing requeues a
 * FAILED row between the read and the delete.)
 */
export const PURGE_PAYLOADS = `
  DELETE FROM webhook_payload WHERE payload_id IN (
    SELECT raw_payload_ref FROM webhook_inbox
    WHERE raw_payload_ref > ? AND raw_payload_ref < ? AND status = ? AND received_at < ?
    ORDER BY raw_payload_ref
    LIMIT ?)
  RETURNING payload_id`;

/** Notices (unsigned, coalescing): a row with the same key still PENDING answers the new notice. */
export const PENDING_NOTICE = `
  SELECT inbox_id FROM webhook_inbox
  WHERE provider = ? AND endpoint_id = ? AND coalesce_key = ? AND coalesce_key IS NOT NULL AND status = 'PENDING'
  ORDER BY inbox_id LIMIT 1`;
export const MARK_NOTICE = `UPDATE webhook_inbox SET verification = 'fetch-required', coalesce_key = ? WHERE inbox_id = ?`;

export const SELECT_INBOX = `SELECT * FROM webhook_inbox WHERE inbox_id = ?`;
export const COUNT_ROWS = `
  SELECT (SELECT count(*) FROM webhook_inbox) AS inbox,
         (SELECT count(*) FROM webhook_outbox) AS outbox,
         (SELECT count(*) FROM webhook_payload) AS payload`;
