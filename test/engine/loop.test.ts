import { afterEach, describe, expect, it, vi } from 'vitest';
import { ClaimLoop } from '../../src/engine/loop.js';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** A queue the loop claims from, with the time and size of every claim that took something. */
function harness(gatherMs: number) {
  const queue: number[] = [];
  const claims: { at: number; n: number }[] = [];
  let arrived = 0;
  const loop = new ClaimLoop<number>(
    { concurrency: 100, batchSize: 50, pollMs: 60_000, gatherMs },
    async (n) => {
      const batch = queue.splice(0, n);
      if (batch.length > 0) claims.push({ at: Date.now(), n: batch.length });
      return batch;
    },
    async () => undefined,
    (err) => {
      throw err;
    },
  );
  /** One arrival every `everyMs` for `forMs`, each followed by a wake-up (as an accept does). */
  const trickle = async (everyMs: number, forMs: number) => {
    for (const end = Date.now() + forMs; Date.now() < end;) {
      queue.push(1);
      arrived++;
      loop.wake();
      await sleep(everyMs);
    }
  };
  return { loop, claims, trickle, arrived: () => arrived };
}

describe('ClaimLoop gathering (workers.gatherMs)', () => {
  const loops: ClaimLoop<number>[] = [];
  afterEach(async () => {
    await Promise.all(loops.splice(0).map((l) => l.stop()));
  });

  it('after a claim that took everything due, the next waits gatherMs however often it is woken: a trickle becomes a few larger batches', async () => {
    const gathered = harness(150);
    const eager = harness(0);
    loops.push(gathered.loop, eager.loop);
    gathered.loop.start();
    eager.loop.start();
    await Promise.all([gathered.trickle(10, 600), eager.trickle(10, 600)]);
    await sleep(200);
    const total = (c: { n: number }[]) => c.reduce((s, x) => s + x.n, 0);
    // Every arrival claimed once either way.
    expect(total(gathered.claims)).toBe(gathered.arrived());
    expect(total(eager.claims)).toBe(eager.arrived());
    for (let i = 1; i < gathered.claims.length; i++) expect(gathered.claims[i]!.at - gathered.claims[i - 1]!.at).toBeGreaterThanOrEqual(149);
    expect(gathered.claims.length).toBeLessThanOrEqual(6); // ~600 ms / 150 ms, +1 for the first
    expect(Math.max(...gathered.claims.map((c) => c.n))).toBeGreaterThanOrEqual(8);
    expect(eager.claims.length).toBeGreaterThan(3 * gathered.claims.length);
  });

  it('stop() cuts a gathering wait short', async () => {
    const h = harness(60_000);
    h.loop.start();
    await h.trickle(5, 20);
    expect(h.claims.length).toBe(1); // the rest wait for the gather
    const t = Date.now();
    await h.loop.stop();
    expect(Date.now() - t).toBeLessThan(1000);
  });

  it('a wall clock stepped back during a gathering wait (NTP, an operator) does not stall the loop for the size of the step', async () => {
    const queue = [1];
    const claims: number[] = [];
    const loop = new ClaimLoop<number>(
      { concurrency: 100, batchSize: 50, pollMs: 60_000, gatherMs: 200 },
      async (n) => {
        const batch = queue.splice(0, n);
        if (batch.length > 0) claims.push(batch.length);
        return batch;
      },
      async () => {
        // While the loop gathers after this partial claim, the wall clock goes back one hour.
        const real = Date.now;
        setTimeout(() => vi.spyOn(Date, 'now').mockImplementation(() => real() - 3_600_000), 20);
      },
      (err) => {
        throw err;
      },
    );
    loops.push(loop);
    try {
      loop.start();
      await sleep(50);
      queue.push(1);
      loop.wake();
      await vi.waitFor(() => expect(claims).toHaveLength(2), { timeout: 2000, interval: 20 });
    } finally {
      vi.restoreAllMocks();
    }
  });
});

it('ClaimLoop: items a batch reports settled before it ends give their places back at once; stop() still waits for the batch', async () => {
  const queue = [1, 2, 3, 4, 5];
  const claimed: number[][] = [];
  let finish!: () => void;
  const held = new Promise<void>((r) => (finish = r));
  const loop = new ClaimLoop<number>(
    { concurrency: 2, batchSize: 2, pollMs: 60_000, gatherMs: 0 },
    async (n) => {
      const batch = queue.splice(0, n);
      if (batch.length > 0) claimed.push(batch);
      return batch;
    },
    async (batch, settled) => {
      if (batch.includes(1)) {
        settled(1); // item 2 is done; item 1 waits (a slow forward)
        await held;
      } else {
        settled(batch.length + 5); // more than the batch: only its own count
      }
    },
    (err) => {
      throw err;
    },
  );
  loop.start();
  // The loop is full after [1, 2]; the early settle of one item lets it claim one at a time beside item 1.
  await vi.waitFor(() => expect(claimed).toEqual([[1, 2], [3], [4], [5]]), { timeout: 2000, interval: 10 });
  let stopped = false;
  const stopping = loop.stop().then(() => (stopped = true));
  await sleep(50);
  expect(stopped).toBe(false);
  finish();
  await stopping;
});
