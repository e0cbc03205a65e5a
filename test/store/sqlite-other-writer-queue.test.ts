import Database from 'better-sqlite3';
import { afterEach, expect, it } from 'vitest';
import { StorageUnavailableError } from '../../src/errors.js';
import { openStore } from '../../src/store/open.js';
import type { InboxStore } from '../../src/store/port.js';
import { freshDatabase, type TestDatabase } from '../helpers/stores.js';

const BUSY_MS = 1000;
const OPS = 5;

let db: TestDatabase | undefined;
let store: InboxStore | undefined;
afterEach(async () => {
  await store?.close();
  await db?.cleanup();
  store = db = undefined;
});

/**
 * While another process holds the SQLite write lock, this process's writes queue on its one
 * writer thread. Each may wait busyTimeoutMs for the lock, counted from when it came, not from
 * when its turn came: counted from its turn, five queued ops failed after 1, 2, 3, 4 and 5 s,
 * and a shutdown beside a `work` holding the lock took ~18 s (three ops of 6 s, one after another).
 */
it('SQLite: writes queued behind another process\'s lock each fail busyTimeoutMs after they came, not one after another', async () => {
  db = await freshDatabase('sqlite');
  store = openStore(`${db.url}?busyTimeoutMs=${BUSY_MS}`);
  await store.migrate();
  const other = new Database(db.url.slice('sqlite:'.length));
  try {
    other.exec('BEGIN IMMEDIATE');
    const t0 = performance.now();
    const outcomes = await Promise.all(Array.from({ length: OPS }, (_, i) =>
      store!.claimInbox(1, `owner-${i}`, 30_000, Date.now()).then(() => 'claimed', (err: unknown) => ({ err, ms: performance.now() - t0 }))));
    for (const o of outcomes) {
      expect(o).toMatchObject({ err: expect.any(StorageUnavailableError) });
      const { ms } = o as { ms: number };
      // Each waited its busy timeout (not less), and none waited for the ones ahead of it to
      // time out first (OPS × BUSY_MS).
      expect(ms).toBeGreaterThanOrEqual(BUSY_MS - 50);
      expect(ms).toBeLessThan(2.5 * BUSY_MS);
    }
  } finally {
    if (other.inTransaction) other.exec('ROLLBACK');
    other.close();
  }
});
