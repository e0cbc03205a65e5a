import { StorageUnavailableError } from '../errors.js';

/** How long store failures may be tried again: until `until` (performance.now()), set at the first failure. */
export interface StoreRetryWindow {
  until?: number;
}

/** What bounds the retries: a lease from the window's first failure, and the engine stopping. */
export interface StoreRetryLimits {
  readonly leaseMs: number;
  /** True once the engine is stopping: no more waits (a shutdown must not wait out a lease). */
  readonly stopping?: () => boolean;
}

/**
 * Runs a settle again while the store fails it (StorageUnavailableError: a link lost or frozen, a
 * backend restarted, SQLite's write lock held past busyTimeoutMs), with backoff (100 ms doubling
 * to 2 s), for up to `leaseMs` from the window's first failure and while the engine is not
 * stopping; past that, or on any other error, the error is thrown. The store failing for a moment
 * is no attempt of the work being settled: left to its lease, each such failure spent one, redid
 * what had been done (an effect's call, a publish), and on the last attempt ended FAILED
 * attempts_abandoned though the work had succeeded.
 * `run` must be safe to repeat: a lease-guarded settle is (a failed transaction rolled back; one
 * whose COMMIT went through unseen left its rows unleased, so the guard skips them). `retrying`
 * sees each failure before its wait; it may end the retries with a result (`{ done }`).
 */
export async function whileStoreFails<T>(
  run: () => Promise<T>,
  window: StoreRetryWindow,
  limits: StoreRetryLimits,
  retrying?: (err: StorageUnavailableError, retryInMs: number) => { done: T } | void,
): Promise<T> {
  for (let delayMs = 100; ; delayMs = Math.min(delayMs * 2, 2000)) {
    try {
      return await run();
    } catch (err) {
      if (!(err instanceof StorageUnavailableError)) throw err;
      window.until ??= performance.now() + limits.leaseMs;
      if (performance.now() + delayMs > window.until || limits.stopping?.()) throw err;
      const end = retrying?.(err, delayMs);
      if (end) return end.done;
      await new Promise((r) => setTimeout(r, delayMs));
    }
  }
}
