import { setFlagsFromString } from 'node:v8';

/**
 * V8 settings for the long-running commands (`serve`, `work`), each applied at start unless the
 * node command line chose its own. Both are factors V8 reads again each time it uses them, so
 * they take effect when set at runtime (flags that size the heap would not: bench/RESULTS.md).
 * The library (`startApp`) sets nothing: an embedding process owns its V8.
 */
export const V8_TUNING = {
  /**
   * Old-generation growth. This server keeps a small live heap (~15 MiB) and allocates fast, so
   * V8's young generation grows to its largest size while its own growth heuristic leaves the old
   * generation a limit only a little above the live size. Then V8 starts a full mark-compact
   * every ~100-200 ms even though little is promoted (`--trace-gc` at 2,000 req/s: 73-88 per
   * 15 s step). Growing the limit to 2.5× the live size after each collection cuts that to
   * 14-23, and the server's CPU per request by ~12 % (bench/RESULTS.md, 2026-12-01), for 5-10 MiB
   * more RSS.
   */
  'heap-growing-percent': 150,
  /**
   * How much bytecode a function runs before V8 considers optimising it: a quarter of V8's
   * default (67,584). A server started cold into heavy load runs its request path unoptimised
   * for its first seconds, at ~2.5× its steady CPU per request, and queues. With this it caught
   * up sooner (bench/RESULTS.md, 2026-12-07 16:00: PostgreSQL at 2,000 req/s on a slow 2-core
   * box, p99 ≤ 50 ms in 12 of 15 steps against 7 of 16 without) and its steady CPU per request
   * was 3-5 % lower (SQLite, PostgreSQL). An eighth of the default was no better.
   */
  'interrupt-budget': 16_896,
} as const;

/** Applies each setting the command line did not choose; returns the flags applied. */
export function tuneV8(execArgv: readonly string[] = process.execArgv): string[] {
  const applied: string[] = [];
  for (const [name, value] of Object.entries(V8_TUNING)) {
    // V8 takes a flag with dashes or underscores, and its value after '=' or as the next argument.
    const chosen = new RegExp(`^--${name.replace(/-/g, '[-_]')}(=|$)`);
    if (execArgv.some((a) => chosen.test(a))) continue;
    const flag = `--${name}=${value}`;
    setFlagsFromString(flag);
    applied.push(flag);
  }
  return applied;
}
