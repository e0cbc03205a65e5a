import pino, { type Logger } from 'pino';

type Destination = ReturnType<typeof pino.destination>;

/**
 * One JSON line per request on stdout. pino writes asynchronously in batches, so logging costs
 * the hot path a serialisation, not a syscall. Never pass secrets, signature headers or bodies.
 */
export function createLogger(level: string, destination: number | string = 1): Logger {
  const dest = pino.destination({ dest: destination, sync: false, minLength: 4096, maxLength: LOG_BUFFER_MAX_BYTES });
  const logger = pino({ level, base: undefined, timestamp: pino.stdTimeFunctions.isoTime, formatters: { level: (label) => ({ level: label }) } }, dest);
  // A stdout nobody reads (a stalled log collector, a full pipe) must not grow the buffer until
  // the process runs out of memory, nor block the event loop and every accept with it: past
  // the cap, lines are dropped, counted, and the count is logged once stdout takes lines again.
  let dropped = 0;
  dest.on('drop', () => { dropped++; });
  flushEvery(dest, () => {
    if (dropped === 0) return;
    const n = dropped;
    logger.warn({ droppedLines: n }, `log lines dropped: stdout did not take them (its buffer is capped at ${LOG_BUFFER_MAX_BYTES} bytes)`);
    // This report was dropped too (the buffer is still full): the count stands, without it.
    dropped = dropped > n ? n : 0;
  });
  return logger;
}

/** Log bytes waiting for stdout, at most: past it, lines are dropped and counted. */
export const LOG_BUFFER_MAX_BYTES = 16 * 1024 * 1024;

/** The longest a log line waits in the batch. */
const FLUSH_EVERY_MS = 250;

/**
 * The batch is written once 4 KiB have collected, which at a quiet endpoint could be never: lines
 * (a start-up warning, the last requests) must not wait for traffic or for the exit. One timer
 * flushes every live destination. A timer per logger, never stopped, was one more for each app
 * a library caller started and closed; here a destination whose logger is gone is dropped (held
 * weakly), and the timer ends with the last one.
 */
const live = new Set<WeakRef<Destination>>();
/** Each destination's report of dropped lines (held no longer than the destination itself). */
const reporters = new WeakMap<Destination, () => void>();
let flusher: NodeJS.Timeout | undefined;

function flushEvery(dest: Destination, reportDropped: () => void): void {
  live.add(new WeakRef(dest));
  reporters.set(dest, reportDropped);
  if (flusher) return;
  flusher = setInterval(() => {
    for (const ref of live) {
      const d = ref.deref();
      if (!d) {
        live.delete(ref);
        continue;
      }
      try {
        reporters.get(d)?.();
        d.flush();
      } catch {
        live.delete(ref); // destroyed: nothing left to write
      }
    }
    if (live.size === 0) {
      clearInterval(flusher);
      flusher = undefined;
    }
  }, FLUSH_EVERY_MS);
  flusher.unref();
}
