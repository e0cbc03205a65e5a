import type { Config } from '../config/schema.js';
import { transmissionPruneTasks } from '../http/transmission-pruner.js';
import type { InboxStore, PurgeableStatus } from './port.js';
import { DAY_MS, type PruneTask } from './pruner.js';

/**
 * The config's payload retention as prune tasks (none when it sets none), one per terminal status.
 *
 * PENDING and PROCESSING events keep their payload: their handler still reads it. PROCESSED ones
 * lose it after `processedPayloadDays`. FAILED ones only after `failedPayloadDays`, when it is set:
 * an operator may still `retry` or `requeue` one, and without its payload it can never be processed
 * again (`retry` refuses it, `requeue` leaves it). The inbox row stays, with `raw_payload_ref`
 * NULL and its `payload_hash`, so a provider's late retry is still answered as a duplicate and an
 * operator still sees what was received and when. The payload's row goes, not only its bytes: on
 * PostgreSQL its TOAST chunks with it (space reused after vacuum); SQLite reuses the freed pages
 * (the file does not shrink).
 */
export function payloadRetentionTasks(store: Pick<InboxStore, 'purgePayloads'>, retention: Config['retention']): PruneTask[] {
  const policies: [PurgeableStatus, number | undefined][] = [['PROCESSED', retention.processedPayloadDays], ['FAILED', retention.failedPayloadDays]];
  return policies.flatMap(([status, days]) => days === undefined ? [] : [{
    kind: 'payload',
    what: `payloads of ${status.toLowerCase()} events received more than ${days} day(s) ago`,
    async prune(nowMs: number, limit: number, cursor: string | undefined) {
      const r = await store.purgePayloads(status, nowMs - days * DAY_MS, cursor, limit);
      return { deleted: r.deleted, done: r.deleted < limit, cursor: r.last };
    },
  }]);
}

/**
 * Every prune task a config asks for, as `serve` runs them hourly and `prune` once: transmission
 * bindings only for providers of its endpoints whose signatures bind weakly (PayPal), payloads
 * only when it sets a retention.
 */
export function configuredPruneTasks(store: Pick<InboxStore, 'pruneTransmissions' | 'purgePayloads'>, config: Pick<Config, 'endpoints' | 'retention'>): PruneTask[] {
  return [...transmissionPruneTasks(store, config.endpoints), ...payloadRetentionTasks(store, config.retention)];
}
