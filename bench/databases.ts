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
 * PostgreSQL step (bench/README.md). A server under sustained load has recycled files for what it
 * writes between checkpoints; a bench step after a slower one, or the first after PostgreSQL
 * started, finds few. So before each step that writes to PostgreSQL (the Express reference's and
 * ours) the bench tops the free files up to what the step will write (`wantBytes`, at most 90 % of
 * max_wal_size): where fewer are free it writes that much WAL as logical messages (no table;
 * nothing decodes them) and checkpoints, which recycles those files. The steps' "WAL files made"
 * column shows what remains.
 */
export async function ensureWalSupply(wantBytes: number, adminUrl = PG_ADMIN): Promise<{ aheadBefore: number; aheadAfter: number } | undefined> {
  if (walSupplyFailed) return undefined;
  try {
    return await pgAdmin(async (c) => {
      const { aheadBytes: aheadBefore, maxWalBytes } = await walState(c);
      const target = Math.min(wantBytes, 0.9 * maxWalBytes);
      let ahead = aheadBefore;
      if (ahead < target && ahead < walCeiling) {
        // The whole target, not the shortfall: WAL written first fills the free files, and only
        // what runs past them makes new ones. (It also lifts the checkpoint's estimate of the WAL
        // between checkpoints, which bounds how far ahead it recycles: ~2.09× the estimate.)
        await c.query(`SELECT count(pg_logical_emit_message(false, 'webhook-inbox-bench', repeat('x', 1048576))) FROM generate_series(1, $1::int)`, [Math.ceil(target / 2 ** 20)]);
        await c.query('CHECKPOINT');
        const now = (await walState(c)).aheadBytes;
        // Past max_wal_size / (1 + checkpoint_completion_target) of WAL PostgreSQL checkpoints on
        // its own and recycles the files written so far, so a top-up past that reuses them rather
        // than making more (seen: 42 files, 656 MiB, with max_wal_size 1 GB): no later top-up
        // gets further, and none is tried.
        if (now < target) walCeiling = now;
        ahead = now;
      }
      return { aheadBefore, aheadAfter: ahead };
    }, adminUrl);
  } catch (e) {
    walSupplyFailed = true;
    console.warn(`bench: could not top up PostgreSQL's free WAL segments (${(e as Error).message}); PostgreSQL steps may include WAL file creation`);
    return undefined;
  }
}

let walSupplyFailed = false;
/** The free WAL a top-up could not raise (see above): later top-ups stop there. */
let walCeiling = Infinity;

/**
 * The WAL that `requests` bench requests write, with room: 230 MB per 2,000 req/s step of ~23,000
 * requests (mean body 10 KiB) on 2026-12-07, i.e. ~10 KB each; counted as 16 KiB.
 */
export const walForRequests = (requests: number): number => requests * 16 * 1024;

/** Bytes in WAL segment files ahead of the insert position (free for reuse), all segment files, and max_wal_size in bytes. */
export async function walState(c: pg.Client): Promise<{ aheadBytes: number; files: number; maxWalBytes: number }> {
  const { rows } = await c.query<{ ahead: string; files: string; max_wal: string }>(
    `SELECT coalesce(sum(size) FILTER (WHERE name > pg_walfile_name(pg_current_wal_insert_lsn())), 0) AS ahead, count(*) AS files,
            (SELECT setting::bigint * 1024 * 1024 FROM pg_settings WHERE name = 'max_wal_size') AS max_wal
       FROM pg_ls_waldir() WHERE name ~ '^[0-9A-F]{24}$'`,
  );
  return { aheadBytes: Number(rows[0]!.ahead), files: Number(rows[0]!.files), maxWalBytes: Number(rows[0]!.max_wal) };
}

/** Segment files in pg_wal now, or undefined where the admin role may not list them. */
export async function walFiles(): Promise<number | undefined> {
  return pgAdmin(async (c) => (await walState(c)).files).catch(() => undefined);
}
