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
