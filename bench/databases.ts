/** Throwaway PostgreSQL databases for bench runs, made through the admin database (`BENCH_PG_ADMIN_URL`). */
import pg from 'pg';

export const PG_ADMIN = process.env.BENCH_PG_ADMIN_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres';

/** One connection for fn: to the admin database, or to `url`. */
export async function pgAdmin<T>(fn: (c: pg.Client) => Promise<T>, url = PG_ADMIN): Promise<T> {
  const c = new pg.Client({ connectionString: url, connectionTimeoutMillis: 3000 });
  await c.connect();
  try {
    return await fn(c);
  } finally {
    await c.end().catch(() => undefined);
  }
}

/** Drops (if present) and creates database `name`; returns its URL. */
export async function recreateDb(name: string): Promise<string> {
  await pgAdmin(async (c) => {
    await c.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
    await c.query(`CREATE DATABASE ${name}`);
  });
  const u = new URL(PG_ADMIN);
  u.pathname = `/${name}`;
  return u.toString();
}

export async function dropDb(name: string): Promise<void> {
  await pgAdmin((c) => c.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`)).catch(() => undefined);
}

/**
 * PostgreSQL writes WAL into segment files (16 MiB) that each checkpoint recycles for reuse. When
 * no free one is left, the backend that needs the next creates it — zero-fills it and fsyncs it —
 * holding the WAL write lock, so every commit on the server waits: 60–90 ms per segment on the
 * AMD EPYC of 2026-12-07, where each creation lined up with a stalled 100 ms slice of a
 * PostgreSQL step (bench/README.md). A server under sustained load keeps up to max_wal_size of recycled segments
 * (its checkpoints come from WAL volume, and it recycles up to that); a bench step after a slower
 * one, or the first after PostgreSQL started, finds few. So before each step that writes to
 * PostgreSQL (the Express reference's and ours) the bench tops the free segments up to that
 * steady state: it writes the missing WAL as logical messages (no table; nothing decodes them)
 * and checkpoints, which recycles it. The steps' "WAL files made" column shows what remains.
 */
export async function ensureWalSupply(): Promise<void> {
  if (walSupplyFailed) return;
  try {
    await pgAdmin(async (c) => {
      const target = WAL_SUPPLY_SHARE * Math.min(WAL_SUPPLY_MAX, Number((await c.query<{ b: string }>(`SELECT setting::bigint * 1024 * 1024 AS b FROM pg_settings WHERE name = 'max_wal_size'`)).rows[0]!.b));
      for (let round = 0; round < 4; round++) {
        const { aheadBytes } = await walState(c);
        if (aheadBytes >= target) return;
        const mib = Math.ceil((target - aheadBytes) / 2 ** 20);
        await c.query(`SELECT count(pg_logical_emit_message(false, 'webhook-inbox-bench', repeat('x', 1048576))) FROM generate_series(1, $1::int)`, [mib]);
        await c.query('CHECKPOINT');
      }
    });
  } catch (e) {
    walSupplyFailed = true;
    console.warn(`bench: could not top up PostgreSQL's free WAL segments (${(e as Error).message}); PostgreSQL steps may include WAL file creation`);
  }
}

let walSupplyFailed = false;
/** Top up to this share of max_wal_size (a checkpoint recycles up to max_wal_size ahead of it). */
const WAL_SUPPLY_SHARE = 0.9;
/** A server configured with a huge max_wal_size is topped up to 1 GiB: no step writes more. */
const WAL_SUPPLY_MAX = 2 ** 30;

/** Bytes in WAL segment files ahead of the insert position (free for reuse), and all segment files. */
export async function walState(c: pg.Client): Promise<{ aheadBytes: number; files: number }> {
  const { rows } = await c.query<{ ahead: string; files: string }>(
    `SELECT coalesce(sum(size) FILTER (WHERE name > pg_walfile_name(pg_current_wal_insert_lsn())), 0) AS ahead, count(*) AS files
       FROM pg_ls_waldir() WHERE name ~ '^[0-9A-F]{24}$'`,
  );
  return { aheadBytes: Number(rows[0]!.ahead), files: Number(rows[0]!.files) };
}

/** Segment files in pg_wal now, or undefined where the admin role may not list them. */
export async function walFiles(): Promise<number | undefined> {
  return pgAdmin(async (c) => (await walState(c)).files).catch(() => undefined);
}
