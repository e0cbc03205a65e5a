import pg from 'pg';
import { randomBytes } from 'node:crypto';

/** Admin connection for creating throwaway databases (trust auth on loopback). */
export const PG_ADMIN_URL = process.env.WEBHOOK_INBOX_TEST_PG ?? 'postgres://postgres@127.0.0.1:5432/postgres';

/** CI sets this: the PostgreSQL suite must run, so an unreachable server fails instead of skipping. */
export const PG_REQUIRED = process.env.WEBHOOK_INBOX_REQUIRE_PG === '1';

let available: Promise<boolean> | undefined;

export function pgAvailable(): Promise<boolean> {
  available ??= (async () => {
    const c = new pg.Client({ connectionString: PG_ADMIN_URL, connectionTimeoutMillis: 2000 });
    try {
      await c.connect();
      await c.query('SELECT 1');
      return true;
    } catch {
      return false;
    } finally {
      await c.end().catch(() => undefined);
    }
  })();
  return available;
}

/** Creates an empty database; returns its URL and a drop function. */
export async function createTestDatabase(): Promise<{ url: string; drop(): Promise<void> }> {
  const name = `wi_test_${randomBytes(6).toString('hex')}`;
  const admin = new pg.Client({ connectionString: PG_ADMIN_URL });
  await admin.connect();
  await admin.query(`CREATE DATABASE ${name}`);
  await admin.end();
  const url = new URL(PG_ADMIN_URL);
  url.pathname = `/${name}`;
  return {
    url: url.toString(),
    async drop() {
      const a = new pg.Client({ connectionString: PG_ADMIN_URL });
      await a.connect();
      await a.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
      await a.end();
    },
  };
}

/**
 * Terminates, again and again until stopped, the backends of database `url` whose
 * application_name is `applicationName` (the app's pools name themselves), pausing up to
 * `maxPauseMs` between rounds. `stop()` resolves with how many backends it ended.
 */
export async function terminateBackendsWhile(url: string, applicationName: string, maxPauseMs: number): Promise<{ client: pg.Client; stop(): Promise<number> }> {
  const dbName = new URL(url).pathname.slice(1);
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  let stopped = false;
  let kills = 0;
  const loop = (async () => {
    while (!stopped) {
      const r = await client.query('SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid() AND application_name = $2', [dbName, applicationName]);
      kills += r.rowCount ?? 0;
      await new Promise((resolve) => setTimeout(resolve, 5 + Math.random() * maxPauseMs));
    }
  })();
  return {
    client,
    async stop() {
      stopped = true;
      await loop;
      return kills;
    },
  };
}
