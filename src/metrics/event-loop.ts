import { monitorEventLoopDelay } from 'node:perf_hooks';
import { Gauge } from './registry.js';

/**
 * How late the event loop ran since the previous scrape: p50, p99 and max, in seconds.
 * Ingress, verification and (in `serve`) the workers share one loop, so a delay here is added
 * to every answer; it tells "the loop was blocked" apart from "the database was slow"
 * (webhook_db_commit_latency_seconds). Each scrape reads and then resets the window.
 * The sampling timer (every 10 ms) does not keep the process alive; `stop` ends it.
 */
export function eventLoopDelay(): { gauge: Gauge; stop(): void } {
  const h = monitorEventLoopDelay({ resolution: 10 });
  h.enable();
  const gauge = new Gauge('webhook_event_loop_delay_seconds', 'Event-loop delay since the previous scrape (stat: p50, p99, max).', ['stat'], () => {
    if (h.count > 0) {
      gauge.set(['p50'], h.percentile(50) / 1e9);
      gauge.set(['p99'], h.percentile(99) / 1e9);
      gauge.set(['max'], h.max / 1e9);
    }
    h.reset();
  });
  return { gauge, stop: () => h.disable() };
}
