import pino, { type Logger } from 'pino';

/**
 * One JSON line per request on stdout. pino writes asynchronously in batches, so logging costs
 * the hot path a serialisation, not a syscall. Never pass secrets, signature headers or bodies.
 */
export function createLogger(level: string, destination: number | string = 1): Logger {
  return pino(
    { level, base: undefined, timestamp: pino.stdTimeFunctions.isoTime, formatters: { level: (label) => ({ level: label }) } },
    pino.destination({ dest: destination, sync: false, minLength: 4096 }),
  );
}
