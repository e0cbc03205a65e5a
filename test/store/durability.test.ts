import { describe, expect, it } from 'vitest';
import { openStore } from '../../src/store/open.js';
import type { PostgresStore } from '../../src/store/postgres/store.js';
import { describeEachStore } from '../helpers/stores.js';
import { freshDatabase } from '../helpers/stores.js';

/**
 * workers.durableCommits: accepts always wait for the disk; the engine's own transactions (what a
 * handler's ctx.tx runs in) wait only when asked to. Read from inside the transaction itself.
 */
describeEachStore('commit durability of engine transactions vs accepts', (kind) => {
  const setting = kind === 'sqlite' ? 'PRAGMA synchronous' : 'SHOW synchronous_commit';
  const relaxed = kind === 'sqlite' ? 1 : 'off'; // SQLite NORMAL / PostgreSQL off
  const durable = kind === 'sqlite' ? 2 : 'on'; // SQLite FULL / PostgreSQL on

  it.each([[false, relaxed], [true, durable]] as const)('durableEngineCommits %s: a handler transaction runs with %s', async (flag, expected) => {
    const db = await freshDatabase(kind);
    const store = openStore(db.url, { durableEngineCommits: flag });
    try {
      await store.migrate();
      const rows = await store.transaction((tx) => tx.query<Record<string, unknown>>(setting));
      expect(Object.values(rows[0]!)[0]).toBe(expected);
      if (kind === 'postgres') {
        // The accept pool is never relaxed.
        const r = await (store as PostgresStore).pool.query<{ synchronous_commit: string }>('SHOW synchronous_commit');
        expect(r.rows[0]!.synchronous_commit).toBe('on');
      }
    } finally {
      await store.close();
      await db.cleanup();
    }
  });
});

describe('workers.durableCommits in the config', () => {
  it('is false unless set', async () => {
    const { parseWorkers } = await import('../../src/config/engine.js');
    expect(parseWorkers(undefined).durableCommits).toBe(false);
    expect(parseWorkers({ durableCommits: true }).durableCommits).toBe(true);
    expect(() => parseWorkers({ durableCommits: 'yes' })).toThrow(/workers\.durableCommits/);
  });
});
