import { describe, expect, it, vi } from 'vitest';
import { StorageUnavailableError } from '../../src/errors.js';
import { GroupCommitter, OVERLAP_AFTER_MS } from '../../src/store/group-commit.js';

/** A commit function the test completes by hand, recording every batch it was given. */
function manualCommit() {
  const batches: { items: number[]; resolve(r: string[]): void; reject(e: unknown): void }[] = [];
  const commit = (items: number[]) => new Promise<string[]>((resolve, reject) => batches.push({ items, resolve, reject }));
  return { batches, commit };
}
const tick = () => new Promise((r) => setImmediate(r));
async function waitUntil(done: () => boolean, ms = 5000): Promise<void> {
  for (const end = performance.now() + ms; !done(); await new Promise((r) => setTimeout(r, 5))) {
    if (performance.now() > end) throw new Error('timed out');
  }
}
const opts = { maxBatch: 3, maxWaitMs: 0, maxInFlight: 1, commitTimeoutMs: 10_000 };

describe('group commit', () => {
  it('batches what arrives while a commit runs, and answers each item only after its own batch commits', async () => {
    const { batches, commit } = manualCommit();
    const gc = new GroupCommitter(commit, opts);
    const settled: string[] = [];
    const track = (p: Promise<string>) => p.then((v) => settled.push(v));
    track(gc.submit(1));
    await tick();
    track(gc.submit(2));
    track(gc.submit(3));
    track(gc.submit(4));
    track(gc.submit(5));
    await tick();
    expect(batches.map((b) => b.items)).toEqual([[1]]); // one writer: the rest waits
    batches[0]!.resolve(['a1']);
    await tick();
    await tick();
    expect(settled).toEqual(['a1']);
    expect(batches.map((b) => b.items)).toEqual([[1], [2, 3, 4]]); // maxBatch 3
    batches[1]!.resolve(['a2', 'a3', 'a4']);
    await tick();
    await tick();
    expect(settled).toEqual(['a1', 'a2', 'a3', 'a4']);
    expect(batches[2]!.items).toEqual([5]);
    batches[2]!.resolve(['a5']);
    await tick();
    expect(settled).toHaveLength(5);
  });

  it('a failed batch answers unavailable to every item in it, and the next batch still runs', async () => {
    const { batches, commit } = manualCommit();
    const gc = new GroupCommitter(commit, { ...opts, maxBatch: 10 });
    const first = gc.submit(1);
    await tick();
    const a = gc.submit(2);
    const b = gc.submit(3);
    batches[0]!.resolve(['ok']);
    await first;
    await tick();
    await tick();
    expect(batches[1]!.items).toEqual([2, 3]);
    batches[1]!.reject(new Error('disk full'));
    await expect(a).rejects.toBeInstanceOf(StorageUnavailableError);
    await expect(b).rejects.toBeInstanceOf(StorageUnavailableError);
    const c = gc.submit(4);
    await tick();
    batches[2]!.resolve(['ok4']);
    await expect(c).resolves.toBe('ok4');
  });

  it('a store that throws instead of rejecting fails only that batch, at once, and keeps no slot', async () => {
    let calls = 0;
    const commit = (items: number[]): Promise<string[]> => {
      if (++calls === 1) throw new Error('thread could not take the message');
      return Promise.resolve(items.map((i) => `ok${i}`));
    };
    const gc = new GroupCommitter(commit, opts); // one batch in flight at most
    const started = performance.now();
    await expect(gc.submit(1)).rejects.toBeInstanceOf(StorageUnavailableError);
    expect(performance.now() - started).toBeLessThan(1000); // not the 10 s commit timeout
    await expect(gc.submit(2)).resolves.toBe('ok2');
  });

  it('a commit that does not finish in time is answered unavailable (outcome unknown)', async () => {
    const { commit } = manualCommit();
    const gc = new GroupCommitter(commit, { ...opts, commitTimeoutMs: 100 });
    await expect(gc.submit(1)).rejects.toThrow(/outcome unknown/);
  });

  it('while every slot is held by a timed-out commit (a hung store), what waits and what arrives is answered unavailable at once, unsent; service resumes when the store returns', async () => {
    const { batches, commit } = manualCommit();
    const gc = new GroupCommitter(commit, { ...opts, commitTimeoutMs: 100 }); // one slot
    const hung = gc.submit(1);
    await tick();
    const waiting = gc.submit(2); // queued behind the hung commit
    // Answered by whichever fires first, the commit timeout (blocked) or the queue deadline (same 100 ms).
    waiting.catch(() => undefined);
    await expect(hung).rejects.toThrow(/outcome unknown/);
    await expect(waiting).rejects.toThrow(/nothing was sent to the store/);
    const started = performance.now();
    await expect(gc.submit(3)).rejects.toBeInstanceOf(StorageUnavailableError);
    expect(performance.now() - started).toBeLessThan(50); // not another commit timeout
    expect(batches.map((b) => b.items)).toEqual([[1]]); // 2 and 3 never reached the store
    batches[0]!.resolve(['late']); // the store finally returns: its slot is free again
    await tick();
    const next = gc.submit(4);
    await tick();
    batches[1]!.resolve(['ok4']);
    await expect(next).resolves.toBe('ok4');
  });

  it('a timed-out commit still holding its slot does not hold back the next batch while other slots are free (it is not "a commit running" to batch behind)', async () => {
    const { batches, commit } = manualCommit();
    const gc = new GroupCommitter(commit, { ...opts, maxBatch: 256, maxInFlight: 4, commitTimeoutMs: 100 });
    await expect(gc.submit(1)).rejects.toThrow(/outcome unknown/); // its store call never returns
    const next = gc.submit(2); // 1 waiting, far below maxBatch / 4
    await tick();
    expect(batches.map((b) => b.items)).toEqual([[1], [2]]); // started on a free slot, not queued until its deadline
    batches[1]!.resolve(['ok2']);
    await expect(next).resolves.toBe('ok2');
    // Queued behind a commit that then times out: it starts then, not at its own deadline.
    const hung = gc.submit(3);
    await tick();
    await new Promise((r) => setTimeout(r, 50));
    const behind = gc.submit(4);
    await expect(hung).rejects.toThrow(/outcome unknown/);
    await tick();
    expect(batches.map((b) => b.items)).toEqual([[1], [2], [3], [4]]);
    batches[3]!.resolve(['ok4']);
    await expect(behind).resolves.toBe('ok4');
  });

  it('a throwing batch callback (metrics) still answers every item', async () => {
    const gc = new GroupCommitter((items: number[]) => Promise.resolve(items.map((i) => `ok${i}`)), opts, () => {
      throw new Error('metrics bug');
    });
    await expect(Promise.all([gc.submit(1), gc.submit(2)])).resolves.toEqual(['ok1', 'ok2']);
  });

  it('overlaps a second commit only when a quarter of maxBatch is waiting, and never more than maxInFlight', async () => {
    const { batches, commit } = manualCommit();
    const gc = new GroupCommitter(commit, { ...opts, maxBatch: 8, maxInFlight: 2 });
    void gc.submit(1);
    await tick();
    void gc.submit(2); // 1 waiting < 8/4: keep batching behind the running commit
    await tick();
    expect(batches.map((b) => b.items)).toEqual([[1]]);
    void gc.submit(3); // 2 waiting = 8/4: a second commit starts
    await tick();
    expect(batches.map((b) => b.items)).toEqual([[1], [2, 3]]);
    for (let i = 4; i <= 9; i++) void gc.submit(i);
    await tick();
    expect(batches).toHaveLength(2); // maxInFlight reached
    batches[0]!.resolve(['r1']);
    await tick();
    await tick();
    expect(batches[2]!.items).toEqual([4, 5, 6, 7, 8, 9]);
  });

  it('a commit running past OVERLAP_AFTER_MS is not one to gather behind: what waits starts on a free slot then, not at its deadline', async () => {
    const { batches, commit } = manualCommit();
    const gc = new GroupCommitter(commit, { ...opts, maxBatch: 256, maxInFlight: 4 });
    const hung = gc.submit(1); // its connection stalls: never answered within this test
    await tick();
    const t0 = performance.now();
    const waiting = gc.submit(2); // 1 waiting, far below 256/4
    await tick();
    expect(batches.map((b) => b.items)).toEqual([[1]]); // a young commit: gather behind it
    await waitUntil(() => batches.length === 2);
    const waited = performance.now() - t0;
    expect(waited).toBeGreaterThanOrEqual(OVERLAP_AFTER_MS - 5);
    expect(waited).toBeLessThan(opts.commitTimeoutMs / 2);
    expect(batches[1]!.items).toEqual([2]);
    // Behind the new commit, young again, the next item gathers as usual.
    const third = gc.submit(3);
    await tick();
    expect(batches).toHaveLength(2);
    batches[1]!.resolve(['ok2']);
    await expect(waiting).resolves.toBe('ok2');
    await tick();
    expect(batches[2]!.items).toEqual([3]);
    batches[2]!.resolve(['ok3']);
    await expect(third).resolves.toBe('ok3');
    batches[0]!.resolve(['ok1']);
    await expect(hung).resolves.toBe('ok1');
  });

  it('caps a batch at maxBatchBytes, and an item larger than the cap still commits, alone', async () => {
    const { batches, commit } = manualCommit();
    // Items are their own size in bytes.
    const gc = new GroupCommitter(commit, { ...opts, maxBatch: 100, maxBatchBytes: 10 }, undefined, (n: number) => n);
    void gc.submit(1);
    await tick();
    for (const n of [4, 5, 2, 12, 3]) void gc.submit(n);
    for (let i = 0; i < 4; i++) {
      batches[i]!.resolve(batches[i]!.items.map(String));
      await tick();
      await tick();
    }
    expect(batches.map((b) => b.items)).toEqual([[1], [4, 5], [2], [12], [3]]);
  });

  it('overlaps a second commit when a quarter of maxBatchBytes is waiting, even with few items', async () => {
    const { batches, commit } = manualCommit();
    const gc = new GroupCommitter(commit, { ...opts, maxBatch: 100, maxBatchBytes: 40, maxInFlight: 2 }, undefined, (n: number) => n);
    void gc.submit(1);
    await tick();
    void gc.submit(9); // 9 bytes waiting < 40/4
    await tick();
    expect(batches.map((b) => b.items)).toEqual([[1]]);
    void gc.submit(1); // 10 bytes waiting = 40/4: a second commit starts
    await tick();
    expect(batches.map((b) => b.items)).toEqual([[1], [9, 1]]);
  });

  it('lingers maxWaitMs for company before a small batch, but not once 8 items are waiting', async () => {
    // Timers are the test's clock (setImmediate stays real): a descheduled CI box cannot end the linger early.
    vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout'] });
    try {
      const { batches, commit } = manualCommit();
      const gc = new GroupCommitter(commit, { ...opts, maxBatch: 100, maxWaitMs: 30 });
      void gc.submit(1);
      await tick();
      void gc.submit(2);
      await tick();
      await vi.advanceTimersByTimeAsync(29);
      expect(batches).toHaveLength(0); // still lingering
      await vi.advanceTimersByTimeAsync(1);
      expect(batches.map((b) => b.items)).toEqual([[1, 2]]);
      for (let i = 3; i <= 10; i++) void gc.submit(i); // 8 wait behind the running commit
      batches[0]!.resolve(['a', 'b']);
      await tick();
      await tick();
      await tick();
      expect(batches.map((b) => b.items)).toEqual([[1, 2], [3, 4, 5, 6, 7, 8, 9, 10]]); // no linger
    } finally {
      vi.useRealTimers();
    }
  });
  it('an item still queued after commitTimeoutMs is answered unavailable, never sent; the store meanwhile keeps committing the others', async () => {
    // One slot, one item per batch, 100 ms per commit: the queue drains at 10/s, so of 10 items the
    // later ones would wait up to a second. With commitTimeoutMs 300 they are answered at ~300 ms.
    const sent: number[] = [];
    const commit = (items: number[]) => new Promise<string[]>((r) => {
      sent.push(...items);
      setTimeout(() => r(items.map((i) => `ok${i}`)), 100);
    });
    const gc = new GroupCommitter(commit, { maxBatch: 1, maxWaitMs: 0, maxInFlight: 1, commitTimeoutMs: 300 });
    const outcomes = await Promise.all(Array.from({ length: 10 }, (_, i) => gc.submit(i + 1).then(
      (v) => ({ i: i + 1, v }),
      (e: unknown) => ({ i: i + 1, e: e as Error }),
    )));
    const ok = outcomes.filter((o) => 'v' in o);
    const refused = outcomes.filter((o) => 'e' in o);
    expect(ok.map((o) => o.i).slice(0, 2)).toEqual([1, 2]);
    expect(refused.map((o) => o.i)).toEqual(expect.arrayContaining([6, 7, 8, 9, 10]));
    for (const o of refused) {
      expect(o.e).toBeInstanceOf(StorageUnavailableError);
      expect(o.e!.message).toMatch(/waited 300 ms for a commit to start; nothing was sent/);
      expect(sent).not.toContain(o.i); // never reached the store
    }
  });
});
