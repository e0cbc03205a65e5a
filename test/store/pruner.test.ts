import pino from 'pino';
import { describe, expect, it } from 'vitest';
import { ingressMetrics } from '../../src/metrics/registry.js';
import { Pruner, type PruneTask } from '../../src/store/pruner.js';

/** A task over `rows` (ids in order) that expire at `expiresAt`; deletes from the cursor on, as the stores do. */
function taskOver(rows: Map<string, number>, failingCall = 0): PruneTask & { calls: (string | undefined)[] } {
  const calls: (string | undefined)[] = [];
  return {
    kind: 'payload', what: 'test rows', calls,
    async prune(nowMs, limit, cursor) {
      calls.push(cursor);
      if (calls.length === failingCall) throw new Error('database went away');
      const due = [...rows].filter(([id, at]) => at < nowMs && (cursor === undefined || id > cursor)).map(([id]) => id).sort().slice(0, limit);
      for (const id of due) rows.delete(id);
      return { deleted: due.length, done: due.length < limit, cursor: due.at(-1) };
    },
  };
}

describe('Pruner', () => {
  const log = pino({ level: 'silent' });

  it('runs each task in batches from the cursor each batch returns, until a batch is not full, and counts what it deleted', async () => {
    const rows = new Map([['a', 1], ['b', 1], ['c', 1], ['d', 1], ['e', 1], ['z', 50]]);
    const task = taskOver(rows);
    const metrics = ingressMetrics();
    const pruner = new Pruner([task], log, metrics, { firstAfterMs: 1e9, everyMs: 1e9, batch: 2 });
    expect(metrics.pruned.get(['payload'])).toBe(0); // the series is there from the start
    expect(await pruner.runOnce(10)).toEqual([{ what: 'test rows', deleted: 5 }]);
    expect(task.calls).toEqual([undefined, 'b', 'd']);
    expect([...rows.keys()]).toEqual(['z']);
    expect(metrics.pruned.get(['payload'])).toBe(5);
    metrics.stop();
  });

  it('on its schedule: a failed run is counted and logged, what it deleted before failing is counted, and the next run goes on', async () => {
    const rows = new Map([['a', 1], ['b', 1], ['c', 1], ['d', 1]]);
    const task = taskOver(rows, 2); // the first run's second batch fails
    const metrics = ingressMetrics();
    const pruner = new Pruner([task], log, metrics, { firstAfterMs: 0, everyMs: 20, batch: 2 });
    pruner.start();
    await expect.poll(() => rows.size, { timeout: 5000 }).toBe(0);
    await pruner.stop();
    expect(metrics.pruneFailures.get()).toBe(1);
    expect(metrics.pruned.get(['payload'])).toBe(4);
    // Run 1: a batch, then the failure; run 2 from the start again.
    expect(task.calls.slice(0, 3)).toEqual([undefined, 'b', undefined]);
    metrics.stop();
  });
});
