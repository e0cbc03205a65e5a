import pino, { type Logger } from 'pino';

type Destination = ReturnType<typeof pino.destination>;

/**
 * One JSON line per request on stdout. pino writes asynchronously in batches, so logging costs
 * the hot path a serialisation, not a syscall. Never pass secrets, signature headers or bodies.
 */
export function createLogger(level: string, destination: number | string = 1): Logger {
  const dest = pino.destination({ dest: destination, sync: false, minLength: 4096 });
  flushEvery(dest);
  return pino({ level, base: undefined, timestamp: pino.stdTimeFunctions.isoTime, formatters: { level: (label) => ({ level: label }) } }, dest);
}

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
let flusher: NodeJS.Timeout | undefined;

function flushEvery(dest: Destination): void {
  live.add(new WeakRef(dest));
  if (flusher) return;
  flusher = setInterval(() => {
    for (const ref of live) {
      const d = ref.deref();
      if (!d) {
        live.delete(ref);
        continue;
      }
      try {
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
