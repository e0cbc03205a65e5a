import { expect, it } from 'vitest';
import { SettleWaves } from '../../src/engine/settle-waves.js';

it('SettleWaves: items added together share a wave; those ready during a wave make the next; a failed wave does not stop the later ones', async () => {
  const waves: number[][] = [];
  let finishFirst!: () => void;
  const first = new Promise<void>((r) => (finishFirst = r));
  const w = new SettleWaves<number>(async (items) => {
    waves.push(items);
    if (waves.length === 1) await first;
    if (items.includes(3)) throw new Error('wave with 3 failed');
  });
  w.add(1);
  w.add(2);
  await new Promise((r) => setImmediate(r));
  w.add(3); // while the first wave runs
  w.add(4);
  finishFirst();
  const failure = await w.idle();
  expect(waves).toEqual([[1, 2], [3, 4]]);
  expect((failure?.error as Error).message).toBe('wave with 3 failed');
  w.add(5); // after idle: a new wave
  expect(await w.idle()).toEqual({ error: expect.any(Error) });
  expect(waves).toEqual([[1, 2], [3, 4], [5]]);
});
