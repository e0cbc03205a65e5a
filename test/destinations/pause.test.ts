import { describe, expect, it } from 'vitest';
import { Pause } from '../../src/destinations/pause.js';

/** A clock the test moves: the pause is read against it exactly. */
const clockAt = (start: number) => {
  const c = { t: start, now: () => c.t };
  return c;
};

describe('a destination pause', () => {
  // At this monotonic time, (t + 1000) - t is 1000.0000000000001 in floating point: rounding the
  // time left up to whole ms gave 1,001 ms for a 1 s Retry-After.
  const AWKWARD = 778.5853069492977;

  it('lasts exactly what was asked, in whole ms, at any clock value', () => {
    const clock = clockAt(AWKWARD);
    const started: number[] = [];
    const p = new Pause((ms) => started.push(ms), clock.now);
    p.askedToWait(1000, 429);
    expect(started).toEqual([1000]);
    expect(p.left()).toEqual({ ms: 1000, status: 429 });
    clock.t += 999.5;
    expect(p.left()).toEqual({ ms: 1, status: 429 });
    clock.t += 0.5;
    expect(p.left()).toBeUndefined();
  });

  it('a longer ask extends it and is not told again; a shorter one changes nothing; after it ends, the next ask starts a new one', () => {
    const clock = clockAt(AWKWARD);
    const started: [number, number][] = [];
    const p = new Pause((ms, status) => started.push([ms, status]), clock.now);
    p.askedToWait(1000, 429);
    p.askedToWait(5000, 503);
    p.askedToWait(2000, 429);
    expect(p.left()).toEqual({ ms: 5000, status: 503 });
    clock.t += 5000;
    expect(p.left()).toBeUndefined();
    p.askedToWait(3000, 429);
    expect(started).toEqual([[1000, 429], [3000, 429]]);
  });
});
