/**
 * Resolves at the first SIGINT or SIGTERM, and then stops listening for both: a second signal,
 * of either kind, ends the process at once (its default action) instead of waiting for the
 * shutdown. With one `once` per signal, Ctrl-C then `kill` (or SIGTERM then Ctrl-C) did nothing.
 */
export function untilStopSignal(): Promise<void> {
  return new Promise<void>((resolve) => {
    const stop = () => {
      process.removeListener('SIGINT', stop);
      process.removeListener('SIGTERM', stop);
      resolve();
    };
    process.on('SIGINT', stop);
    process.on('SIGTERM', stop);
  });
}

/**
 * After the graceful stop (whether or not it succeeded): the process exits as soon as nothing
 * holds it, and at the latest `ms` later. Everything serve and work opened is closed by then, but
 * a --handlers module's own timer or connection (a token refresh, a client of another service;
 * it is told of no stop) kept the process running for good once its shutdown was done, until the
 * supervisor's SIGKILL.
 */
export function exitAfterStop(ms = EXIT_AFTER_STOP_MS): void {
  setTimeout(() => process.exit(), ms).unref();
}

/** How long a stopped serve or work may take to exit on its own (its last log lines written). */
export const EXIT_AFTER_STOP_MS = 1000;

/**
 * SIGHUP runs `reload` on the running process, listened for from the start: its default action
 * ends the process, and a start (handlers, migrations, warm-up) takes a while. One that comes
 * during it is acted on once the returned function is called with what started.
 */
export function reloadOnHangup<T>(reload: (running: T) => void): (running: T) => void {
  let running: T | undefined;
  let pending = false;
  process.on('SIGHUP', () => (running !== undefined ? reload(running) : (pending = true)));
  return (started) => {
    running = started;
    if (pending) reload(started);
  };
}
