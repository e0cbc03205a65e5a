import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { captureLog } from '../helpers/log.js';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import pg from 'pg';
import { stringify } from 'yaml';
import { afterEach, beforeEach, expect, it } from 'vitest';
import { startApp } from '../../src/app.js';
import { parseConfig } from '../../src/config/schema.js';
import { LATEST_VERSION } from '../../src/store/migrations.js';
import { openStore } from '../../src/store/open.js';
import { configDoc } from '../helpers/app.js';
import { stripeEvent, stripeHeaders } from '../helpers/events.js';
import { post } from '../helpers/http.js';
import { runCli } from '../helpers/server-process.js';
import { describeEachStore, freshDatabase, type TestDatabase } from '../helpers/stores.js';

/**
 * A database a newer build migrated, then the deployment rolled back to this build: `migrate`
 * said "schema is up to date" and serve nothing at all, so nobody learnt that this build now runs
 * on a schema it was never tested with. Both now say so, and neither refuses (a rollback must work).
 */

const NEWER = LATEST_VERSION + 1;

/** Records migration NEWER as a newer build would have, beside this build's. */
async function migrateAsNewerBuild(db: TestDatabase): Promise<void> {
  const store = openStore(db.url);
  await store.migrate();
  await store.close();
  if (db.kind === 'sqlite') {
    const conn = new Database(db.url.slice('sqlite:'.length));
    conn.prepare('INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)').run(NEWER, 'from a newer build', Date.now());
    conn.close();
  } else {
    const client = new pg.Client({ connectionString: db.url });
    await client.connect();
    await client.query('INSERT INTO schema_migrations (version, name) VALUES ($1, $2)', [NEWER, 'from a newer build']);
    await client.end();
  }
}

const WARNING = `the database's schema is at version ${NEWER}, newer than this build's ${LATEST_VERSION} (a newer webhook-inbox migrated it): nothing was applied or undone`;

describeEachStore('a schema newer than this build', (kind) => {
  let db: TestDatabase;
  let dir: string;
  beforeEach(async () => {
    db = await freshDatabase(kind);
    dir = mkdtempSync(join(tmpdir(), 'wi-newer-schema-'));
    await migrateAsNewerBuild(db);
  });
  afterEach(async () => {
    await db.cleanup();
    rmSync(dir, { recursive: true, force: true });
  });

  it('migrate warns that it is newer (exit 0: a rollback runs migrate too) instead of "schema is up to date"', async () => {
    const file = join(dir, 'm.yaml');
    writeFileSync(file, stringify(configDoc(db.url)));
    const r = await runCli(['migrate', '--config', file]);
    expect(r.code, r.err).toBe(0);
    expect(r.err).toContain(`webhook-inbox migrate: warning: ${WARNING}`);
    expect(r.out).not.toContain('up to date');
  });

  it('serve logs the same warning once at start, and accepts as before', async () => {
    const lines: string[] = [];
    const app = await startApp(parseConfig(configDoc(db.url), {}), { logger: captureLog(lines), workers: false });
    try {
      const warnings = lines.map((l) => JSON.parse(l) as { level: number; msg: string }).filter((l) => l.msg.startsWith(WARNING));
      expect(warnings).toHaveLength(1);
      expect(warnings[0]!.level).toBe(40);
      const body = stripeEvent('evt_newer_schema');
      expect((await post(`${app.url}/webhooks/stripe`, body, stripeHeaders(body))).status).toBe(200);
      expect((await post(`${app.url}/readyz`, '', {}, 'GET')).status).toBe(200);
    } finally {
      await app.close();
    }
  });
});

