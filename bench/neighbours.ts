/**
 * Who else took the cores during a measured window, slice by slice: the machine's busy CPU
 * (/proc/stat) less what the bench's own processes used (the server, the load generator, this
 * process, PostgreSQL). The window-wide "other CPU %" hides a short burst in ten seconds of
 * background; a 2,000 req/s step that stalls mid-window is told apart by it: a neighbour's burst
 * (RabbitMQ boots a throwaway Erlang VM every ~60 s to check on epmd, ~0.3-0.4 s of CPU on
 * several threads; DAMON's scans) or our own server, with nobody else on the cores.
 */
import { performance } from 'node:perf_hooks';
import { cpuOfCommands, machineBusyMs, procCpuMs } from './sys.js';

export const SLICE_MS = 250;
/** The span a burst is measured over: two slices. */
export const BURST_SPAN_MS = 500;
/**
 * A window whose neighbours used this much CPU within one span is marked: two fifths of a core for
 * half a second. Quiet, a span held 40-160 ms here (other CPU 3-13 % of a core); RabbitMQ's epmd check 360.
 */
export const BURST_MS = 200;

export interface Slice {
  /** Seconds from the window's start to the slice's end (negative in the warm-up). */
  readonly atS: number;
  /** CPU ms used in the slice by processes other than the bench's own. */
  readonly otherMs: number;
  /** CPU ms used in the slice by the bench's own processes. */
  readonly ownMs: number;
}

/** The worst span: the most CPU other processes used in any BURST_SPAN_MS of the window, ending `atS` into it. */
export interface Burst {
  readonly atS: number;
  readonly otherMs: number;
}

/**
 * Samples every SLICE_MS from `start()` (the load's start, so the warm-up is seen too) to `stop()`;
 * `windowStarts()` marks time 0 of the slices. `ownPids` are counted as the bench's own, and so is
 * every process named one of `ownCommands` (looked for again each second: a pool may open a
 * backend mid-window). A process first seen mid-window counts from 0, as it was born in it.
 */
export function neighbourSampler(ownPids: readonly number[], ownCommands: readonly string[] = ['postgres']) {
  const last = new Map<number, number>();
  let commandPids: number[] = [];
  let t0 = 0, tPrev = 0, busyPrev = 0, ownPrev = 0, sinceScan = Infinity;
  let windowAt: number | undefined;
  let timer: NodeJS.Timeout | undefined;
  const raw: { end: number; otherMs: number; ownMs: number }[] = [];
  const ownTotal = (): number => {
    if (sinceScan >= 1000 && ownCommands.length) {
      commandPids = cpuOfCommands(...ownCommands).flatMap((m) => [...m.keys()]);
      sinceScan = 0;
    }
    let sum = 0;
    for (const pid of [process.pid, ...ownPids, ...commandPids]) {
      const c = procCpuMs(pid);
      if (c !== null) last.set(pid, c); // else gone: its last reading stands
    }
    for (const c of last.values()) sum += c;
    return sum;
  };
  const tick = () => {
    const now = performance.now();
    sinceScan += now - tPrev;
    const own = ownTotal(), busy = machineBusyMs();
    raw.push({ end: now, ownMs: own - ownPrev, otherMs: busy - busyPrev - (own - ownPrev) });
    [tPrev, busyPrev, ownPrev] = [now, busy, own];
  };
  return {
    start(): void {
      ownPrev = ownTotal();
      busyPrev = machineBusyMs();
      t0 = tPrev = performance.now();
      sinceScan = 0;
      timer = setInterval(tick, SLICE_MS);
    },
    windowStarts(): void {
      windowAt = performance.now();
    },
    stop(): Slice[] {
      if (timer !== undefined) {
        clearInterval(timer);
        timer = undefined;
        tick();
      }
      const zero = windowAt ?? t0;
      return raw.map((r) => ({ atS: (r.end - zero) / 1000, otherMs: r.otherMs, ownMs: r.ownMs }));
    },
  };
}

/** The most CPU other processes used in any BURST_SPAN_MS of the window's slices (consecutive slices summed; the warm-up's left out); undefined if none. */
export function worstBurst(all: readonly Slice[]): Burst | undefined {
  const slices = all.filter((s) => s.atS > 0);
  let best: Burst | undefined;
  for (let i = 0; i < slices.length; i++) {
    let sum = 0;
    // Slices ending within the span before slice i's end (a timer may fire late: by time, not count).
    for (let j = i; j >= 0 && slices[i]!.atS - (j > 0 ? slices[j - 1]!.atS : 0) <= BURST_SPAN_MS / 1000 + 0.05; j--) sum += slices[j]!.otherMs;
    if (best === undefined || sum > best.otherMs) best = { atS: slices[i]!.atS, otherMs: Math.max(0, sum) };
  }
  return best;
}
