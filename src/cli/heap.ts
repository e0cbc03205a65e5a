import { setFlagsFromString } from 'node:v8';

/**
 * Old-generation growth for the long-running commands (`serve`, `work`).
 *
 * This server keeps a small live heap (~15 MiB) and allocates fast, so V8's young generation grows
 * to its largest size while its own growth heuristic leaves the old generation a limit only a
 * little above the live size. Then V8 starts a full mark-compact every ~100-200 ms even though
 * little is promoted (`--trace-gc` at 2,000 req/s: 73-88 per 15 s step). Growing the old-generation
 * limit to 2.5× the live size after each collection cuts that to 14-23, and the server's CPU per
 * request by ~12 % (bench/RESULTS.md, 2026-12-01), for 5-10 MiB more RSS. It is a heuristic
 * factor that V8 reads each time it recomputes its limits, so it takes effect when set at runtime.
 * A process started with its own `--heap-growing-percent` keeps that.
 */
export const HEAP_GROWING_PERCENT = 150;

/** Applies the setting unless the command line chose one; returns the flag applied, if any. */
export function tuneHeap(execArgv: readonly string[] = process.execArgv): string | undefined {
  if (execArgv.some((a) => /^--heap[-_]growing[-_]percent(=|$)/.test(a))) return undefined;
  const flag = `--heap-growing-percent=${HEAP_GROWING_PERCENT}`;
  setFlagsFromString(flag);
  return flag;
}
