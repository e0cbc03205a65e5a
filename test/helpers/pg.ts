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
