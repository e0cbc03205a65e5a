import Database from 'better-sqlite3';
import pg from 'pg';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { MigrationError, openStore } from '../../src/index.js';
import { LATEST_VERSION } from '../../src/store/migrations.js';
import { pgAvailable } from '../helpers/pg.js';
import { describeEachStore, freshDatabase, type TestDatabase } from '../helpers/stores.js';
import { proxiedPostgres } from '../helpers/tcp-proxy.js';

/**
 * A migration the database refuses (here: a table of that name is already there, made by
 * something else) was the driver's bare error: no word of which migration, nor of what was left
 * applied. It is a MigrationError naming the migration and the database's reason, and the schema
 * is left as it was: none of that migration's tables, nothing recorded as applied.
 */
describeEachStore('a migration the database refuses', (kind) => {
  let db: TestDatabase;
  beforeEach(async () => {
    db = await freshDatabase(kind);
  });
  afterEach(() => db.cleanup());

  /** Runs SQL on the test database with the store's own driver, outside the store. */
  async function exec(sql: string): Promise<unknown[]> {
    if (kind === 'sqlite') {
      const file = new Database(db.url.slice('sqlite:'.length));
      try {
        return sql.trim().toUpperCase().startsWith('SELECT') ? file.prepare(sql).all() : (file.exec(sql), []);
      } finally {
        file.close();
      }
    }
    const client = new pg.Client({ connectionString: db.url });
    await client.connect();
    try {
      return (await client.query(sql)).rows;
    } finally {
      await client.end();
    }
  }

  it('rejects with MigrationError naming the migration and the reason; nothing is recorded as applied', async () => {
    await exec('CREATE TABLE webhook_payload (someone_elses integer)');
    const store = openStore(db.url);
    try {
      const err = await store.migrate().then(() => null, (e: unknown) => e);
      expect(err).toBeInstanceOf(MigrationError);
      expect((err as Error).message).toMatch(/migration 1 \(inbox, outbox and encrypted payloads\) failed: .*webhook_payload.* already exists/);
      // Migration 1's other tables were rolled back with it (PostgreSQL: the schema_migrations table too).
      const inbox = kind === 'sqlite' ? "SELECT name FROM sqlite_master WHERE name = 'webhook_inbox'" : "SELECT name FROM (SELECT to_regclass('webhook_inbox') AS name) t WHERE name IS NOT NULL";
      expect(await exec(inbox)).toEqual([]);
      if (kind === 'sqlite') expect(await exec('SELECT version FROM schema_migrations')).toEqual([]);
    } finally {
      await store.close();
    }
  });
});

/**
 * The migrations' COMMIT reached PostgreSQL and committed, but its reply was lost with the link.
 * The error said "nothing was applied", which was false: every migration was in. It now says
 * that the commit's outcome is unknown, and a second migrate (which applies only what is missing)
 * settles it.
 */
describe.runIf(await pgAvailable())('PostgreSQL migrate whose COMMIT reply is lost', () => {
  const cleanups: (() => Promise<void>)[] = [];
  afterEach(async () => {
    for (const c of cleanups.splice(0).reverse()) await c();
  });

  it('says the outcome is unknown, not that nothing was applied; migrate again applies nothing more', async () => {
    const { db, proxy, url, direct } = await proxiedPostgres(cleanups);
    proxy.muteAnswersAfter((c) => c.includes('COMMIT'));
    const store = openStore(url);
    cleanups.push(() => store.close());
    const migrating = store.migrate().then(() => null, (e: unknown) => e);
    // Committed at the server: every migration recorded, as seen past the proxy.
    const committed = async () => (await direct.query<{ n: string }>("SELECT count(*) AS n FROM (SELECT to_regclass('schema_migrations') AS t) x WHERE t IS NOT NULL")).rows[0]!.n === '1'
      && Number((await direct.query<{ n: string }>('SELECT count(*) AS n FROM schema_migrations')).rows[0]!.n) === LATEST_VERSION;
    const deadline = Date.now() + 20_000;
    while (!(await committed())) {
      expect(Date.now()).toBeLessThan(deadline);
      await new Promise((r) => setTimeout(r, 20));
    }
    await proxy.stop();
    const err = await migrating;
    expect(err).toBeInstanceOf(MigrationError);
    expect((err as Error).message).toMatch(/the commit failed: .*outcome is unknown/);
    expect((err as Error).message).not.toMatch(/nothing was applied/);
    const again = openStore(db.url);
    try {
      expect(await again.migrate()).toEqual([]);
    } finally {
      await again.close();
    }
  });
});
