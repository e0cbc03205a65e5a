import type pg from 'pg';
import { StorageUnavailableError } from '../../errors.js';
import { logicalKey, type AcceptRecord, type AcceptResult } from '../port.js';
import { BindByReferenceQuery } from './bind-by-reference.js';
import { checkIn, guardCheckedOut } from './client-guard.js';
import { inLockOrder } from './lock-order.js';
import * as SQL from './sql.js';

/** Columns per record in SQL.acceptStatement. */
export const COLS = 20;

/** One record's parameters for SQL.acceptStatement, in COLS order. */
export function acceptValues(r: AcceptRecord): unknown[] {
  return [r.inboxId, r.payloadId, r.outboxId, r.provider, r.endpointId, r.providerEventId, r.eventType,
    r.objectId, r.objectVersion, r.providerCreatedAtMs, r.receivedAtMs, r.payloadHash, r.matchedSecretVersion,
    r.payload.keyId, r.payload.nonce, r.payload.ciphertext, r.topic, r.relay, r.payload.encoding ?? null, r.payload.rawBytes ?? null];
}

export type Query = <R extends pg.QueryResultRow>(q: pg.QueryConfig | BindByReferenceQuery) => Promise<pg.QueryResult<R>>;

/**
 * Queries on a pool or on a checked-out client, a BindByReferenceQuery included: pg answers a
 * query object by callback only (client.query returns the object itself, not a promise).
 */
export function queryOn(on: pg.Pool | pg.ClientBase): Query {
  type ByCallback = <R extends pg.QueryResultRow>(q: unknown, cb: (err: Error | null, res: pg.QueryResult<R>) => void) => void;
  const query = on.query.bind(on) as unknown as ByCallback;
  return <R extends pg.QueryResultRow>(q: pg.QueryConfig | BindByReferenceQuery) =>
    new Promise<pg.QueryResult<R>>((resolve, reject) => query<R>(q, (err, res) => (err ? reject(err) : resolve(res))));
}

/** The batch's ciphertexts go by reference (bind-by-reference.ts): ~10 KiB each, copied by nothing but the kernel. */
const acceptQuery = (n: number, values: unknown[]) => new BindByReferenceQuery({ name: `wi_accept_${n}`, text: SQL.acceptStatement(n, COLS), values });
const winnersQuery = (values: unknown[]): pg.QueryConfig => ({ name: 'wi_winners', text: SQL.SELECT_WINNERS, values });

/**
 * Prepares, on one connection, the accept statement of each size (SQL.acceptSize) and the
 * winner lookup, as a batch would: each runs once with padding rows only, which insert nothing.
 * A statement's first run (parse and generic plan) costs about twice a prepared one; paid at
 * start-up instead of by the first batches of load (store.warm).
 */
async function prepareAccept(query: Query, sizes: readonly number[]): Promise<void> {
  for (const n of sizes) await query(acceptQuery(n, new Array<unknown>(n * COLS).fill(null)));
  await query(winnersQuery([[], [], []]));
}

/**
 * Opens all of the pool's connections at once (so each is its own) and prepares the statements
 * of `sizes` on every one. With the pool's `min` at its size they stay open, and prepared,
 * through quiet spells.
 */
export async function warmPool(pool: pg.Pool, sizes: readonly number[]): Promise<void> {
  const opened = await Promise.allSettled(Array.from({ length: pool.options.max }, () => pool.connect()));
  const clients = opened.flatMap((o) => (o.status === 'fulfilled' ? [o.value] : []));
  const unguard = clients.map((c) => guardCheckedOut(c));
  try {
    const failed = opened.find((o) => o.status === 'rejected');
    if (failed) throw failed.reason;
    await Promise.all(clients.map((c) => prepareAccept(queryOn(c), sizes)));
  } finally {
    clients.forEach((c, i) => checkIn(c, unguard[i]!));
  }
}

/**
 * Accepts records with distinct logical keys in one statement (one transaction): the ones that
 * win their key are inserted with payload and outbox rows; the others read the winner's id.
 * `inserted` says whether any row is new (a NOTIFY is due).
 */
export async function insertUnique(query: Query, records: readonly AcceptRecord[]): Promise<{ results: AcceptResult[]; inserted: boolean }> {
  // Overlapping batches then wait for each other instead of deadlocking.
  const values: unknown[] = [];
  for (const r of inLockOrder(records, logicalKey)) values.push(...acceptValues(r));
  const n = SQL.acceptSize(records.length);
  values.length = n * COLS; // spare rows all NULL: padding the statement skips
  values.fill(null, records.length * COLS);
  const inserted = await query<{ inbox_id: string }>(acceptQuery(n, values));
  const won = new Set(inserted.rows.map((r) => r.inbox_id));
  const results: (AcceptResult | undefined)[] = records.map((r) => (won.has(r.inboxId) ? { inboxId: r.inboxId, duplicate: false } : undefined));
  const losers = records.filter((_, i) => results[i] === undefined);
  if (losers.length > 0) {
    const { rows } = await query<{ inbox_id: string; provider: string; endpoint_id: string; provider_event_id: string }>(
      winnersQuery([losers.map((r) => r.provider), losers.map((r) => r.endpointId), losers.map((r) => r.providerEventId)]),
    );
    const byKey = new Map(rows.map((w) => [logicalKey({ provider: w.provider, endpointId: w.endpoint_id, providerEventId: w.provider_event_id }), w.inbox_id]));
    records.forEach((r, i) => {
      if (results[i]) return;
      const winner = byKey.get(logicalKey(r));
      if (winner === undefined) throw new StorageUnavailableError('unique conflict without a visible winner');
      results[i] = { inboxId: winner, duplicate: true };
    });
  }
  return { results: results as AcceptResult[], inserted: won.size > 0 };
}
