import pg from 'pg';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { openStore } from '../../src/store/open.js';
import { pgAvailable, PG_ADMIN_URL } from '../helpers/pg.js';
import { record } from '../helpers/records.js';
import { freshDatabase, type TestDatabase } from '../helpers/stores.js';

/** Creates the login role if it is not there yet (roles outlive the throwaway databases). */
async function ensureRole(role: string): Promise<void> {
  const admin = new pg.Client({ connectionString: PG_ADMIN_URL });
  await admin.connect();
  try {
    await admin.query(`DO $$ BEGIN IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = '${role}') THEN CREATE ROLE ${role} LOGIN; END IF; END $$`);
  } finally {
    await admin.end();
  }
}

/** Runs `fn` on a client connected to `url`. */
async function connected(url: string, fn: (c: pg.Client) => Promise<void>): Promise<void> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    await fn(client);
  } finally {
    await client.end();
  }
}

/** The same database's URL, as `user`. */
function withUser(url: string, user: string): string {
  const u = new URL(url);
  u.username = user;
  return u.toString();
}

/**
 * A common PostgreSQL deployment: the schema's owner runs `webhook-inbox migrate`, and serve and
 * work run as a role that may read and write the tables but not create any (PostgreSQL 15 gives
 * no one but the owner CREATE on schema public). `work` has no --no-migrate, so its migrate-at-start
 * must succeed when there is nothing to apply. It sent CREATE TABLE IF NOT EXISTS schema_migrations
 * first, which PostgreSQL refuses without CREATE on the schema even when the table is there.
 */
describe.runIf(await pgAvailable())('PostgreSQL migrate by a role without DDL rights, on a current schema', () => {
  const ROLE = 'wi_test_noddl';
  let db: TestDatabase;
  beforeEach(async () => {
    db = await freshDatabase('postgres');
    const owner = openStore(db.url);
    await owner.migrate();
    await owner.close();
    await ensureRole(ROLE);
    await connected(db.url, async (owner) => {
      await owner.query(`REVOKE CREATE ON SCHEMA public FROM PUBLIC`);
      await owner.query(`GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO ${ROLE}`);
    });
    // Control: this role really may not create tables here.
    await connected(withUser(db.url, ROLE), async (asRole) => {
      await expect(asRole.query('CREATE TABLE wi_probe (x integer)')).rejects.toThrow(/permission denied for schema public/);
    });
  });
  afterEach(() => db.cleanup());

  it('migrate applies nothing and succeeds; the store then accepts', async () => {
    const store = openStore(withUser(db.url, ROLE));
    try {
      await expect(store.migrate()).resolves.toEqual([]);
      await expect(store.ping()).resolves.toBeUndefined();
      expect(await store.acceptBatch([record('evt_noddl')])).toEqual([expect.objectContaining({ duplicate: false })]);
    } finally {
      await store.close();
    }
  });
});

/**
 * The same look-up, the other way round. PostgreSQL's advice for a shared database is a schema per
 * role, named after it, first on the default search_path ("$user", public). Tables its owner made in
 * public, a server running as such a role: CREATE TABLE IF NOT EXISTS looks only in the schema it
 * would create in, so it made an empty schema_migrations in the role's own schema, every migration
 * ran again there, and from then on the server read and wrote that empty copy; every row in public
 * (events still to process among them) was out of its sight.
 */
describe.runIf(await pgAvailable())('PostgreSQL migrate by a role with a schema of its own first on its search_path', () => {
  const ROLE = 'wi_test_ownschema';
  let db: TestDatabase;
  afterEach(() => db.cleanup());

  it('finds the schema already migrated in public: applies nothing and sees the rows there', async () => {
    db = await freshDatabase('postgres');
    const owner = openStore(db.url);
    const [accepted] = await (async () => {
      try {
        await owner.migrate();
        return await owner.acceptBatch([record('evt_in_public')]);
      } finally {
        await owner.close();
      }
    })();
    await ensureRole(ROLE);
    await connected(db.url, async (owner) => {
      await owner.query(`CREATE SCHEMA ${ROLE} AUTHORIZATION ${ROLE}`);
      await owner.query(`GRANT USAGE ON SCHEMA public TO ${ROLE}`);
      await owner.query(`GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO ${ROLE}`);
    });
    const store = openStore(withUser(db.url, ROLE));
    try {
      await expect(store.migrate()).resolves.toEqual([]);
      expect(await store.getInbox(accepted!.inboxId)).toMatchObject({ providerEventId: 'evt_in_public' });
    } finally {
      await store.close();
    }
  });
});
