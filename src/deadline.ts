/**
 * Waits for `p` at most `ms`, then rejects with `expired()`. The operation itself is not
 * cancelled (a handler, an executor, a broker offer no way to): its late outcome is ignored.
 */
export function withDeadline<T>(p: Promise<T>, ms: number, expired: () => Error): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const deadline = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(expired()), ms);
  });
  return Promise.race([p, deadline]).finally(() => clearTimeout(timer));
}
