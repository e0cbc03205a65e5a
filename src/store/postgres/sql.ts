/** The SQL the PostgreSQL adapter runs, in plain sight. */

const statements = new Map<number, string>();

/**
 * The row counts an accept statement is prepared for (each ~1.5× the last). A batch of n rows
 * runs the smallest that fits, its spare rows all NULL (the statement skips them). Each count is
 * a statement every connection prepares once, and a first execution with its parse and generic
 * plan cost about twice a prepared one (13 rows: +5 ms; 100: +23 ms, measured here): one
 * statement per exact count meant up to maxBatch of those per connection, paid while the first
 * seconds of load queued behind them.
 */
const SIZES = [1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1000];

/** The statement size for a batch of n records (n itself past the last size). */
export function acceptSize(n: number): number {
  return SIZES.find((s) => s >= n) ?? n;
}

/** The fixed statement sizes that batches of 1 to `maxBatch` records run. */
export function acceptSizesUpTo(maxBatch: number): number[] {
  const last = acceptSize(maxBatch);
  return SIZES.filter((s) => s <= last);
}

/**
 * A new row's next_attempt_at: its received_at, or the database's now() if that is earlier. The
 * receiving process's clock is watched by nothing (clock-skew.ts runs with the workers, against
 * the database's), so a `serve` whose clock ran minutes ahead stored each event minutes in the
 * workers' future, and no worker touched it for that long.
 */
const DUE_AT_ONCE = 'LEAST(to_timestamp(received_ms / 1000.0), now())';

/**
 * One statement = one transaction for a whole batch: insert the inbox rows that win their
 * unique key (ON CONFLICT DO NOTHING — atomic, never read-then-write), and, for exactly
 * those winners, their encrypted payload and outbox rows. Returns the winners' ids.
 * Rows whose inbox_id is NULL are padding (acceptSize) and insert nothing.
 * Each bytea is its own parameter, so the driver sends it in binary (no hex/escape blow-up).
 * No NOTIFY in here: see NOTIFY_NEW_WORK.
 */
export function acceptStatement(rows: number, cols: number): string {
  let sql = statements.get(rows);
  if (sql) return sql;
  const tuples: string[] = [];
  for (let r = 0; r < rows; r++) {
    const p = (c: number) => `$${r * cols + c}`;
    tuples.push(`(${p(1)}::uuid, ${p(2)}::uuid, ${p(3)}::uuid, ${p(4)}::text, ${p(5)}::text, ${p(6)}::text, ${p(7)}::text,
      ${p(8)}::text, ${p(9)}::text, ${p(10)}::float8, ${p(11)}::float8, ${p(12)}::bytea, ${p(13)}::text,
      ${p(14)}::text, ${p(15)}::bytea, ${p(16)}::bytea, ${p(17)}::text, ${p(18)}::boolean, ${p(19)}::text, ${p(20)}::int4)`);
  }
  sql = `
    WITH input (inbox_id, payload_id, outbox_id, provider, endpoint_id, provider_event_id, event_type,
                object_id, object_version, provider_created_ms, received_ms, payload_hash, matched_secret_version,
                key_id, nonce, ciphertext, topic, relay, encoding, raw_bytes) AS (
      VALUES ${tuples.join(',\n')}
    ),
    ins AS (
      INSERT INTO webhook_inbox (inbox_id, provider, endpoint_id, provider_event_id, event_type, object_id,
        object_version, provider_created_at, received_at, raw_payload_ref, payload_hash, matched_secret_version,
        status, attempt_count, next_attempt_at)
      SELECT inbox_id, provider, endpoint_id, provider_event_id, event_type, object_id,
        object_version, to_timestamp(provider_created_ms / 1000.0), to_timestamp(received_ms / 1000.0), payload_id,
        payload_hash, matched_secret_version, 'PENDING', 0, ${DUE_AT_ONCE}
      FROM input WHERE inbox_id IS NOT NULL
      ON CONFLICT (provider, endpoint_id, provider_event_id) DO NOTHING
      RETURNING inbox_id
    ),
    pay AS (
      INSERT INTO webhook_payload (payload_id, key_id, nonce, ciphertext, created_at, encoding, raw_bytes)
      SELECT i.payload_id, i.key_id, i.nonce, i.ciphertext, to_timestamp(i.received_ms / 1000.0), i.encoding, i.raw_bytes
      FROM input i JOIN ins USING (inbox_id)
    ),
    obx AS (
      INSERT INTO webhook_outbox (outbox_id, inbox_id, topic, created_at, next_attempt_at, published_at)
      SELECT i.outbox_id, i.inbox_id, i.topic, to_timestamp(i.received_ms / 1000.0),
        CASE WHEN i.relay THEN ${DUE_AT_ONCE} END, CASE WHEN NOT i.relay THEN to_timestamp(i.received_ms / 1000.0) END
      FROM input i JOIN ins USING (inbox_id)
    )
    SELECT inbox_id::text FROM ins`;
  statements.set(rows, sql);
  return sql;
}

/** The channel new inbox rows are announced on (the engine LISTENs to it: onNewWork). */
export const NEW_WORK_CHANNEL = 'webhook_inbox';

/**
 * Sent after an accept that inserted rows has committed (postgres/notifier.ts says why not
 * inside it). A wake-up needs no durability: set_config(…, true) lets this statement's own
 * transaction commit without waiting for the WAL flush.
 */
export const NOTIFY_NEW_WORK = {
  name: 'wi_notify_new_work',
  text: `SELECT set_config('synchronous_commit', 'off', true), pg_notify('${NEW_WORK_CHANNEL}', '')`,
};

/**
 * The winners of keys that lost their insert: one unique-index lookup per key. The accept pool
 * keeps generic plans, made at a statement's first use, which on a new database is an empty
 * table: a join of the keys with webhook_inbox was then planned as a hash join over a full scan
 * of the inbox, kept for good (on a server without autovacuum, never re-planned), so every
 * batch holding a duplicate read the whole inbox. A lateral lookup with LIMIT 1 is planned as an
 * index probe whatever the table's size (test/store/postgres-plans.test.ts).
 */
export const SELECT_WINNERS = `
  SELECT w.inbox_id::text AS inbox_id, w.provider, w.endpoint_id, w.provider_event_id
  FROM unnest($1::text[], $2::text[], $3::text[]) AS k(provider, endpoint_id, provider_event_id)
  CROSS JOIN LATERAL (
    SELECT i.inbox_id, i.provider, i.endpoint_id, i.provider_event_id FROM webhook_inbox i
    WHERE i.provider = k.provider AND i.endpoint_id = k.endpoint_id AND i.provider_event_id = k.provider_event_id
    LIMIT 1
  ) w`;

/**
 * Transmission bindings (InboxStore.bindTransmissions), first bytes win: the new ids' rows are
 * returned. DO NOTHING waits for a concurrent insert of the same id to end, and skips a second
 * row of one id in this statement, so READ_TRANSMISSIONS, a statement of its own, then sees
 * every winner.
 */
export const BIND_TRANSMISSIONS = {
  name: 'wi_bind_transmissions',
  text: `
  INSERT INTO webhook_transmission (provider, endpoint_id, transmission_id, payload_hash, received_at)
  SELECT provider, endpoint_id, transmission_id, payload_hash, to_timestamp(received_ms / 1000.0)
  FROM unnest($1::text[], $2::text[], $3::text[], $4::bytea[], $5::float8[])
    WITH ORDINALITY AS t(provider, endpoint_id, transmission_id, payload_hash, received_ms, n)
  ORDER BY n
  ON CONFLICT (provider, transmission_id) DO NOTHING
  RETURNING provider, transmission_id, payload_hash`,
};
export const READ_TRANSMISSIONS = {
  name: 'wi_read_transmissions',
  text: `
  SELECT w.provider, w.transmission_id, w.payload_hash
  FROM unnest($1::text[], $2::text[]) AS k(provider, transmission_id)
  JOIN webhook_transmission w ON w.provider = k.provider AND w.transmission_id = k.transmission_id`,
};

/** The oldest of a provider's bindings received before a time, at most a limit of them (InboxStore.pruneTransmissions). */
export const PRUNE_TRANSMISSIONS = {
  name: 'wi_prune_transmissions',
  text: `
  DELETE FROM webhook_transmission w
  USING (
    SELECT provider, transmission_id FROM webhook_transmission
    WHERE provider = $1 AND received_at < to_timestamp($2::float8 / 1000.0)
    ORDER BY received_at
    LIMIT $3
  ) old
  WHERE w.provider = old.provider AND w.transmission_id = old.transmission_id`,
};

/**
 * Retention (InboxStore.purgePayloads; $5 the status): payload ids are UUIDv7 minted from the
 * receipt time, so `raw_payload_ref` between the cursor and the cutoff's lowest id is a range of
 * the webhook_inbox_payload index; `received_at` keeps the cutoff exact whatever an id holds. The
 * foreign key sets each inbox row's `raw_payload_ref` to NULL. FOR UPDATE: a FAILED row that an
 * operator requeues meanwhile is read again once that commits, no longer matches, and keeps its
 * payload (without it, the FK's update went ahead on the requeued row). (No max() for uuid: as
 * text, lowercase hex sorts as the bytes do.)
 */
export const PURGE_PAYLOADS = {
  name: 'wi_purge_payloads',
  text: `
  WITH doomed AS (
    SELECT raw_payload_ref FROM webhook_inbox
    WHERE raw_payload_ref > $1::uuid AND raw_payload_ref < $2::uuid AND status = $5
      AND received_at < to_timestamp($3::float8 / 1000.0)
    ORDER BY raw_payload_ref
    LIMIT $4
    FOR UPDATE
  ), gone AS (
    DELETE FROM webhook_payload p USING doomed d WHERE p.payload_id = d.raw_payload_ref RETURNING p.payload_id
  )
  SELECT count(*)::int AS deleted, max(payload_id::text) AS last FROM gone`,
};

/** A timestamptz as Unix ms (float8: keeps sub-ms digits, arrives as a JS number). */
export const epochMs = (col: string) => `(extract(epoch FROM ${col}) * 1000)::float8`;

export const SELECT_INBOX = `
  SELECT inbox_id::text, provider, endpoint_id, provider_event_id, event_type, object_id, object_version,
    ${epochMs('provider_created_at')} AS provider_created_at, ${epochMs('received_at')} AS received_at,
    raw_payload_ref::text, payload_hash, matched_secret_version, status, attempt_count,
    ${epochMs('next_attempt_at')} AS next_attempt_at, ${epochMs('lease_until')} AS lease_until, last_error, verification
  FROM webhook_inbox WHERE inbox_id = $1`;

/** Notices (unsigned, coalescing): serialise per key, find a row still PENDING, mark a new row. */
export const LOCK_NOTICE_KEY = `SELECT pg_advisory_xact_lock(hashtextextended($1::text || '/' || $2::text || '/' || $3::text, 0))`;
export const PENDING_NOTICE = `
  SELECT inbox_id::text FROM webhook_inbox
  WHERE provider = $1 AND endpoint_id = $2 AND coalesce_key = $3 AND coalesce_key IS NOT NULL AND status = 'PENDING'
  ORDER BY inbox_id LIMIT 1`;
export const MARK_NOTICE = `UPDATE webhook_inbox SET verification = 'fetch-required', coalesce_key = $2 WHERE inbox_id = $1`;

export const COUNT_ROWS = `
  SELECT (SELECT count(*) FROM webhook_inbox) AS inbox,
         (SELECT count(*) FROM webhook_outbox) AS outbox,
         (SELECT count(*) FROM webhook_payload) AS payload`;
