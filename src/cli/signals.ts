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
