import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { stringify } from 'yaml';
import { openStore } from '../../src/store/open.js';
import { configDoc } from '../helpers/app.js';
import { pgAvailable } from '../helpers/pg.js';
import { record } from '../helpers/records.js';
import { runCli } from '../helpers/server-process.js';
import { freshDatabase, type TestDatabase } from '../helpers/stores.js';

/**
 * Operator commands ran under the accept path's 10 s bound on one PostgreSQL statement. `keys list`
 * counts every payload and a reseal's page search reads the whole table; on a few million
 * payloads (~0.7 s per 500,000 measured here) they took longer and failed at every try with
 * "Query read timeout". A statement that needs 11 s (here: it waits 11 s for a lock held by
 * another session, standing in for the big table) now completes.
 */
describe.runIf(await pgAvailable())('operator commands wait longer than an accept for a statement [postgres]', () => {
  let db: TestDatabase;
  let dir: string;
  let config: string;

  beforeAll(async () => {
    db = await freshDatabase('postgres');
    const store = openStore(db.url);
    try {
      await store.migrate();
      await store.acceptBatch([record('evt_slow_count')]);
    } finally {
      await store.close();
    }
    dir = mkdtempSync(join(tmpdir(), 'wi-operator-timeout-'));
    config = join(dir, 'inbox.yaml');
    writeFileSync(config, stringify(configDoc(db.url)));
  });

  afterAll(async () => {
    await db?.cleanup();
    rmSync(dir, { recursive: true, force: true });
  });

  it('keys list whose count takes 11 s answers, exit 0', async () => {
    const holder = new pg.Client({ connectionString: db.url });
    await holder.connect();
    try {
      await holder.query('BEGIN');
      await holder.query('LOCK TABLE webhook_payload IN ACCESS EXCLUSIVE MODE');
      const run = runCli(['keys', 'list', '--config', config], 60_000);
      await new Promise((r) => setTimeout(r, 11_000));
      await holder.query('COMMIT');
      const r = await run;
      expect(r.code, r.err).toBe(0);
      expect(r.out).toMatch(/^k1\s+1\s+0\s+current$/m);
    } finally {
      await holder.end();
    }
  }, 40_000);
});
