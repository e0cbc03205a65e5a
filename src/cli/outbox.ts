/**
 * Operator commands over the broker outbox: list the rows the relay parked because a destination
 * refused them for good, and requeue them once the cause is fixed (the relay then publishes only
 * to the destinations that do not have the message yet).
 */
import type { ParkedOutbox } from '../store/work-port.js';
import { dueNowMs, iso, oldestListed, withStore } from './events.js';

function parkedJson(p: ParkedOutbox) {
  return {
    outbox_id: p.outboxId, inbox_id: p.inboxId, endpoint_id: p.endpointId, event_type: p.eventType, created_at: iso(p.createdAtMs),
    attempt_count: p.attemptCount, published_to: p.publishedTo, failure_reason: p.failureReason, last_error: p.lastError,
  };
}

export function runOutboxParked(configFile: string, o: { limit: number; json: boolean }): Promise<number> {
  return withStore(configFile, async (store) => {
    // One more than shown tells whether there are more.
    const rows = await store.listParkedOutbox(o.limit + 1);
    const more = rows.length > o.limit;
    if (more) rows.length = o.limit;
    if (o.json) {
      for (const r of rows) console.log(JSON.stringify(parkedJson(r)));
      return 0;
    }
    console.log(['outbox_id'.padEnd(36), 'inbox_id'.padEnd(36), 'endpoint'.padEnd(16), 'type'.padEnd(32), 'reason'.padEnd(24), 'published_to'.padEnd(16), 'last_error'].join('  '));
    for (const r of rows) {
      console.log([r.outboxId, r.inboxId, r.endpointId.padEnd(16), r.eventType.padEnd(32), r.failureReason.padEnd(24), (r.publishedTo.join(',') || '-').padEnd(16), r.lastError ?? '-'].join('  '));
    }
    console.error(oldestListed(rows.length, 'parked outbox row(s)', o.limit, more));
    return 0;
  });
}

/** `outboxIds` null: every parked row. */
export function runOutboxRequeue(configFile: string, outboxIds: readonly string[] | null): Promise<number> {
  return withStore(configFile, async (store) => {
    const n = await store.requeueParkedOutbox(outboxIds, await dueNowMs(store));
    console.log(`requeued ${n} parked outbox row(s): due now`);
    // Named ids that were not parked (unknown, published, or still on the normal schedule).
    if (outboxIds !== null && n < outboxIds.length) {
      console.error(`webhook-inbox outbox requeue: ${outboxIds.length - n} of the ${outboxIds.length} id(s) given were not parked rows`);
      return 1;
    }
    return 0;
  });
}
