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
});
