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
