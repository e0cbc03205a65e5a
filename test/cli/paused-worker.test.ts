import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterEach, beforeEach, expect, it } from 'vitest';
import { openStore } from '../../src/store/open.js';
import type { InboxStore } from '../../src/store/port.js';
import { configDoc } from '../helpers/app.js';
import { acceptThroughIngress, waitFor } from '../helpers/engine.js';
import { exited, spawnWork, type ServerProcess } from '../helpers/server-process.js';
import { describeEachStore, freshDatabase, type TestDatabase } from '../helpers/stores.js';

const HANDLERS = fileURLToPath(new URL('../fixtures/pausing-handlers.mjs', import.meta.url));

/** Whether the process is stopped (SIGSTOP): state T in /proc/<pid>/stat. */
function stopped(p: ServerProcess): boolean {
  try {
    return / T /.test(readFileSync(`/proc/${p.child.pid}/stat`, 'utf8').replace(/^.*\)/, ''));
  } catch {
    return false;
  }
}

/**
 * A `work` process paused (SIGSTOP: a frozen VM, a long stall) past its lease while it holds an
 * event, another `work` process takes the event over and finishes it, then the first resumes
 * (SIGCONT). The paused one must not apply its stale work, nor overwrite the new owner's result.
 */
describeEachStore('a work process paused past its lease, then resumed', (kind) => {
  let db: TestDatabase;
  let dir: string;
  let store: InboxStore;
  let doc: Record<string, unknown>;
  const procs: ServerProcess[] = [];
  beforeEach(async () => {
    db = await freshDatabase(kind);
    dir = mkdtempSync(join(tmpdir(), 'wi-pause-'));
    doc = configDoc(db.url, { log: { level: 'warn' }, workers: { leaseMs: 1000, pollMs: 50, concurrency: 4, batchSize: 4 }, retry: { baseMs: 10, capMs: 50, maxAttempts: 5 } });
    store = openStore(db.url);
    await store.migrate();
    await store.transaction((tx) => tx.query('CREATE TABLE ledger (event_id TEXT NOT NULL, pid INTEGER NOT NULL)'));
  });
  afterEach(async () => {
    for (const p of procs.splice(0)) {
      p.child.kill('SIGCONT');
      p.child.kill('SIGKILL');
      await exited(p);
    }
    await store.close();
    await db.cleanup();
    rmSync(dir, { recursive: true, force: true });
  });

  const accept = (ids: string[]) => acceptThroughIngress(doc, ids);

  async function ledger(): Promise<{ event_id: string; pid: number }[]> {
    return (await store.transaction((tx) => tx.query<{ event_id: string; pid: number | string }>('SELECT event_id, pid FROM ledger'))).map((r) => ({ event_id: r.event_id, pid: Number(r.pid) }));
  }

  async function work(name: string, env: NodeJS.ProcessEnv): Promise<ServerProcess> {
    const p = await spawnWork(join(dir, `${name}.yaml`), doc, HANDLERS, env);
    procs.push(p);
    return p;
  }

  async function allDone(inboxIds: string[]): Promise<boolean> {
    for (const id of inboxIds) {
      if ((await store.getEvent(id))?.status !== 'PROCESSED') return false;
      if ((await store.listEffects(id)).some((f) => f.status !== 'DONE')) return false;
    }
    return true;
  }

  for (const at of kind === 'postgres' ? ['before', 'after'] : ['before']) {
    it(`paused inside a handler (${at} its write): the other process applies the event once; resumed, the first commits nothing`, async () => {
      const ids = ['evt_a', 'evt_b'];
      const inboxIds = await accept(ids);
      const effectLog = join(dir, 'effects.log');
      writeFileSync(effectLog, '');
      const a = await work('a', { EFFECT_LOG: effectLog, PAUSE_IN_HANDLER: 'evt_a', PAUSE_AT: at });
      await waitFor(() => stopped(a), 10_000, 'a paused');
      const b = await work('b', { EFFECT_LOG: effectLog });
      await waitFor(() => allDone(inboxIds), 20_000, 'every event PROCESSED with its effects DONE');
      const before = await store.getEvent(inboxIds[0]!);
      a.child.kill('SIGCONT');
      // Both stop gracefully: every batch in flight settles (or is refused) before they exit.
      await new Promise((r) => setTimeout(r, 1500));
      for (const p of [a, b]) p.child.kill('SIGTERM');
      expect(await exited(a)).toBe('0');
      expect(await exited(b)).toBe('0');
      const l = await ledger();
      for (const id of ids) expect(l.filter((r) => r.event_id === id), id).toHaveLength(1);
      expect(l.find((r) => r.event_id === 'evt_a')!.pid).toBe(b.child.pid);
      const after = await store.getEvent(inboxIds[0]!);
      expect(after).toMatchObject({ status: 'PROCESSED', handlerVersion: 'ledger@1' });
      expect(after!.processedAtMs).toBe(before!.processedAtMs);
      expect((await store.listEffects(inboxIds[0]!)).map((e) => [e.name, e.status])).toEqual([['notify', 'DONE']]);
      const runs = readFileSync(effectLog, 'utf8').trim().split('\n');
      expect(runs.filter((r) => r.startsWith('evt_a '))).toEqual([`evt_a ${b.child.pid}`]);
    }, 60_000);
  }

  if (kind === 'postgres') {
    it('paused holding a row lock its takeover needs: the server ends the frozen transaction, the other process applies the event once', async () => {
      // Two attempts only: before the frozen transaction had an idle limit, the new owner waited on
      // the lock until its handler timed out, twice, and the event ended FAILED.
      doc = { ...doc, retry: { baseMs: 10, capMs: 50, maxAttempts: 2 } };
      await store.transaction(async (tx) => {
        await tx.query('CREATE TABLE gate (id INTEGER PRIMARY KEY)');
        await tx.query('INSERT INTO gate (id) VALUES (1)');
      });
      const inboxIds = await accept(['evt_g']);
      const effectLog = join(dir, 'effects.log');
      writeFileSync(effectLog, '');
      const a = await work('a', { EFFECT_LOG: effectLog, PAUSE_IN_HANDLER: 'evt_g', PAUSE_AT: 'after', LOCK_GATE: '1' });
      await waitFor(() => stopped(a), 10_000, 'a paused');
      const b = await work('b', { EFFECT_LOG: effectLog, LOCK_GATE: '1' });
      await waitFor(async () => ['PROCESSED', 'FAILED'].includes((await store.getEvent(inboxIds[0]!))?.status ?? ''), 20_000, 'the event settled');
      expect(await store.getEvent(inboxIds[0]!)).toMatchObject({ status: 'PROCESSED' });
      await waitFor(() => allDone(inboxIds), 20_000, 'its effect DONE');
      a.child.kill('SIGCONT');
      await new Promise((r) => setTimeout(r, 1500));
      for (const p of [a, b]) p.child.kill('SIGTERM');
      expect(await exited(a)).toBe('0');
      expect(await exited(b)).toBe('0');
      expect(await ledger()).toEqual([{ event_id: 'evt_g', pid: b.child.pid }]);
    }, 60_000);
  }

  it('paused inside an effect executor: the other process runs it and settles DONE; resumed, the first does not overwrite that', async () => {
    const ids = ['evt_e'];
    const inboxIds = await accept(ids);
    const effectLog = join(dir, 'effects.log');
    writeFileSync(effectLog, '');
    const a = await work('a', { EFFECT_LOG: effectLog, PAUSE_IN_EFFECT: 'evt_e' });
    await waitFor(() => stopped(a), 10_000, 'a paused');
    const b = await work('b', { EFFECT_LOG: effectLog });
    await waitFor(() => allDone(inboxIds), 20_000, 'the event PROCESSED with its effect DONE');
    const [done] = await store.listEffects(inboxIds[0]!);
    a.child.kill('SIGCONT');
    await new Promise((r) => setTimeout(r, 1500));
    for (const p of [a, b]) p.child.kill('SIGTERM');
    expect(await exited(a)).toBe('0');
    expect(await exited(b)).toBe('0');
    const [effect] = await store.listEffects(inboxIds[0]!);
    expect(effect).toMatchObject({ status: 'DONE', doneAtMs: done!.doneAtMs, attemptCount: done!.attemptCount });
    expect((await ledger()).filter((r) => r.event_id === 'evt_e')).toHaveLength(1);
  }, 60_000);
});
