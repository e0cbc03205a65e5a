/**
 * The `sqlite:` database URL, read apart from the store (its thread and native module), so that
 * loading a config does not load those.
 */
import { resolve } from 'node:path';
import type { WorkerInit } from './worker.js';

const SQLITE_URL_PARAMS = ['busyTimeoutMs', 'txTimeoutMs'] as const;
const MAX_TIMER_MS = 2_147_483_647;

/** `sqlite:./data/inbox.db?busyTimeoutMs=6000&txTimeoutMs=10000` → file + options. */
export function parseSqliteUrl(url: string): WorkerInit {
  const rest = url.slice('sqlite:'.length);
  const q = rest.indexOf('?');
  const file = q < 0 ? rest : rest.slice(0, q);
  const params = new URLSearchParams(q < 0 ? '' : rest.slice(q + 1));
  // Checked, not defaulted: a typo (busyTimoutMs) or a non-number silently kept the default.
  // parseConfig runs this too, so a bad one is a config error naming `database`.
  for (const name of params.keys()) {
    if (!(SQLITE_URL_PARAMS as readonly string[]).includes(name)) {
      throw new Error(`unknown sqlite URL parameter ${name.length <= 32 ? `"${name}"` : `(a ${name.length}-character name)`} (allowed: ${SQLITE_URL_PARAMS.join(', ')})`);
    }
  }
  // At most 2^31-1 ms: txTimeoutMs is a timer, which Node fires after 1 ms past that (every
  // transaction rolled back at once), and SQLite's busy_timeout is a 32-bit int (it wraps).
  const num = (name: (typeof SQLITE_URL_PARAMS)[number], fallback: number, min: number) => {
    const v = params.get(name);
    if (v === null) return fallback;
    if (!/^\d+$/.test(v) || Number(v) < min || Number(v) > MAX_TIMER_MS) {
      throw new Error(`sqlite URL parameter ${name} must be an integer from ${min} to ${MAX_TIMER_MS} (milliseconds)`);
    }
    return Number(v);
  };
  if (!file) throw new Error('sqlite URL needs a file path, e.g. sqlite:./data/webhook-inbox.db');
  // Read as a path, "//…" is the root ("sqlite://./data/x.db" is /data/x.db), while URL habits
  // read it as an authority or, in the SQLAlchemy/Django "sqlite:///x.db", a relative path.
  if (file.startsWith('//')) {
    throw new Error('sqlite URL takes a file path after "sqlite:", not "//": sqlite:./data/webhook-inbox.db (relative to the working directory) or sqlite:/var/lib/webhook-inbox/inbox.db (absolute)');
  }
  // A shell habit: nothing expands "~" here, so it would be a folder named "~" in the working directory.
  if (file.startsWith('~')) {
    throw new Error('sqlite URL path starts with "~", which is not expanded (it would be a folder named "~" in the working directory): write the path out, e.g. sqlite:/home/inbox/webhook-inbox.db');
  }
  // Not 0: a transaction could not run a statement before it was rolled back.
  const txTimeoutMs = num('txTimeoutMs', 10_000, 1);
  return { file: file === ':memory:' ? file : resolve(file), busyTimeoutMs: num('busyTimeoutMs', defaultBusyTimeoutMs(txTimeoutMs), 0), txTimeoutMs, durableEngineCommits: true };
}

/**
 * How long a statement waits for another process's write lock. Long enough for a settle
 * transaction of a `webhook-inbox work` process on the same file: its handlers run for at most
 * half of txTimeoutMs, then it writes and commits. With 2 s, a handler slower than that made every
 * accept of `serve` meanwhile fail (503), though the same handler in `serve` itself only delays them.
 */
export function defaultBusyTimeoutMs(txTimeoutMs: number): number {
  return Math.round(txTimeoutMs / 2) + 1000;
}
