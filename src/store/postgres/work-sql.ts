/**
 * The processing engine's SQL on PostgreSQL, in plain sight. The port speaks Unix ms: times go
 * in as `to_timestamp($n / 1000.0)` and come out as epoch-ms float8 under the column's own name,
 * so src/store/rows.ts maps both stores' rows alike.
 */
import { effectSettlementColumns, outboxSettlementColumns, settlementColumns } from '../rows.js';
import type { BatchOutcome, EffectSettlement, OutboxSettle } from '../work-port.js';
import { inLockOrder } from './lock-order.js';
import { epochMs } from './sql.js';

const ts = (param: string) => `to_timestamp(${param} / 1000.0)`;

/**
 * A named statement: each connection parses it once. The work pool plans it at every call
 * (plan_cache_mode=force_custom_plan, store.ts), for the tables as they are then.
 */
export interface Statement { readonly name: string; readonly text: string }
const named = (name: string, text: string): Statement => ({ name: `wi_${name}`, text });
/**
 * Statements that may run inside a handler's transaction, where plan_cache_mode is back to
 * `auto` for the handler's own SQL (tx.ts): there a named statement would settle on a generic
 * plan after five runs, made perhaps while the table was still empty, and a plan made while
 * processed_events was empty scanned the whole table on every batch later (measured: 64-key
 * lookups took 21 ms at 40 k rows, against 1 ms for a fresh plan). Unnamed, they are planned at
 * every execution.
 */
const planned = (text: string): Statement => ({ name: '', text });

const INBOX_COLS = (t: string) => `${t}.inbox_id::text AS inbox_id, ${t}.provider, ${t}.endpoint_id, ${t}.provider_event_id,
  ${t}.event_type, ${t}.object_id, ${t}.object_version, ${epochMs(`${t}.provider_created_at`)} AS provider_created_at,
  ${epochMs(`${t}.received_at`)} AS received_at, ${t}.raw_payload_ref::text AS raw_payload_ref, ${t}.payload_hash,
  ${t}.matched_secret_version, ${t}.status, ${t}.attempt_count, ${epochMs(`${t}.next_attempt_at`)} AS next_attempt_at,
  ${epochMs(`${t}.lease_until`)} AS lease_until, ${t}.last_error, ${t}.lease_owner, ${t}.failure_reason,
  ${t}.handler_version, ${epochMs(`${t}.processed_at`)} AS processed_at, ${t}.verification`;

const EFFECT_COLS = (t: string) => `${t}.effect_id::text AS effect_id, ${t}.inbox_id::text AS inbox_id, ${t}.name,
  ${t}.idempotency_key, ${t}.data, ${t}.status, ${t}.attempt_count, ${epochMs(`${t}.next_attempt_at`)} AS next_attempt_at,
  ${t}.last_error, ${t}.failure_reason, ${epochMs(`${t}.created_at`)} AS created_at, ${epochMs(`${t}.done_at`)} AS done_at`;

/**
 * One leased claim: lock up to $1 due rows (SKIP LOCKED: concurrent claimers take disjoint
 * rows instead of queueing), push their `next_attempt_at` to the lease end (so an abandoned
 * lease becomes due again by the same index), and return them oldest-due first.
 * The update finds its rows by `= ANY(ARRAY(…))`, a primary-key lookup at any plausible row
 * estimate: a join on the due rows, estimated from `LIMIT $1` in a generic plan at 10% of the
 * table, hashed the whole table. (A plan made for empty tables scans whatever the form; the work
 * pool plans each call: store.ts WORK_PLANS.)
 * $1 n, $2 owner, $3 now ms, $4 lease end ms. `select` reads `upd` (updated rows) and `due`.
 */
function leasedClaim(table: string, id: string, due: string, set: string, select: string): string {
  return `
    WITH due AS (
      SELECT ${id}, next_attempt_at AS due_at FROM ${table}
      WHERE ${due} AND next_attempt_at <= ${ts('$3')}
      ORDER BY next_attempt_at LIMIT $1
      FOR UPDATE SKIP LOCKED
    ),
    upd AS (
      UPDATE ${table} w SET lease_owner = $2, next_attempt_at = ${ts('$4')}, attempt_count = w.attempt_count + 1${set}
      WHERE w.${id} = ANY (ARRAY(SELECT ${id} FROM due))
      RETURNING w.*
    )
    ${select}
    ORDER BY due.due_at, upd.${id}`;
}

const ACTIVE = `status IN ('PENDING', 'PROCESSING')`;
const LEASE = `, status = 'PROCESSING', lease_until = ${ts('$4')}`;

export const CLAIM_INBOX = named('claim_inbox', leasedClaim('webhook_inbox', 'inbox_id', ACTIVE, LEASE, `
  SELECT ${INBOX_COLS('upd')} FROM upd JOIN due USING (inbox_id)`));

/**
 * A claim's payloads in the order asked, read only for the events whose targets open the body,
 * and only as many as fit in $2 bytes (InboxStore.readPayloads; each counts port.ts heldBytes:
 * ciphertext + raw size). bytea comes back
 * hex-encoded (the pg driver reads binary results as strings), ~20 KB per 10 KiB body: that
 * encoding, its decoding and the TOAST reads were half of a claim's cost on both sides.
 */
export const READ_PAYLOADS = named('read_payloads', `
  WITH lens AS (
    -- octet_length of a TOASTed value reads its header, not its chunks
    SELECT a.ord, p.payload_id, octet_length(p.ciphertext) + coalesce(p.raw_bytes, octet_length(p.ciphertext)) AS len
    FROM unnest($1::uuid[]) WITH ORDINALITY a (id, ord) JOIN webhook_payload p ON p.payload_id = a.id
  ),
  sized AS (SELECT ord, payload_id, len, sum(len) OVER (ORDER BY ord) AS upto FROM lens)
  SELECT p.payload_id::text AS payload_id, p.key_id, p.nonce, p.ciphertext, p.encoding, p.raw_bytes
  FROM sized s JOIN webhook_payload p ON p.payload_id = s.payload_id
  WHERE s.upto = s.len OR s.upto <= $2
  ORDER BY s.ord`);

export const CLAIM_EFFECTS = named('claim_effects', leasedClaim('webhook_effects', 'effect_id', ACTIVE, LEASE, `
  SELECT ${EFFECT_COLS('upd')} FROM upd JOIN due USING (effect_id)`));

/** The outbox has no status: unpublished is the state, the lease is `lease_owner` + `next_attempt_at`. */
export const CLAIM_OUTBOX = named('claim_outbox', leasedClaim('webhook_outbox', 'outbox_id', 'published_at IS NULL', '', `
  SELECT upd.outbox_id::text AS outbox_id, upd.inbox_id::text AS inbox_id, upd.topic, i.provider, i.endpoint_id,
    i.provider_event_id, i.event_type, ${epochMs('i.received_at')} AS received_at, upd.attempt_count,
    upd.published_to::text AS published_to
  FROM upd JOIN due USING (outbox_id) JOIN webhook_inbox i ON i.inbox_id = upd.inbox_id`));

/**
 * Row locks in inbox_id order (ORDER BY, then FOR UPDATE), as FINISH_BATCH takes them: the
 * heartbeat runs on its own connection beside its batch's settle, and two statements locking
 * the same rows in different orders can deadlock (40P01, one of them aborted after a second).
 */
export const EXTEND_INBOX_LEASES = named('extend_inbox_leases', `
  UPDATE webhook_inbox w SET lease_until = ${ts('$3')}, next_attempt_at = ${ts('$3')}
  FROM (SELECT inbox_id FROM webhook_inbox WHERE inbox_id = ANY($1::uuid[]) AND lease_owner = $2 AND status = 'PROCESSING'
        ORDER BY inbox_id FOR UPDATE) l
  WHERE w.inbox_id = l.inbox_id AND w.lease_owner = $2 AND w.status = 'PROCESSING'`);

/**
 * Settles a leased effect; changes nothing if `owner` lost the lease. NULL parameters keep what
 * is there (last_error); `next_attempt_at` is NOT NULL, so terminal states keep it.
 * $1 id, $2 owner, $3… settleEffectValues.
 */
export const SETTLE_EFFECT = named('settle_effect', `
  UPDATE webhook_effects SET status = $3, next_attempt_at = COALESCE(${ts('$4')}, next_attempt_at),
    lease_owner = NULL, lease_until = NULL, last_error = COALESCE($5, last_error), failure_reason = $6,
    done_at = ${ts('$7')}, attempt_count = attempt_count - $8::int
  WHERE effect_id = $1 AND lease_owner = $2 AND status = 'PROCESSING'`);

export function settleEffectValues(s: EffectSettlement): unknown[] {
  const c = effectSettlementColumns(s);
  return [c.status, c.nextAttemptAtMs, c.error, c.reason, c.doneAtMs, c.givenBack];
}

/**
 * The relay's heartbeat: the lease is `next_attempt_at`. Never beside the same claim's settle
 * (relay.ts stops it first), so the two never lock its rows in different orders.
 */
export const EXTEND_OUTBOX_LEASES = named('extend_outbox_leases', `
  UPDATE webhook_outbox SET next_attempt_at = ${ts('$3')}
  WHERE outbox_id = ANY($1::uuid[]) AND lease_owner = $2 AND published_at IS NULL`);

/**
 * Settles a relay claim's rows in one statement; rows `owner` no longer leases are left alone.
 * A NULL published_at: not yet, retry at next_at, or with a reason parked (never due);
 * published_to: who has it now (JSON text). $1… settleOutboxBatchValues, $5 owner.
 */
export const SETTLE_OUTBOX_BATCH = named('settle_outbox_batch', `
  UPDATE webhook_outbox o SET published_at = ${ts('s.published_at')},
    next_attempt_at = CASE WHEN s.reason IS NULL THEN COALESCE(${ts('s.next_at')}, o.next_attempt_at) END,
    lease_owner = NULL, last_error = COALESCE(s.error, o.last_error), failure_reason = s.reason, published_to = s.published_to::jsonb
  FROM unnest($1::uuid[], $2::float8[], $3::float8[], $4::text[], $6::text[], $7::text[]) AS s(outbox_id, published_at, next_at, error, published_to, reason)
  WHERE o.outbox_id = s.outbox_id AND o.lease_owner = $5 AND o.published_at IS NULL
  RETURNING o.outbox_id::text AS outbox_id`);

export function settleOutboxBatchValues(owner: string, settles: readonly OutboxSettle[]): unknown[] {
  const cols = settles.map((x) => ({ id: x.outboxId, ...outboxSettlementColumns(x) }));
  return [cols.map((c) => c.id), cols.map((c) => c.publishedAt), cols.map((c) => c.nextAttemptAtMs), cols.map((c) => c.error), owner,
    cols.map((c) => c.publishedTo), cols.map((c) => c.reason)];
}

/** Matches the partial index webhook_outbox_parked. */
const parked = (t: string) => `${t}.published_at IS NULL AND ${t}.failure_reason IS NOT NULL`;

/** $1 limit. */
export const LIST_PARKED_OUTBOX = named('list_parked_outbox', `
  SELECT o.outbox_id::text AS outbox_id, o.inbox_id::text AS inbox_id, i.endpoint_id, i.event_type, ${epochMs('o.created_at')} AS created_at,
    o.attempt_count, o.published_to::text AS published_to, o.failure_reason, o.last_error
  FROM webhook_outbox o JOIN webhook_inbox i ON i.inbox_id = o.inbox_id
  WHERE ${parked('o')} ORDER BY o.created_at, o.outbox_id LIMIT $1`);

/** Parked → due now, a fresh attempt count; last_error and published_to stay. $1 ids (NULL: every parked row), $2 now ms. */
export const REQUEUE_PARKED_OUTBOX = named('requeue_parked_outbox', `
  UPDATE webhook_outbox SET next_attempt_at = ${ts('$2')}, attempt_count = 0, failure_reason = NULL
  WHERE ${parked('webhook_outbox')} AND ($1::uuid[] IS NULL OR outbox_id = ANY($1::uuid[]))`);

/** The rows of $1 that $2 still leases (a plain read: the lazy transaction has not begun). */
export const READ_LEASED = named('read_leased', `
  SELECT inbox_id::text AS inbox_id FROM webhook_inbox
  WHERE inbox_id = ANY($1::uuid[]) AND lease_owner = $2 AND status = 'PROCESSING'`);

/** The rows of $1 that $2 still leases, locked for the rest of the transaction (the handler's: see `planned`). */
export const LOCK_LEASED = planned(`
  SELECT inbox_id::text AS inbox_id FROM webhook_inbox
  WHERE inbox_id = ANY($1::uuid[]) AND lease_owner = $2 AND status = 'PROCESSING'
  ORDER BY inbox_id FOR UPDATE`);

export const PROCESSED_FOR_EVENTS = planned(`
  SELECT p.provider, p.endpoint_id, p.provider_event_id, p.consumer
  FROM processed_events p
  JOIN unnest($1::text[], $2::text[], $3::text[]) AS k(provider, endpoint_id, provider_event_id)
    USING (provider, endpoint_id, provider_event_id)`);

/**
 * A whole batch's end in one statement: processed markers (no ON CONFLICT: a duplicate fails
 * the batch), effects (a repeated idempotency key is ignored), and the settles, each guarded
 * by the lease owner (a row `owner` lost is left alone). A settle's NULLs keep what is there
 * (handler_version, last_error); a NULL next attempt ends the row's schedule; `given_back` 1 undoes
 * the claim's attempt_count + 1.
 * Arrays are parallel columns; times are epoch ms. Returns the number of rows settled.
 */
export const FINISH_BATCH = planned(`
  WITH settled AS (
    UPDATE webhook_inbox w SET status = s.status, next_attempt_at = ${ts('s.next_at')}, lease_owner = NULL, lease_until = NULL,
      attempt_count = w.attempt_count - s.given_back, last_error = COALESCE(s.error, w.last_error), failure_reason = s.reason,
      handler_version = COALESCE(s.handler_version, w.handler_version), processed_at = COALESCE(${ts('s.processed_at')}, w.processed_at)
    FROM unnest($14::uuid[], $15::text[], $16::float8[], $17::text[], $18::text[], $19::text[], $20::float8[], $22::int[])
      AS s(inbox_id, status, next_at, error, reason, handler_version, processed_at, given_back)
    WHERE w.inbox_id = s.inbox_id AND w.lease_owner = $21 AND w.status = 'PROCESSING'
    RETURNING w.inbox_id
  ),
  -- No marker or effect for a row whose settlement the lease guard refused: the guarded UPDATE is
  -- the fence (its row lock, or a takeover already committed, decides).
  markers AS (
    INSERT INTO processed_events (provider, endpoint_id, provider_event_id, consumer, inbox_id, handler_version, processed_at)
    SELECT m.provider, m.endpoint_id, m.provider_event_id, m.consumer, m.inbox_id, m.handler_version, ${ts('m.at')}
    FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::uuid[], $6::text[], $7::float8[])
      AS m(provider, endpoint_id, provider_event_id, consumer, inbox_id, handler_version, at)
    WHERE m.inbox_id IN (SELECT inbox_id FROM settled) OR m.inbox_id <> ALL ($14::uuid[])
  ),
  effects AS (
    INSERT INTO webhook_effects (effect_id, inbox_id, name, idempotency_key, data, next_attempt_at, created_at)
    SELECT e.effect_id, e.inbox_id, e.name, e.idempotency_key, e.data, ${ts('e.at')}, ${ts('e.at')}
    FROM unnest($8::uuid[], $9::uuid[], $10::text[], $11::text[], $12::text[], $13::float8[])
      AS e(effect_id, inbox_id, name, idempotency_key, data, at)
    WHERE e.inbox_id IN (SELECT inbox_id FROM settled) OR e.inbox_id <> ALL ($14::uuid[])
    ON CONFLICT (idempotency_key) DO NOTHING
  ),
  -- BatchOutcome.relayed: an outbox row written already published at accept (no broker route
  -- then; published_to NULL) is owed now. Due as the accept makes a routed row (sql.ts DUE_AT_ONCE).
  relayed AS (
    UPDATE webhook_outbox o SET published_at = NULL, next_attempt_at = LEAST(o.created_at, now())
    WHERE o.inbox_id = ANY ($23::uuid[]) AND o.inbox_id IN (SELECT inbox_id FROM settled)
      AND o.published_at IS NOT NULL AND o.published_to IS NULL
  )
  SELECT count(*)::int AS settled FROM settled`);

/** A BatchOutcome as FINISH_BATCH's parameters. */
export function finishBatchValues(owner: string, o: BatchOutcome): unknown[] {
  const col = <T>(rows: readonly T[], f: (r: T) => unknown) => rows.map(f);
  // The UPDATE locks rows in its unnest's order (a nested loop over it, probing the primary key;
  // test/store/postgres-lock-order.test.ts).
  const cols = inLockOrder(o.settlements, (x) => x.inboxId).map((x) => ({ id: x.inboxId, ...settlementColumns(x.s) }));
  return [
    col(o.markers, (m) => m.provider), col(o.markers, (m) => m.endpointId), col(o.markers, (m) => m.providerEventId),
    col(o.markers, (m) => m.consumer), col(o.markers, (m) => m.inboxId), col(o.markers, (m) => m.handlerVersion), col(o.markers, (m) => m.nowMs),
    col(o.effects, (e) => e.effectId), col(o.effects, (e) => e.inboxId), col(o.effects, (e) => e.name),
    col(o.effects, (e) => e.idempotencyKey), col(o.effects, (e) => e.data), col(o.effects, (e) => e.nowMs),
    col(cols, (c) => c.id), col(cols, (c) => c.status), col(cols, (c) => c.nextAttemptAtMs), col(cols, (c) => c.error),
    col(cols, (c) => c.reason), col(cols, (c) => c.handlerVersion), col(cols, (c) => c.processedAtMs),
    owner,
    col(cols, (c) => c.givenBack),
    o.relayed ?? [],
  ];
}

export const LIST_EFFECTS = named('list_effects', `
  SELECT ${EFFECT_COLS('e')} FROM webhook_effects e WHERE e.inbox_id = $1 ORDER BY e.created_at, e.effect_id`);

/** Matches the partial index webhook_effects_failed. Never the data column (it may carry customer details). $1 limit. */
export const LIST_FAILED_EFFECTS = named('list_failed_effects', `
  SELECT e.effect_id::text AS effect_id, e.inbox_id::text AS inbox_id, e.name, e.idempotency_key, e.attempt_count,
    e.failure_reason, e.last_error, ${epochMs('e.created_at')} AS created_at, ${epochMs('e.done_at')} AS done_at
  FROM webhook_effects e WHERE e.status = 'FAILED' ORDER BY e.created_at, e.effect_id LIMIT $1`);

/**
 * FAILED → PENDING due now, a fresh attempt count, the same idempotency key; last_error stays as
 * the history. Any other status is left alone. $1 ids (NULL: every FAILED effect), $2 now ms.
 */
export const RETRY_FAILED_EFFECTS = named('retry_failed_effects', `
  UPDATE webhook_effects SET status = 'PENDING', attempt_count = 0, next_attempt_at = ${ts('$2')}, failure_reason = NULL,
    lease_owner = NULL, lease_until = NULL, done_at = NULL
  WHERE status = 'FAILED' AND ($1::uuid[] IS NULL OR effect_id = ANY($1::uuid[]))`);

export const GET_EVENT = named('get_event', `SELECT ${INBOX_COLS('w')} FROM webhook_inbox w WHERE w.inbox_id = $1`);

/**
 * Newest first; only the filters given become conditions (one plan per shape, and generic plans
 * stay index-friendly). Only FAILED rows carry a failure reason: saying so lets the partial
 * `webhook_inbox_failed` index serve that filter. Returns the SQL and its parameters.
 */
export function listEventsQuery(f: { status?: string; endpointId?: string; eventType?: string; failureReason?: string; before?: string }, limit: number): { text: string; values: unknown[] } {
  const values: unknown[] = [];
  const where: string[] = [];
  const add = (cond: (p: string) => string, v: unknown) => {
    values.push(v);
    where.push(cond(`$${values.length}`));
  };
  if (f.status !== undefined) add((p) => `w.status = ${p}`, f.status);
  if (f.endpointId !== undefined) add((p) => `w.endpoint_id = ${p}`, f.endpointId);
  if (f.eventType !== undefined) add((p) => `w.event_type = ${p}`, f.eventType);
  if (f.failureReason !== undefined) add((p) => `w.status = 'FAILED' AND w.failure_reason = ${p}`, f.failureReason);
  if (f.before !== undefined) add((p) => `w.inbox_id < ${p}::uuid`, f.before);
  values.push(limit);
  const text = `SELECT ${INBOX_COLS('w')} FROM webhook_inbox w
    ${where.length ? `WHERE ${where.join(' AND ')}` : ''} ORDER BY w.inbox_id DESC LIMIT $${values.length}`;
  return { text, values };
}

/** FAILED → PENDING due now, a fresh attempt budget; last_error stays as the history. */
const REQUEUE_SET = `status = 'PENDING', attempt_count = 0, next_attempt_at = ${ts('$2')}, failure_reason = NULL,
  lease_owner = NULL, lease_until = NULL`;

/** Not a row whose payload retention deleted: processing it again could only fail. $1 id, $2 now ms. */
export const RETRY_FAILED = named('retry_failed', `
  UPDATE webhook_inbox SET ${REQUEUE_SET} WHERE inbox_id = $1 AND status = 'FAILED' AND raw_payload_ref IS NOT NULL RETURNING 1`);

/**
 * Why RETRY_FAILED left a row (rows.ts retryRefusal). A statement of its own, after it: one in the
 * same statement read the snapshot from before a purge that the update had waited for, and called
 * a row whose payload had just gone "not FAILED".
 */
export const INBOX_STATE = named('inbox_state', `
  SELECT status, raw_payload_ref IS NULL AS purged FROM webhook_inbox WHERE inbox_id = $1`);

/** $1 failure reasons, $2 now ms. Not the rows whose payload retention deleted. */
export const REQUEUE_FAILED = named('requeue_failed', `
  UPDATE webhook_inbox SET ${REQUEUE_SET} WHERE status = 'FAILED' AND failure_reason = ANY($1::text[]) AND raw_payload_ref IS NOT NULL`);

/**
 * Read at every /metrics scrape. Its condition is a partial index's predicate (webhook_inbox_due),
 * so the cost follows the backlog, not the inbox: one `status IN` over three statuses matched no
 * index and read every PROCESSED row too. FAILED rows are counted by QUEUE_STATS instead.
 */
export const BACKLOG = named('backlog', `
  SELECT endpoint_id, event_type, status, count(*)::int AS count, ${epochMs('min(received_at)')} AS oldest_received_at
  FROM webhook_inbox WHERE status IN ('PENDING', 'PROCESSING')
  GROUP BY endpoint_id, event_type, status ORDER BY endpoint_id, event_type, status`);

/**
 * Rows for rows.ts toQueueStats: the FAILED inbox rows, the unpublished outbox (how much of it is
 * parked, and its oldest row not parked, for the relay's lag), and effects still to do or FAILED
 * (not DONE: see migration 5). FAILED inbox rows pile up until an operator acts: one count from
 * their partial index alone (an index-only scan), not their rows grouped by endpoint and type (a
 * sender's made-up types made one group each).
 */
export const QUEUE_STATS = named('queue_stats', `
  SELECT 'inbox_failed' AS kind, count(*)::int AS count, NULL::float8 AS oldest FROM webhook_inbox WHERE status = 'FAILED'
  UNION ALL
  SELECT 'outbox', count(*)::int AS count, ${epochMs(`min(created_at) FILTER (WHERE NOT (${parked('webhook_outbox')}))`)} AS oldest
    FROM webhook_outbox WHERE published_at IS NULL
  UNION ALL
  SELECT 'outbox_parked', count(*)::int, NULL FROM webhook_outbox WHERE ${parked('webhook_outbox')}
  UNION ALL
  SELECT status, count(*)::int, NULL FROM webhook_effects WHERE status IN ('PENDING', 'PROCESSING') GROUP BY status
  UNION ALL
  SELECT 'FAILED', count(*)::int, NULL FROM webhook_effects WHERE status = 'FAILED'`);

/** Payload key rotation (`keys`): payloads per key id. No index on key_id: an operator's count, read rarely. */
export const PAYLOAD_KEY_USAGE = named('payload_key_usage', `
  SELECT key_id, count(*)::int AS payloads FROM webhook_payload GROUP BY key_id ORDER BY key_id`);

/** Effects by the key their data is sealed under (its base64url form; NULL: stored plain). */
export const EFFECT_KEY_USAGE = named('effect_key_usage', `
  SELECT CASE WHEN left(data, 7) = 'sealed:' THEN split_part(substr(data, 8), '.', 1) END AS sealed_key_id, count(*)::int AS effects
  FROM webhook_effects GROUP BY 1 ORDER BY 1`);

/**
 * Effects whose data is not sealed under the current key ($1), after $2 in id order. Ordered by
 * the uuid column `e.effect_id` (the primary key: each page starts where the last ended); a bare
 * `effect_id` would name the text output column and sort every effect after the cursor per page.
 */
export const EFFECTS_TO_RESEAL = named('effects_to_reseal', `
  SELECT e.effect_id::text AS effect_id, e.idempotency_key, e.data FROM webhook_effects e
  WHERE left(e.data, length($1::text)) <> $1::text AND ($2::uuid IS NULL OR e.effect_id > $2::uuid)
  ORDER BY e.effect_id LIMIT $3`);

/** Effects' data sealed again, each only while it still holds what was read. */
export const RESEAL_EFFECTS = named('reseal_effects', `
  UPDATE webhook_effects e SET data = u.data
  FROM unnest($1::uuid[], $2::text[], $3::text[]) AS u(effect_id, old_data, data)
  WHERE e.effect_id = u.effect_id AND e.data = u.old_data`);

/**
 * The newest $2 payloads sealed under key $1 that an event points at, and the newest $2 effects
 * whose data starts with $1 (a key's sealed prefix): `keys reseal` tries the config's value of each key on them. A
 * walk down the primary key from the newest row: at once for the current key, at most the rows
 * stored since for an older one (an operator's command, as keys list's counts).
 */
export const NEWEST_PAYLOAD_UNDER = named('newest_payload_under', `
  SELECT p.payload_id::text AS payload_id, i.provider, i.endpoint_id, i.provider_event_id
  FROM webhook_payload p JOIN webhook_inbox i ON i.raw_payload_ref = p.payload_id
  WHERE p.key_id = $1 ORDER BY p.payload_id DESC LIMIT $2`);
export const NEWEST_EFFECT_UNDER = named('newest_effect_under', `
  SELECT e.effect_id::text AS effect_id, e.idempotency_key, e.data FROM webhook_effects e
  WHERE left(e.data, length($1::text)) = $1::text ORDER BY e.effect_id DESC LIMIT $2`);

/** Payloads under another key than $1, after $2 in id order (the primary key: each page starts where the last ended). */
export const PAYLOADS_TO_RESEAL = named('payloads_to_reseal', `
  SELECT p.payload_id::text AS payload_id, i.provider, i.endpoint_id, i.provider_event_id
  FROM webhook_payload p JOIN webhook_inbox i ON i.raw_payload_ref = p.payload_id
  WHERE p.key_id <> $1 AND ($2::uuid IS NULL OR p.payload_id > $2::uuid)
  ORDER BY p.payload_id LIMIT $3`);

/**
 * n payloads' new sealings in one statement, each only while its row still holds the nonce it
 * was read with (5 parameters a row: id, key id, nonce, ciphertext, old nonce; each bytea its own
 * parameter, sent binary). Unnamed: an operator's command, its row count varies.
 */
export function resealStatement(n: number): string {
  const rows = Array.from({ length: n }, (_, r) => `($${r * 5 + 1}::uuid, $${r * 5 + 2}::text, $${r * 5 + 3}::bytea, $${r * 5 + 4}::bytea, $${r * 5 + 5}::bytea)`);
  return `
  UPDATE webhook_payload p SET key_id = v.key_id, nonce = v.nonce, ciphertext = v.ciphertext
  FROM (VALUES ${rows.join(', ')}) AS v (payload_id, key_id, nonce, ciphertext, old_nonce)
  WHERE p.payload_id = v.payload_id AND p.nonce = v.old_nonce`;
}
