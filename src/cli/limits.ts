/**
 * The CLI's numeric defaults and bounds, in a module of their own: main.ts shows them in its usage
 * text and checks options against them before it loads a command's module (each command's module
 * is imported only when that command runs, so `--help` and a usage error load no driver).
 */

/** The most rows one `effects failed` / `outbox parked` listing shows (--limit's maximum). */
export const MAX_LIST_LIMIT = 1000;

/**
 * `keys reseal` works at most a quarter of the time unless told otherwise: it is meant to run
 * beside a live server. Measured with bench/reseal-under-load.ts (1,000 req/s, 50,000 payloads,
 * 2 cores shared with the server, the database and the load generator): ack p99 on SQLite 13–18 ms
 * alone, 47 ms beside an unpaced reseal, 19–25 ms beside this one; on PostgreSQL 24–58 ms alone,
 * 404 ms unpaced, 98–171 ms at 25 % (bench/RESULTS.md). `--busy 100` for a maintenance window.
 */
export const DEFAULT_BUSY_PERCENT = 25;
