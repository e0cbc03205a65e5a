import pg from 'pg';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { PostgresStore } from '../../src/store/postgres/store.js';
import * as SQL from '../../src/store/postgres/sql.js';
import { record } from '../helpers/records.js';
import { pgAvailable } from '../helpers/pg.js';
import { freshDatabase, type TestDatabase } from '../helpers/stores.js';

/**
 * PostgresStore.warm (run by startApp before it listens): the accept connections and their
 * prepared statements exist before the first request, and stay through quiet spells.
 */
describe.runIf(await pgAvailable())('PostgreSQL warm-up', () => {
  let db: TestDatabase;
  let store: PostgresStore;
  let admin: pg.Client;
  beforeEach(async () => {
    db = await freshDatabase('postgres');
    store = new PostgresStore(db.url);
    await store.migrate();
    admin = new pg.Client({ connectionString: db.url, application_name: 'warm-test' });
    await admin.connect();
  });
  afterEach(async () => {
    await admin?.end();
    await store?.close();
    await db?.cleanup();
  });

  /** Connections of this store's accept pool (the engine's are named apart). */
  const acceptConnections = async () =>
    Number((await admin.query("SELECT count(*) AS n FROM pg_stat_activity WHERE datname = current_database() AND application_name = 'webhook-inbox'")).rows[0].n);
  /** A setting as a session on `on` has it. */
  const show = async (on: pg.Pool | pg.Client, name: string): Promise<string> => ((await on.query(`SHOW ${name}`)).rows[0] as Record<string, string>)[name]!;
  /** A store's two pools (the engine's is private). */
  const poolsOf = (s: PostgresStore) => s as unknown as { pool: pg.Pool; workPool: pg.Pool };

  it('opens all four accept connections and prepares each batch size on them, inserting nothing; they stay open through a quiet spell', async () => {
    expect(await acceptConnections()).toBe(1); // the one migrate used
    await store.warm(256);
    expect(await acceptConnections()).toBe(4);

    // Each connection's last statement is the winner lookup that ends its warm-up, after every batch size's statement.
    const { rows: last } = await admin.query<{ query: string }>(
      "SELECT query FROM pg_stat_activity WHERE datname = current_database() AND application_name = 'webhook-inbox'",
    );
    expect(last.map((r) => r.query.trim())).toEqual(Array(4).fill(SQL.SELECT_WINNERS.trim()));
    expect(await store.countRows()).toEqual({ inbox: 0, outbox: 0, payload: 0 });

    // Every connection already holds the statements of every batch size up to maxBatch.
    const clients = await Promise.all(Array.from({ length: 4 }, () => store.pool.connect()));
    try {
      expect(store.pool.totalCount).toBe(4); // the same four, none opened now
      for (const c of clients) {
        const { rows } = await c.query<{ name: string }>('SELECT name FROM pg_prepared_statements ORDER BY name');
        expect(rows.map((r) => r.name).sort()).toEqual([...[1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256].map((n) => `wi_accept_${n}`), 'wi_winners'].sort());
      }
    } finally {
      for (const c of clients) c.release();
    }

    // Batches of 5 and 21 events, one a duplicate, behave as without warm-up.
    const small = Array.from({ length: 5 }, (_, i) => record(`evt_small_${i}`));
    const large = Array.from({ length: 20 }, (_, i) => record(`evt_large_${i}`));
    expect((await store.acceptBatch(small)).every((r) => !r.duplicate)).toBe(true);
    expect((await store.acceptBatch([...large, record('evt_small_0')])).map((r) => r.duplicate).filter(Boolean)).toHaveLength(1);
    expect(await store.countRows()).toEqual({ inbox: 25, outbox: 25, payload: 25 });

    // pg-pool closes connections idle for 10 s unless the pool is at its minimum: these stay.
    await new Promise((r) => setTimeout(r, 10_600));
    expect(await acceptConnections()).toBe(4);
  });
  it('accept (and durable engine) connections commit with synchronous_commit on even when the database says off', async () => {
    const name = new URL(db.url).pathname.slice(1);
    await admin.query(`ALTER DATABASE "${name}" SET synchronous_commit = off`);
    const plain = new pg.Client({ connectionString: db.url });
    await plain.connect();
    const lax = new PostgresStore(db.url);
    try {
      expect(await show(plain, 'synchronous_commit')).toBe('off'); // what every new session of this database now gets
      expect(await show(poolsOf(lax).pool, 'synchronous_commit')).toBe('on');
      expect(await show(poolsOf(lax).workPool, 'synchronous_commit')).toBe('on');
    } finally {
      await plain.end();
      await lax.close();
    }
  });
  /**
   * libpq URLs may carry `?options=-c …` (a search_path, a statement_timeout). The pg driver lets
   * a connection string's parameters override the config object's, so such a URL used to replace
   * the store's own startup options whole: the accept connections then committed with the
   * database's synchronous_commit = off, and a 2xx was not durable. Read where it matters: on the
   * connection that inserts each accepted row (a trigger records its setting), for small and larger batches.
   */
  it('accept connections commit with synchronous_commit on even when the database URL carries its own options', async () => {
    const name = new URL(db.url).pathname.slice(1);
    await admin.query(`ALTER DATABASE "${name}" SET synchronous_commit = off`);
    await admin.query(`
      CREATE TABLE sync_probe (event_id text PRIMARY KEY, sync text NOT NULL, timeout text NOT NULL);
      CREATE FUNCTION sync_probe() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN
        INSERT INTO sync_probe VALUES (NEW.provider_event_id, current_setting('synchronous_commit'), current_setting('statement_timeout'));
        RETURN NEW;
      END $$;
      CREATE TRIGGER sync_probe AFTER INSERT ON webhook_inbox FOR EACH ROW EXECUTE FUNCTION sync_probe();`);
    const url = new URL(db.url);
    url.searchParams.set('options', '-c statement_timeout=12345 -c synchronous_commit=off');
    const withOptions = new PostgresStore(url.toString());
    try {
      await withOptions.acceptBatch([record('evt_here')]);
      await withOptions.acceptBatch(Array.from({ length: 4 }, (_, i) => record(`evt_batch_${i}`)));
      const { rows } = await admin.query<{ event_id: string; sync: string; timeout: string }>('SELECT * FROM sync_probe ORDER BY event_id');
      expect(rows).toEqual(['evt_batch_0', 'evt_batch_1', 'evt_batch_2', 'evt_batch_3', 'evt_here'].map((event_id) => ({
        event_id, sync: 'on', timeout: '12345ms', // ours wins; the URL's other option still applies
      })));
      const pools = poolsOf(withOptions);
      for (const pool of [pools.pool, pools.workPool]) expect(await show(pool, 'synchronous_commit')).toBe('on');
      expect(await show(pools.pool, 'plan_cache_mode')).toBe('force_generic_plan');
      expect(await show(pools.workPool, 'plan_cache_mode')).toBe('force_custom_plan');
    } finally {
      await withOptions.close();
    }
  });
  /**
   * backend_flush_after (session-defaults.ts): set on both pools' connections, before their first
   * query, where the server's default (0) is in force; a value anyone chose is kept.
   */
  it('both pools start writeback of evicted pages early, unless the database or the URL chose a value', async () => {
    const flushAfter = (pool: pg.Pool) => show(pool, 'backend_flush_after');
    expect(await show(admin, 'backend_flush_after')).toBe('0'); // the server's default: what a connection gets without us

    expect(await flushAfter(poolsOf(store).pool)).toBe('2MB');
    expect(await flushAfter(poolsOf(store).workPool)).toBe('2MB');

    const url = new URL(db.url);
    url.searchParams.set('options', '-c backend_flush_after=64kB');
    const byUrl = new PostgresStore(url.toString());
    const name = url.pathname.slice(1);
    await admin.query(`ALTER DATABASE "${name}" SET backend_flush_after = 0`);
    const byDatabase = new PostgresStore(db.url);
    try {
      expect(await flushAfter(poolsOf(byUrl).pool)).toBe('64kB');
      expect(await flushAfter(poolsOf(byUrl).workPool)).toBe('64kB');
      expect(await flushAfter(poolsOf(byDatabase).pool)).toBe('0');
      expect(await flushAfter(poolsOf(byDatabase).workPool)).toBe('0');
    } finally {
      await byUrl.close();
      await byDatabase.close();
    }
  });
  it('ping (for /readyz) fails on a database without this build\'s schema, and passes once migrated', async () => {
    const bare = await freshDatabase('postgres');
    const fresh = new PostgresStore(bare.url);
    try {
      await expect(fresh.ping()).rejects.toThrow(/^schema at version none, this build needs \d+: run webhook-inbox migrate/);
      await fresh.migrate();
      await expect(fresh.ping()).resolves.toBeUndefined();
    } finally {
      await fresh.close();
      await bare.cleanup();
    }
  });
});
