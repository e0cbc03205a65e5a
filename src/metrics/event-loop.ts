import { monitorEventLoopDelay } from 'node:perf_hooks';
import { Gauge } from './registry.js';

/** How often the sampler ticks. */
const RESOLUTION_MS = 10;
const RESOLUTION_NS = RESOLUTION_MS * 1e6;

/**
 * The sampler records the time between its ticks, not how late each was: an idle loop records
 * ~10 ms (its own interval), which read as 10 ms of delay on every answer. The delay is what is past it.
 */
const delaySeconds = (intervalNs: number): number => Math.max(0, intervalNs - RESOLUTION_NS) / 1e9;

/**
 * How late the event loop ran since the previous scrape: p50, p99 and max, in seconds.
 * Ingress, verification and (in `serve`) the workers share one loop, so a delay here is added
 * to every answer; it tells "the loop was blocked" apart from "the database was slow"
 * (webhook_db_commit_latency_seconds). Each scrape reads and then resets the window.
 * The sampling timer (every 10 ms) does not keep the process alive; `stop` ends it.
 */
export function eventLoopDelay(): { gauge: Gauge; stop(): void } {
  const h = monitorEventLoopDelay({ resolution: RESOLUTION_MS });
  h.enable();
  const gauge = new Gauge('webhook_event_loop_delay_seconds', 'Event-loop delay since the previous scrape (stat: p50, p99, max).', ['stat'], () => {
    if (h.count > 0) {
      gauge.set(['p50'], delaySeconds(h.percentile(50)));
      gauge.set(['p99'], delaySeconds(h.percentile(99)));
      gauge.set(['max'], delaySeconds(h.max));
    }
    h.reset();
  });
  return { gauge, stop: () => h.disable() };
}
