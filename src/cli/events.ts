import { existsSync } from 'node:fs';
import { loadConfigFile } from '../config/load.js';
import { MAX_LIST_LIMIT } from './limits.js';
import type { Config } from '../config/schema.js';
import { FAILURE, TECHNICAL_REASONS } from '../engine/failure.js';
import { openStore } from '../store/open.js';
import type { InboxStore } from '../store/port.js';
import { parseSqliteUrl } from '../store/sqlite/url.js';
import type { InboxDetail } from '../store/work-port.js';
import { CommandError } from './usage-error.js';

/**
 * How long an operator command waits for one PostgreSQL statement. The store's default (10 s) is
 * an accept's bound; `keys list` counts and a reseal's page search read whole tables, which on a
 * few million payloads took longer, so those commands failed at every try. Unreachable still
 * fails at once (the connect timeout); a stuck command can be interrupted.
 */
export const OPERATOR_QUERY_TIMEOUT_MS = 10 * 60_000;

/** Operator commands over the inbox: list, show, retry one FAILED event, requeue technical failures. */
export async function withStore<T>(configFile: string, fn: (s: InboxStore, config: Config) => Promise<T>): Promise<T> {
  const config = loadConfigFile(configFile);
  // Opening a missing SQLite file would create an empty database (a stray file beside the real one).
  if (config.database.startsWith('sqlite:')) {
    const { file } = parseSqliteUrl(config.database);
    if (file !== ':memory:' && !existsSync(file)) throw new CommandError(`no SQLite database at ${file}: check the config's database (or DATABASE_URL), or run webhook-inbox migrate to create it`);
  }
  const store = openStore(config.database, { queryTimeoutMs: OPERATOR_QUERY_TIMEOUT_MS });
  try {
    // Unreachable, or never migrated: one clear line (SchemaOutdatedError says to run migrate), not "no such table".
    await store.ping();
    return await fn(store, config);
  } finally {
    await store.close();
  }
}

/**
 * The stderr line after a listing of the oldest `limit` rows: "--limit for more" only when more
 * exist and a larger --limit can show them (it said so for exactly `limit` rows, and at the
 * maximum, where a larger --limit is a usage error).
 */
export function oldestListed(n: number, what: string, limit: number, more: boolean): string {
  if (!more) return `${n} ${what}`;
  return limit < MAX_LIST_LIMIT
    ? `${n} ${what} (the oldest ${limit}: --limit for more)`
    : `${n} ${what} (the oldest ${limit}, the most one listing shows; more remain)`;
}

export const iso = (ms: number | null) => (ms === null ? '-' : new Date(ms).toISOString());

/** JSON's absent time is null (the table's "-" read as a time to a script's `select(… != null)`). */
const isoOrNull = (ms: number | null) => (ms === null ? null : iso(ms));

function detailJson(e: InboxDetail) {
  return {
    inbox_id: e.inboxId, status: e.status, provider: e.provider, endpoint_id: e.endpointId, provider_event_id: e.providerEventId,
    event_type: e.eventType, object_id: e.objectId, received_at: iso(e.receivedAtMs), attempt_count: e.attemptCount,
    next_attempt_at: isoOrNull(e.nextAttemptAtMs), failure_reason: e.failureReason, last_error: e.lastError,
    handler_version: e.handlerVersion, processed_at: isoOrNull(e.processedAtMs), matched_secret_version: e.matchedSecretVersion,
    verification: e.verification,
    payload_sha256: e.payloadHash.toString('hex'),
    // false once retention (or an operator) deleted the stored body: the hash is what is left of it.
    payload_stored: e.rawPayloadRef !== null,
  };
}

export interface ListOptions {
  readonly status?: string;
  readonly endpoint?: string;
  readonly type?: string;
  readonly reason?: string;
  readonly limit?: number;
  readonly before?: string;
  readonly json: boolean;
}

export function runEventsList(configFile: string, o: ListOptions): Promise<number> {
  return withStore(configFile, async (store) => {
    const filter = { status: o.status, endpointId: o.endpoint, eventType: o.type, failureReason: o.reason };
    const limit = o.limit ?? 50;
    const rows = await store.listEvents({ ...filter, limit, before: o.before });
    if (o.json) {
      for (const r of rows) console.log(JSON.stringify(detailJson(r)));
      return 0;
    }
    console.log(['inbox_id'.padEnd(36), 'status'.padEnd(10), 'attempts', 'endpoint'.padEnd(16), 'type'.padEnd(32), 'received_at'.padEnd(24), 'failure'].join('  '));
    for (const r of rows) {
      console.log([r.inboxId, r.status.padEnd(10), String(r.attemptCount).padStart(8), r.endpointId.padEnd(16), r.eventType.padEnd(32),
        iso(r.receivedAtMs).padEnd(24), r.failureReason ?? ''].join('  '));
    }
    // The hint only when a next page exists (a full page may be the last one: one more row tells).
    const last = rows.at(-1)?.inboxId;
    const more = last !== undefined && rows.length === limit && (await store.listEvents({ ...filter, limit: 1, before: last })).length > 0;
    console.error(more ? `${rows.length} event(s); next page: --before ${last}` : `${rows.length} event(s); no more`);
    return 0;
  });
}

export function runEventsShow(configFile: string, inboxId: string): Promise<number> {
  return withStore(configFile, async (store) => {
    const e = await store.getEvent(inboxId);
    if (!e) {
      console.error(`webhook-inbox events show: no event ${inboxId}`);
      return 1;
    }
    const effects = await store.listEffects(inboxId);
    console.log(JSON.stringify({
      ...detailJson(e),
      effects: effects.map((f) => ({ name: f.name, idempotency_key: f.idempotencyKey, status: f.status, attempt_count: f.attemptCount, failure_reason: f.failureReason, last_error: f.lastError })),
    }, null, 2));
    return 0;
  });
}

/**
 * "Now" for a requeued row's next_attempt_at: the database's clock where there is one. Workers
 * claim by their own clocks, which are watched against the database's (engine/clock-skew.ts);
 * the operator's host is not, and a clock ahead there made "due now" wait that long.
 */
export async function dueNowMs(store: InboxStore): Promise<number> {
  return (await store.databaseNowMs()) ?? Date.now();
}

export function runRetry(configFile: string, inboxId: string): Promise<number> {
  return withStore(configFile, async (store) => {
    const r = await store.retryFailed(inboxId, await dueNowMs(store));
    if (r === 'requeued') {
      console.log(`requeued ${inboxId}: PENDING, due now`);
      return 0;
    }
    if (r === 'not_found') console.error(`webhook-inbox retry: no event ${inboxId}`);
    else if (r === 'payload_purged') {
      console.error(`webhook-inbox retry: refused — event ${inboxId} is FAILED and its raw payload was deleted by retention (retention.failedPayloadDays): it cannot be processed again`);
    } else {
      const e = await store.getEvent(inboxId);
      console.error(`webhook-inbox retry: refused — event ${inboxId} is ${e?.status}, only FAILED events can be retried`);
    }
    return 1;
  });
}

/**
 * `technical`: attempts that failed and may pass later. `abandoned`: attempts that never finished
 * (a crash or a hang, maybe caused by the event itself): requeued only when asked for by name,
 * once the cause is known to be fixed.
 */
/**
 * `payload`: events whose stored body did not open with its key's value (payload_corrupt: a key
 * rewritten under its id and then loaded by a restart). Once the right value is back, every one of
 * them opens again: one at a time with `retry`, a mix-up of thousands was thousands of commands.
 */
export const REQUEUE_CLASSES: Record<string, readonly string[]> = { technical: TECHNICAL_REASONS, abandoned: [FAILURE.attemptsAbandoned], payload: [FAILURE.payloadCorrupt] };

export function runRequeue(configFile: string, reasonClass: string): Promise<number> {
  const reasons = Object.hasOwn(REQUEUE_CLASSES, reasonClass) ? REQUEUE_CLASSES[reasonClass] : undefined;
  if (!reasons) {
    console.error(`webhook-inbox requeue: --reason must be one of: ${Object.keys(REQUEUE_CLASSES).join(', ')} (needs-decision failures are retried one by one with "retry")`);
    return Promise.resolve(2);
  }
  return withStore(configFile, async (store) => {
    const n = await store.requeueFailed(reasons, await dueNowMs(store));
    console.log(`requeued ${n} FAILED event(s) with reason ${reasons.join(', ')}`);
    return 0;
  });
}
