import { Writable } from 'node:stream';
import pino, { type Logger } from 'pino';

/** A pino logger whose lines land in `lines`, one string each, for tests that read the log. */
export function captureLog(lines: string[], level = 'info'): Logger {
  const sink = new Writable({ write(chunk, _enc, cb) { lines.push(...String(chunk).split('\n').filter(Boolean)); cb(); } });
  return pino({ level }, sink);
}
