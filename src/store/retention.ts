import type { Config } from '../config/schema.js';
import { transmissionPruneTasks } from '../http/transmission-pruner.js';
import type { InboxStore } from './port.js';
import type { PruneTask } from './pruner.js';

const DAY_MS = 86_400_000;

/**
 * The config's payload retention as prune tasks (none when it sets none).
 *
 * Only PROCESSED events lose their payload: a PENDING or PROCESSING one still needs it, and a
 * FAILED one may be requeued by an operator (its handler then reads it). The inbox row stays, with
 * `raw_payload_ref` NULL and its `payload_hash`, so a provider's late retry is still answered as a
 * duplicate and an operator still sees what was received and when. The payload's row goes, not
 * only its bytes: on PostgreSQL its TOAST chunks with it (space reused after vacuum); SQLite
 * reuses the freed pages (the file does not shrink).
 */
export function payloadRetentionTasks(store: Pick<InboxStore, 'purgeProcessedPayloads'>, retention: Config['retention']): PruneTask[] {
  const days = retention.processedPayloadDays;
  if (days === undefined) return [];
  return [{
    kind: 'payload',
    what: `payloads of processed events received more than ${days} day(s) ago`,
    async prune(nowMs, limit, cursor) {
      const r = await store.purgeProcessedPayloads(nowMs - days * DAY_MS, cursor, limit);
      return { deleted: r.deleted, done: r.deleted < limit, cursor: r.last };
    },
  }];
}

/**
 * Every prune task a config asks for, as `serve` runs them hourly and `prune` once: transmission
 * bindings only for providers of its endpoints whose signatures bind weakly (PayPal), payloads
 * only when it sets a retention.
 */
export function configuredPruneTasks(store: Pick<InboxStore, 'pruneTransmissions' | 'purgeProcessedPayloads'>, config: Pick<Config, 'endpoints' | 'retention'>): PruneTask[] {
  return [...transmissionPruneTasks(store, config.endpoints), ...payloadRetentionTasks(store, config.retention)];
}
