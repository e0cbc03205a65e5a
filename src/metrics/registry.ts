/**
 * A minimal Prometheus registry: counters and histograms with label values joined into one
 * map key. Updating is a map lookup and an add — nothing on the hot path allocates beyond that.
 */
import { BUSY_HOLD_MS } from '../http/offload.js';
import { eventLoopDelay } from './event-loop.js';

type Labels = readonly string[];

interface Metric {
  render(): string;
}

const escapeLabel = (v: string) => v.replace(/\\/g, '\\\\').replace(/\n/g, '\\n').replace(/"/g, '\\"');

function labelText(names: Labels, values: readonly string[], extra = ''): string {
  const parts = names.map((n, i) => `${n}="${escapeLabel(values[i] ?? '')}"`);
  if (extra) parts.push(extra);
  return parts.length ? `{${parts.join(',')}}` : '';
}

export class Counter implements Metric {
  private values = new Map<string, { labels: string[]; value: number }>();
  constructor(readonly name: string, readonly help: string, readonly labelNames: Labels = []) {
    // One without labels is 0 from the start: a series that appears only at its first increment
    // reads as "no data" to an alert on its rate or increase (a LISTEN connection never yet lost).
    if (labelNames.length === 0) this.values.set('', { labels: [], value: 0 });
  }

  inc(labels: string[] = [], by = 1): void {
    const key = labels.join('\u0000');
    const cur = this.values.get(key);
    if (cur) cur.value += by;
    else this.values.set(key, { labels, value: by });
  }

  get(labels: string[] = []): number {
    return this.values.get(labels.join('\u0000'))?.value ?? 0;
  }

  render(): string {
    let out = `# HELP ${this.name} ${this.help}\n# TYPE ${this.name} counter\n`;
    for (const { labels, value } of this.values.values()) out += `${this.name}${labelText(this.labelNames, labels)} ${value}\n`;
    return out;
  }
}

export class Gauge implements Metric {
  private values = new Map<string, { labels: string[]; value: number }>();
  constructor(readonly name: string, readonly help: string, readonly labelNames: Labels = [], private readonly collect?: () => void) {}

  set(labels: string[], value: number): void {
    this.values.set(labels.join('\u0000'), { labels, value });
  }

  get(labels: string[] = []): number | undefined {
    return this.values.get(labels.join('\u0000'))?.value;
  }

  /** Drops every series (for label sets that can disappear, e.g. a drained backlog group). */
  clear(): void {
    this.values.clear();
  }

  render(): string {
    this.collect?.();
    let out = `# HELP ${this.name} ${this.help}\n# TYPE ${this.name} gauge\n`;
    for (const { labels, value } of this.values.values()) out += `${this.name}${labelText(this.labelNames, labels)} ${value}\n`;
    return out;
  }
}

export class Histogram implements Metric {
  private series = new Map<string, { labels: string[]; counts: number[]; sum: number; count: number }>();
  constructor(readonly name: string, readonly help: string, readonly buckets: readonly number[], readonly labelNames: Labels = []) {
    // Likewise 0 from the start without labels (as a counter).
    if (labelNames.length === 0) this.series.set('', { labels: [], counts: new Array(buckets.length).fill(0), sum: 0, count: 0 });
  }

  observe(value: number, labels: string[] = []): void {
    const key = labels.join('\u0000');
    let s = this.series.get(key);
    if (!s) this.series.set(key, (s = { labels, counts: new Array(this.buckets.length).fill(0), sum: 0, count: 0 }));
    for (let i = 0; i < this.buckets.length; i++) if (value <= this.buckets[i]!) { s.counts[i]!++; break; }
    s.sum += value;
    s.count++;
  }

  render(): string {
    let out = `# HELP ${this.name} ${this.help}\n# TYPE ${this.name} histogram\n`;
    for (const s of this.series.values()) {
      let cum = 0;
      this.buckets.forEach((b, i) => {
        cum += s.counts[i]!;
        out += `${this.name}_bucket${labelText(this.labelNames, s.labels, `le="${b}"`)} ${cum}\n`;
      });
      out += `${this.name}_bucket${labelText(this.labelNames, s.labels, 'le="+Inf"')} ${s.count}\n`;
      out += `${this.name}_sum${labelText(this.labelNames, s.labels)} ${s.sum}\n`;
      out += `${this.name}_count${labelText(this.labelNames, s.labels)} ${s.count}\n`;
    }
    return out;
  }
}

export class Registry {
  private metrics: Metric[] = [];
  register<M extends Metric>(m: M): M {
    this.metrics.push(m);
    return m;
  }
  render(): string {
    return this.metrics.map((m) => m.render()).join('');
  }
}

const LATENCY_SECONDS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10];
const BATCH_SIZES = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1000];

/** The ingress metrics of one server. */
export function ingressMetrics() {
  const registry = new Registry();
  const loop = eventLoopDelay();
  return {
    registry,
    eventLoopDelay: registry.register(loop.gauge),
    /** Ends the event-loop sampling (the app's close). */
    stop: loop.stop,
    requests: registry.register(new Counter('webhook_requests_total', 'Webhook requests by endpoint and outcome.', ['endpoint', 'outcome'])),
    ackLatency: registry.register(new Histogram('webhook_ack_latency_seconds', 'Time from request start to the answer, by endpoint and outcome (as webhook_requests_total).', LATENCY_SECONDS, ['endpoint', 'outcome'])),
    commitLatency: registry.register(new Histogram('webhook_db_commit_latency_seconds', 'Duration of one group-commit transaction, failed and timed-out ones included.', LATENCY_SECONDS)),
    batchSize: registry.register(new Histogram('webhook_commit_batch_size', 'Events per group-commit transaction (new and duplicate; failed transactions included).', BATCH_SIZES)),
    commitFailures: registry.register(new Counter('webhook_commit_failures_total', 'Group-commit transactions that failed or timed out.')),
    secretMatches: registry.register(new Counter('webhook_secret_version_matches_total', 'Verified requests by endpoint and the secret version that matched.', ['endpoint', 'version'])),
    offloaded: registry.register(new Counter('webhook_offloaded_bodies_total', `Verified bodies parsed and sealed on the helper thread, by why: large (limits.offloadBodyBytes) or busy (limits.offloadWhenInFlight requests in progress for ${BUSY_HOLD_MS} ms).`, ['reason'])),
    inFlightBodyBytes: registry.register(new Gauge('webhook_inflight_body_bytes', 'Request body bytes currently held in memory (raw + ciphertext).')),
    commitQueue: registry.register(new Gauge('webhook_commit_queue_depth', 'Verified events waiting for the next group commit.')),
    pruned: registry.register(new Counter('webhook_pruned_rows_total', 'Rows deleted by this server\'s hourly prune tasks, by what: payload (retention.processedPayloadDays, failedPayloadDays) or transmission (bindings past their horizon).', ['what'])),
    pruneFailures: registry.register(new Counter('webhook_prune_failures_total', 'Prune runs that failed part way (logged; the next hourly run deletes what they left).')),
  };
}

export type IngressMetrics = ReturnType<typeof ingressMetrics>;
