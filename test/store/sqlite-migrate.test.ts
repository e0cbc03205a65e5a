import Database from 'better-sqlite3';
import { afterEach, describe, expect, it } from 'vitest';
import { LATEST_VERSION } from '../../src/store/migrations.js';
import { openStore } from '../../src/store/open.js';
import type { InboxStore } from '../../src/store/port.js';
import { freshDatabase, type TestDatabase } from '../helpers/stores.js';

/** Two processes (a `serve` and a `work`) starting together on one SQLite file: each its own connection. */
describe('SQLite migrations run by two processes at once', () => {
  let db: TestDatabase | undefined;
  const stores: InboxStore[] = [];
  afterEach(async () => {
    for (const s of stores.splice(0)) await s.close();
    await db?.cleanup();
  });

  it('both succeed: the second applies nothing the first already applied', async () => {
    db = await freshDatabase('sqlite');
    const file = db.url.slice('sqlite:'.length);
    // Both read the applied versions while a third connection holds the write lock, then queue for it.
    const blocker = new Database(file);
    blocker.pragma('journal_mode = WAL');
    blocker.exec('CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at INTEGER NOT NULL)');
    blocker.exec('BEGIN IMMEDIATE');
    const a = openStore(`${db.url}?busyTimeoutMs=5000`);
    const b = openStore(`${db.url}?busyTimeoutMs=5000`);
    stores.push(a, b);
    await Promise.all([a.ping().catch(() => undefined), b.ping().catch(() => undefined)]); // both threads up
    const runs = Promise.allSettled([a.migrate(), b.migrate()]);
    await new Promise((r) => setTimeout(r, 300)); // both have read schema_migrations and wait for the lock
    blocker.exec('ROLLBACK');
    blocker.close();
    const [ra, rb] = await runs;
    expect(ra.status).toBe('fulfilled');
    expect(rb.status).toBe('fulfilled');
    const applied = [...(ra as PromiseFulfilledResult<number[]>).value, ...(rb as PromiseFulfilledResult<number[]>).value].sort((x, y) => x - y);
    expect(applied).toEqual(Array.from({ length: LATEST_VERSION }, (_, i) => i + 1));
    await expect(a.ping()).resolves.toBeUndefined();
  });
});
