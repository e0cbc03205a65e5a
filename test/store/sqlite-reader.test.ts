import { execFile } from 'node:child_process';
import { existsSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { openStore, type InboxStore } from '../../src/index.js';
import { record } from '../helpers/records.js';
import { freshDatabase, type TestDatabase } from '../helpers/stores.js';

/**
 * SQLite's statistics reads (backlog, queueStats: every /metrics scrape) run on a read-only
 * connection of their own, started at the first one (test/http/metrics-writer-busy.test.ts).
 * What that connection must not break: a store read before it is migrated, `:memory:` (which
 * no second connection can open), and close() (no thread left behind to hold the process).
 */
describe('SQLite statistics reader', () => {
  let db: TestDatabase;
  let store: InboxStore | undefined;
  beforeEach(async () => {
    db = await freshDatabase('sqlite');
  });
  afterEach(async () => {
    await store?.close();
    store = undefined;
    await db.cleanup();
  });

  it('read before the schema exists: that read fails, and the same store reads the backlog once migrated', async () => {
    store = openStore(db.url);
    await expect(store.backlog()).rejects.toThrow(/no such table/);
    await store.migrate();
    await store.acceptBatch([record('evt_after_migrate')]);
    expect((await store.backlog()).map((b) => [b.status, b.count])).toEqual([['PENDING', 1]]);
    expect((await store.queueStats()).inboxFailed).toBe(0);
    // Closed before the writer: the writer, the last connection, checkpoints the WAL and removes it (a read-only one cannot).
    await store.close();
    store = undefined;
    expect(existsSync(`${db.url.slice('sqlite:'.length)}-wal`)).toBe(false);
  });

  it('`:memory:` reads its statistics (on its one connection) and closes', async () => {
    store = openStore('sqlite::memory:');
    await store.migrate();
    await store.acceptBatch([record('evt_memory_1'), record('evt_memory_2')]);
    expect((await store.backlog()).map((b) => [b.status, b.count])).toEqual([['PENDING', 2]]);
    expect((await store.queueStats()).outboxUnpublished).toBe(2);
    await store.close();
    store = undefined;
  });

  it('close() ends the reader thread: a process that read statistics and closed its store exits on its own', async () => {
    const index = fileURLToPath(new URL('../../dist/index.js', import.meta.url));
    const script = `
      const { openStore } = await import(${JSON.stringify(index)});
      const store = openStore(${JSON.stringify(db.url)});
      await store.migrate();
      const rows = await store.backlog();
      await store.queueStats();
      await store.close();
      console.log('closed', rows.length);`;
    // A file, not `-e`: a worker thread refuses the --input-type flag it would inherit.
    const file = join(dirname(db.url.slice('sqlite:'.length)), 'close-reader.mjs');
    writeFileSync(file, script);
    // A thread left running keeps the process alive: the child is then killed at the timeout and the call fails.
    const out = await new Promise<string>((resolve, reject) => {
      execFile(process.execPath, [file], { encoding: 'utf8', timeout: 30_000 }, (err, stdout, stderr) =>
        err ? reject(new Error(`${err.message} (signal ${err.signal ?? 'none'}): ${stderr}`)) : resolve(stdout));
    });
    expect(out.trim()).toBe('closed 0');
  }, 40_000);
});
