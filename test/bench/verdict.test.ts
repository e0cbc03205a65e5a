import { describe, expect, it } from 'vitest';
import { passes } from '../../bench/verdict.js';

/** A 10 s step at 2,000 req/s: 20,000 measured requests. */
const step = (over: { ok?: number; p99?: number; achieved?: number } = {}) => ({
  offered: 2000,
  measured: 20_000,
  ok: over.ok ?? 20_000,
  achieved: over.achieved ?? 2000,
  latency: { p50: 3, p95: 10, p99: over.p99 ?? 20, max: 40 },
});

describe('bench step verdict', () => {
  it('passes a step where every request was acked in time', () => {
    expect(passes(step())).toBe(true);
    expect(passes(step(), 50)).toBe(true);
  });

  it('fails a step with failed requests even when achieved and p99 look fine (fast 503s)', () => {
    // 2 % answered 503 in a millisecond: achieved 98 % ≥ 97 %, and the fast failures pull the p99 down.
    const r = step({ ok: 19_600, achieved: 1960, p99: 12 });
    expect(passes(r)).toBe(false);
    expect(passes(r, 50)).toBe(false); // scenario (a) is not met either
  });

  it('fails on p99 or on achieved rate', () => {
    expect(passes(step({ p99: 501 }))).toBe(false);
    expect(passes(step({ p99: 51 }), 50)).toBe(false);
    expect(passes(step({ achieved: 1900 }))).toBe(false);
  });
});
