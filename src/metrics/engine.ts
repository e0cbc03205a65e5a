import type { BacklogStat, WorkStore } from '../store/work-port.js';
import { Counter, Gauge, Histogram, type Registry } from './registry.js';

const E2E_SECONDS = [0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 3600];

/**
 * Event types per endpoint with a series of their own in the oldest-unprocessed gauge. The type
 * is the sender's (on GitHub an unsigned header, so anyone replaying one captured delivery under
 * new GUIDs picks it): one series per type waiting made the scrape as large as a sender wanted.
 */
export const MAX_TYPE_SERIES = 100;
/** The type label of the series that holds the oldest age of an endpoint's other types. */
export const OTHER_TYPES = '(other)';

/**
 * Failure reasons with a series of their own in the attempts counters. A reason is the thrower's
 * (`new NeedsDecisionError(\`no order ${id}\`)` makes one per event): unbounded, each new one was
 * a series kept for the process's life, and the scrape grew with the events. The rest count under
 * OTHER_REASONS; failure_reason in the rows keeps each as thrown.
 */
export const MAX_REASON_SERIES = 100;
export const OTHER_REASONS = '(other)';

/** The label for a reason: itself while fewer than MAX_REASON_SERIES have been seen, else OTHER_REASONS. */
function reasonLabels(): (reason: string) => string {
  const seen = new Set<string>();
  return (reason) => {
    if (seen.has(reason)) return reason;
    if (seen.size >= MAX_REASON_SERIES) return OTHER_REASONS;
    seen.add(reason);
    return reason;
  };
}

/** The processing engine's metrics, on the server's one registry. */
export function engineMetrics(registry: Registry) {
  // The queue's oldest times as last read (refreshQueueGauges). The two age gauges are their age
  // at each scrape: while the database does not answer, the ages go on growing from the last read
  // instead of standing still at it (an alert on a backlog nobody drains stayed quiet).
  const oldest: { unprocessed: Map<string, { readonly labels: string[]; readonly atMs: number }>; outbox: number | null | undefined } = {
    unprocessed: new Map(),
    outbox: undefined, // not read yet; null: no unpublished row
  };
  const oldestUnprocessed: Gauge = new Gauge('webhook_inbox_oldest_unprocessed_age_seconds', `Age of the oldest PENDING/PROCESSING row, by endpoint and event type (an endpoint's ${MAX_TYPE_SERIES} oldest types; the rest as type="${OTHER_TYPES}").`, ['endpoint', 'type'], () => {
    const now = Date.now();
    oldestUnprocessed.clear();
    for (const { labels, atMs } of oldest.unprocessed.values()) oldestUnprocessed.set(labels, Math.max(0, (now - atMs) / 1000));
  });
  const relayLag: Gauge = new Gauge('webhook_outbox_relay_lag_seconds', 'Age of the oldest outbox row the relay still tries to publish (0 when none; parked rows are webhook_outbox_parked).', [], () => {
    if (oldest.outbox !== undefined) relayLag.set([], oldest.outbox === null ? 0 : Math.max(0, (Date.now() - oldest.outbox) / 1000));
  });
  return {
    oldest,
    /** A failure reason as a label of attempts and effects (MAX_REASON_SERIES). */
    reason: reasonLabels(),
    attempts: registry.register(new Counter('webhook_worker_attempts_total', 'Processing attempts by result (success, retry, failed) and reason.', ['result', 'reason'])),
    processingLatency: registry.register(new Histogram('webhook_processing_latency_seconds', 'Time from receipt to a terminal state (PROCESSED or FAILED).', E2E_SECONDS, ['status'])),
    bodies: registry.register(new Counter('webhook_worker_bodies_total', 'Event bodies a worker opened, by where it got them: memory (accepted by this process moments before) or store.', ['source'])),
    bodyBytes: registry.register(new Gauge('webhook_worker_body_bytes', 'Stored event body bytes the inbox worker holds now (counted twice: ciphertext and plaintext); bounded by workers.maxInFlightBodyBytes.')),
    effects: registry.register(new Counter('webhook_effect_attempts_total', 'Effect executions by result and reason.', ['result', 'reason'])),
    circuitOpen: registry.register(new Gauge('webhook_destination_circuit_open', 'HTTP destinations whose circuit is open (1): they stopped answering, and their deliveries fail at once (destination_down) until a probe after circuitBreaker.cooldownMs gets an answer.', ['destination'])),
    relay: registry.register(new Counter('webhook_relay_publishes_total', 'Outbox relay publishes by destination and result.', ['destination', 'result'])),
    relayParked: registry.register(new Counter('webhook_relay_parked_total', 'Outbox rows parked because a destination refused them for good (e.g. routing_key_too_long), by destination and reason; they wait for webhook-inbox outbox requeue.', ['destination', 'reason'])),
    relayUnrouted: registry.register(new Counter('webhook_relay_unrouted_total', 'Outbox rows marked published with no publish: their broker route was removed from the config after the event was accepted.', ['endpoint'])),
    clockSkew: registry.register(new Gauge('webhook_clock_skew_seconds', "This process's clock minus the database server's (PostgreSQL; re-read every minute). Leases are timed by each process's clock: keep it well under a quarter of workers.leaseMs.")),
    listenerLost: registry.register(new Counter('webhook_listener_lost_total', 'Times the PostgreSQL LISTEN connection that wakes the workers was lost (an error, a close, no answer to its liveness check); until it is back, workers find new events at their poll (workers.pollMs).')),
    inboxRows: registry.register(new Gauge('webhook_inbox_rows', 'Inbox rows by status (PENDING, PROCESSING, FAILED; not PROCESSED).', ['status'])),
    oldestUnprocessed: registry.register(oldestUnprocessed),
    relayLag: registry.register(relayLag),
    outboxUnpublished: registry.register(new Gauge('webhook_outbox_unpublished', 'Outbox rows not yet published (parked ones included).')),
    outboxParked: registry.register(new Gauge('webhook_outbox_parked', 'Unpublished outbox rows parked after a destination refused them for good: not retried until an operator requeues them.')),
    effectRows: registry.register(new Gauge('webhook_effects', 'Side-effect rows by status (PENDING, PROCESSING, FAILED; not DONE).', ['status'])),
  };
}

export type EngineMetrics = ReturnType<typeof engineMetrics>;

/** Reads the queue gauges from the store (one pass per scrape; called only by /metrics). */
export async function refreshQueueGauges(m: EngineMetrics, store: WorkStore): Promise<void> {
  const [backlog, queues] = await Promise.all([store.backlog(), store.queueStats()]);
  // PROCESSED rows are not counted (that would scan the whole history on every scrape); their
  // rate is webhook_worker_attempts_total{result="success"}. FAILED ones are one count (queueStats).
  const byStatus: Record<string, number> = { PENDING: 0, PROCESSING: 0, FAILED: queues.inboxFailed };
  // Oldest receipt by endpoint, then by event type.
  const firsts = new Map<string, Map<string, number>>();
  for (const b of backlog as BacklogStat[]) {
    byStatus[b.status] = (byStatus[b.status] ?? 0) + b.count;
    let types = firsts.get(b.endpointId);
    if (!types) firsts.set(b.endpointId, (types = new Map()));
    types.set(b.eventType, Math.min(b.oldestReceivedAtMs, types.get(b.eventType) ?? Infinity));
  }
  const unprocessed = new Map<string, { labels: string[]; atMs: number }>();
  const keep = (labels: string[], atMs: number) => {
    const key = labels.join('\u0000');
    unprocessed.set(key, { labels, atMs: Math.min(atMs, unprocessed.get(key)?.atMs ?? Infinity) });
  };
  for (const [endpoint, types] of firsts) {
    // The oldest types keep their own series; the rest share one, with their oldest receipt (a
    // type of that very name among the oldest shares it too: the older stands).
    const byAge = [...types].sort((a, b) => a[1] - b[1]);
    for (const [type, atMs] of byAge.slice(0, MAX_TYPE_SERIES)) keep([endpoint, type], atMs);
    if (byAge.length > MAX_TYPE_SERIES) keep([endpoint, OTHER_TYPES], byAge[MAX_TYPE_SERIES]![1]);
  }
  m.oldest.unprocessed = unprocessed;
  m.oldest.outbox = queues.outboxOldestMs;
  for (const [status, n] of Object.entries(byStatus)) m.inboxRows.set([status], n);
  m.outboxUnpublished.set([], queues.outboxUnpublished);
  m.outboxParked.set([], queues.outboxParked);
  // Likewise DONE effects: their rate is webhook_effect_attempts_total{result="success"}.
  for (const [status, n] of Object.entries(queues.effects)) m.effectRows.set([status], n);
}
