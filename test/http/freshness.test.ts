import { describe, expect, it } from 'vitest';
import { isFresh } from '../../src/http/freshness.js';

describe('isFresh: the signed-timestamp window, counted in whole seconds as the providers count it', () => {
  const second = 1_796_000_000; // a Unix second
  const tolerance = 300;

  it.each([0, 1, 310, 500, 999])('at millisecond %i of the second: exactly ±tolerance is fresh, ±(tolerance + 1) is stale', (ms) => {
    const nowMs = second * 1000 + ms;
    expect(isFresh(second - tolerance, nowMs, tolerance)).toBe(true);
    expect(isFresh(second + tolerance, nowMs, tolerance)).toBe(true);
    expect(isFresh(second - tolerance - 1, nowMs, tolerance)).toBe(false);
    expect(isFresh(second + tolerance + 1, nowMs, tolerance)).toBe(false);
    expect(isFresh(second, nowMs, tolerance)).toBe(true);
  });

  it('a fractional signed timestamp (a provider sending milliseconds) is compared as it is', () => {
    const nowMs = second * 1000 + 700;
    expect(isFresh(second - tolerance + 0.5, nowMs, tolerance)).toBe(true);
    expect(isFresh(second - tolerance - 0.5, nowMs, tolerance)).toBe(false);
  });
});
