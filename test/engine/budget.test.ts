import { describe, expect, it } from 'vitest';
import { Budget } from '../../src/engine/budget.js';

/** Resolves to which of the reservations have been granted after the pending callbacks ran. */
const settled = async (...ps: Promise<void>[]) => {
  const done = ps.map(() => false);
  ps.forEach((p, i) => void p.then(() => (done[i] = true)));
  await new Promise((r) => setImmediate(r));
  return done;
};

describe('Budget (body bytes the inbox worker holds, requests a destination has open)', () => {
  it('grants what fits at once, makes the rest wait in order, and wakes them as bytes come back', async () => {
    const changes: number[] = [];
    const b = new Budget(100, (held) => changes.push(held));
    const first = b.reserve(60);
    const second = b.reserve(50); // 110 > 100: waits
    const third = b.reserve(10); // would fit, but waits behind the second (first come, first served)
    expect(await settled(first, second, third)).toEqual([true, false, false]);
    expect(b.heldUnits).toBe(60);
    b.release(20); // 40 held: the second fits (90), then the third (100)
    expect(await settled(second, third)).toEqual([true, true]);
    expect(b.heldUnits).toBe(100);
    expect(changes).toEqual([60, 40, 90, 100]);
  });

  it('a reservation larger than the whole budget proceeds when nothing is held, so one huge body cannot deadlock', async () => {
    const b = new Budget(100);
    const small = b.reserve(10);
    const huge = b.reserve(500);
    expect(await settled(small, huge)).toEqual([true, false]);
    b.release(10);
    expect(await settled(huge)).toEqual([true]);
    expect(b.heldUnits).toBe(500);
    const next = b.reserve(1);
    expect(await settled(next)).toEqual([false]);
    b.release(500);
    expect(await settled(next)).toEqual([true]);
  });

  it('a negative release holds more without waiting (a read that returned past its reservation); the others wait for it', async () => {
    const b = new Budget(100);
    await b.reserve(25);
    b.release(-75); // the read returned 100 bytes
    expect(b.heldUnits).toBe(100);
    const waiting = b.reserve(25);
    expect(await settled(waiting)).toEqual([false]);
    b.release(100);
    expect(await settled(waiting)).toEqual([true]);
    expect(b.heldUnits).toBe(25);
  });
});
