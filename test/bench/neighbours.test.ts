import { fork, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { afterEach, describe, expect, it } from 'vitest';
import { neighbourSampler, worstBurst, type Slice } from '../../bench/neighbours.js';

// A process that, told to, burns `ms` of its own CPU time (not wall time: a busy box only makes it take longer), then says so.
const BURNER = `process.on('message', (ms) => {
  const cpu = () => { const u = process.cpuUsage(); return (u.user + u.system) / 1000; };
  const end = cpu() + ms; while (cpu() < end);
  process.send('done');
});`;

const children: ChildProcess[] = [];
afterEach(() => {
  for (const c of children.splice(0)) c.kill('SIGKILL');
});

async function burner(): Promise<ChildProcess> {
  const c = fork('-e', [BURNER], { execArgv: [], stdio: ['ignore', 'ignore', 'inherit', 'ipc'] });
  children.push(c);
  await once(c, 'spawn');
  return c;
}
async function burn(c: ChildProcess, ms: number): Promise<void> {
  c.send(ms);
  await once(c, 'message');
}
const sum = (slices: readonly Slice[], f: (s: Slice) => number) => slices.reduce((a, s) => a + f(s), 0);

describe('bench: neighbours\' CPU during a window', () => {
  it('counts the bench\'s own processes as its own and any other process\'s burst as a neighbour\'s', async () => {
    const own = await burner();
    const other = await burner();
    const sampler = neighbourSampler([own.pid!], []);
    sampler.start();
    await burn(own, 500); // the "warm-up"
    sampler.windowStarts();
    await burn(other, 500); // in the window
    await new Promise((r) => setTimeout(r, 300));
    const slices = sampler.stop();
    // Lower bounds only: the test's own worker and other test files run beside it.
    const warmUp = slices.filter((s) => s.atS <= 0.25);
    const window = slices.filter((s) => s.atS > 0);
    expect(warmUp.some((s) => s.atS < 0)).toBe(true);
    expect(sum(warmUp, (s) => s.ownMs)).toBeGreaterThanOrEqual(400);
    expect(sum(window, (s) => s.otherMs)).toBeGreaterThanOrEqual(400);
    expect(worstBurst(slices)!.otherMs).toBeGreaterThanOrEqual(300);
  });

  it('finds the worst half-second of other CPU, by time, whatever the slices\' count', () => {
    const s = (atS: number, otherMs: number): Slice => ({ atS, otherMs, ownMs: 0 });
    expect(worstBurst([])).toBeUndefined();
    // 200 + 150 in two neighbouring slices beat 300 alone; a slice that ended late still joins its neighbour.
    expect(worstBurst([s(0.25, 10), s(0.5, 300), s(0.75, 0), s(1.0, 200), s(1.27, 150), s(1.5, 0)])).toEqual({ atS: 1.27, otherMs: 350 });
    // Slices three apart are not one burst.
    expect(worstBurst([s(0.25, 200), s(0.5, 0), s(0.75, 0), s(1.0, 200)])!.otherMs).toBe(200);
    // Tick rounding may leave a slice slightly negative: a burst is never below 0.
    expect(worstBurst([s(0.25, -10)])).toEqual({ atS: 0.25, otherMs: 0 });
    // The warm-up's slices (before the window's start) are not the window's burst.
    expect(worstBurst([s(-0.25, 500), s(0, 400), s(0.25, 10)])).toEqual({ atS: 0.25, otherMs: 10 });
  });
});
