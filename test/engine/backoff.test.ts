import { describe, expect, it } from 'vitest';
import { backoffDelayMs } from '../../src/engine/backoff.js';
import { classify, NeedsDecisionError, RetryableError, redact } from '../../src/engine/failure.js';

describe('backoff: exponential with full jitter', () => {
  const policy = { baseMs: 1000, capMs: 60_000 };

  it('the ceiling doubles per attempt up to the cap, and every delay stays within [0, ceiling]', () => {
    const ceilings = [1, 2, 3, 4, 5, 6, 7, 8, 20, 200].map((a) => backoffDelayMs(a, policy, () => 1 - Number.EPSILON));
    expect(ceilings.slice(0, 6)).toEqual([1000, 2000, 4000, 8000, 16_000, 32_000]);
    expect(ceilings.slice(6)).toEqual([60_000, 60_000, 60_000, 60_000]);
    for (let attempt = 1; attempt <= 30; attempt++) {
      for (let i = 0; i < 200; i++) {
        const d = backoffDelayMs(attempt, policy);
        expect(d).toBeGreaterThanOrEqual(0);
        expect(d).toBeLessThanOrEqual(Math.min(policy.capMs, policy.baseMs * 2 ** (attempt - 1)));
      }
    }
  });

  it('delays grow on average with the attempt and are jittered, not all equal', () => {
    const mean = (attempt: number) => {
      let sum = 0;
      for (let i = 0; i < 2000; i++) sum += backoffDelayMs(attempt, policy);
      return sum / 2000;
    };
    const means = [1, 2, 3, 4, 5].map(mean);
    for (let i = 1; i < means.length; i++) expect(means[i]!).toBeGreaterThan(means[i - 1]! * 1.5);
    const sample = new Set(Array.from({ length: 50 }, () => backoffDelayMs(4, policy)));
    expect(sample.size).toBeGreaterThan(40);
  });
});

describe('failure classification', () => {
  it('needs-decision errors keep their reason and are not retryable; typed and untyped technical errors are', () => {
    expect(classify(new NeedsDecisionError('amount_mismatch', 'expected 2000, got 1999'))).toMatchObject({ retryable: false, reason: 'amount_mismatch' });
    expect(classify(new RetryableError('http_503', 'upstream 503'))).toMatchObject({ retryable: true, reason: 'http_503' });
    expect(classify(Object.assign(new Error('deadlock detected'), { code: '40P01' }))).toMatchObject({ retryable: true, reason: 'error' });
  });

  it('the diagnostic is one bounded line', () => {
    const msg = redact(new Error(`line one\nline two ${'x'.repeat(2000)}`));
    expect(msg).not.toContain('\n');
    expect(msg.length).toBeLessThanOrEqual(500);
    expect(msg.startsWith('Error: line one line two')).toBe(true);
  });
});
