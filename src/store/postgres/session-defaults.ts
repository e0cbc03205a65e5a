import type pg from 'pg';

/**
 * Writeback of the data pages our backends evict, started every 2 MB they write (the most the
 * setting takes). The server's default is 0: the kernel kept those pages dirty (for up to 30 s,
 * or 10 % of memory) until the checkpoint's fsync, which then flushed ~500 MB at once and held
 * every commit's WAL flush behind it. At 4,500 req/s on PostgreSQL that was the step's whole
 * tail: each checkpoint's sync (0.57-0.64 s, one file 0.2 s) stalled every request for ~1 s (p99
 * 137 and 274 ms over 30 s); with this, sync 0.16-0.20 s, p99 19.7 and 43.4 ms; at 6,000 req/s
 * 159/244 against 46/50 ms (all at 256kB). At 256kB a stretch shorter than a checkpoint cycle
 * paid for it: the bench ladder's 10 s steps at 7,000 req/s, p99 73-234 ms against 52-162
 * without. At 2 MB the checkpoints' sync stays as short, and those steps came out as without
 * (p99 107, 294, 103 against 128, 40.5, 126 ms, 3 pairs: lower in 2) and better than at 256kB
 * in 4 of 5 pairs (bench/RESULTS.md, 2026-12-07).
 */
export const BACKEND_FLUSH_AFTER = '2MB';

/**
 * Only where nobody chose: a value from postgresql.conf, ALTER DATABASE / ROLE or the URL's
 * `options` has another source than 'default' and stays. One statement per new connection.
 */
export const FILL_SESSION_DEFAULTS = `SELECT set_config(name, '${BACKEND_FLUSH_AFTER}', false) FROM pg_settings
  WHERE name = 'backend_flush_after' AND source = 'default'`;

/**
 * Applies FILL_SESSION_DEFAULTS to a new connection: the pool's onConnect hook, so the pool hands
 * the connection out only after it. A failure changes nothing but this setting (a server built
 * without writeback control refuses a non-zero value): the connection goes on.
 */
export async function fillSessionDefaults(client: pg.ClientBase): Promise<void> {
  await client.query(FILL_SESSION_DEFAULTS).catch(() => undefined);
}
