import { describe, expect, it } from 'vitest';
import { Sleeper } from '../src/sleeper.js';

describe('Sleeper', () => {
  it('a wake-up ends the sleep in progress at once; without one the sleep lasts its time', async () => {
    const s = new Sleeper();
    s.wake(); // nothing sleeping: no effect on the next sleep
    const t0 = performance.now();
    const long = s.sleep(60_000);
    setTimeout(() => s.wake(), 5);
    await long;
    expect(performance.now() - t0).toBeLessThan(5_000);
    const t1 = performance.now();
    await s.sleep(30);
    expect(performance.now() - t1).toBeGreaterThanOrEqual(28); // Node timers may fire a ms early
  });

  it('two overlapping sleeps each end on their own timer, and a wake-up ends the later one', async () => {
    const s = new Sleeper();
    const t0 = performance.now();
    const first = s.sleep(10);
    const second = s.sleep(50);
    await first; // must not cancel the later sleep's timer
    await second;
    expect(performance.now() - t0).toBeGreaterThanOrEqual(48);
    const early = s.sleep(40);
    const late = s.sleep(60_000);
    s.wake();
    await late;
    await early;
  });
});
