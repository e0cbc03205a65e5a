import pino, { type Logger } from 'pino';

/**
 * One JSON line per request on stdout. pino writes asynchronously in batches, so logging costs
 * the hot path a serialisation, not a syscall. Never pass secrets, signature headers or bodies.
 */
export function createLogger(level: string, destination: number | string = 1): Logger {
  const dest = pino.destination({ dest: destination, sync: false, minLength: 4096 });
  // The batch is written once 4 KiB have collected, which at a quiet endpoint could be never:
  // lines (a start-up warning, the last requests) must not wait for traffic or for the exit.
  setInterval(() => {
    try {
      dest.flush();
    } catch {
      // Destroyed at close: nothing left to write.
    }
  }, FLUSH_EVERY_MS).unref();
  return pino({ level, base: undefined, timestamp: pino.stdTimeFunctions.isoTime, formatters: { level: (label) => ({ level: label }) } }, dest);
}

/** The longest a log line waits in the batch. */
const FLUSH_EVERY_MS = 250;
