import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, expect, it } from 'vitest';
import { stringify } from 'yaml';
import { LATEST_VERSION } from '../../src/store/migrations.js';
import { openStore } from '../../src/store/open.js';
import { configDoc } from '../helpers/app.js';
import { runCli } from '../helpers/server-process.js';
import { describeEachStore, freshDatabase, type TestDatabase } from '../helpers/stores.js';

/**
 * Several processes started at once on an empty database (a deployment's `serve`, `work` and
 * `migrate` steps all start together): every one migrates, none fails, and each migration is
 * applied once, by one of them (PostgreSQL: the advisory lock; SQLite: each version looked up
 * again under BEGIN IMMEDIATE).
 */
describeEachStore('migrate run by three fresh processes at once on an empty database', (kind) => {
  let db: TestDatabase | undefined;
  let dir: string | undefined;
  afterEach(async () => {
    await db?.cleanup();
    if (dir) rmSync(dir, { recursive: true, force: true });
    db = dir = undefined;
  });

  it('all exit 0; every migration applied exactly once, by one of them', async () => {
    db = await freshDatabase(kind);
    dir = mkdtempSync(join(tmpdir(), 'wi-migrate-race-'));
    const config = join(dir, 'config.yaml');
    writeFileSync(config, stringify(configDoc(db.url)));
    const runs = await Promise.all([1, 2, 3].map(() => runCli(['migrate', '--config', config])));
    for (const r of runs) expect(r, r.err).toMatchObject({ code: 0 });
    const all = Array.from({ length: LATEST_VERSION }, (_, i) => i + 1);
    const outs = runs.map((r) => r.out.trim());
    // PostgreSQL applies them all in one transaction; SQLite each in its own, so there they may be
    // split between the processes: never repeated.
    if (kind === 'postgres') expect(outs.filter((o) => o === `applied migrations: ${all.join(', ')}`)).toHaveLength(1);
    const applied = outs.filter((o) => o.startsWith('applied migrations: ')).flatMap((o) => o.slice('applied migrations: '.length).split(', ').map(Number));
    expect(applied.sort((a, b) => a - b)).toEqual(all);
    const store = openStore(db.url);
    try {
      expect(await store.schemaVersion()).toBe(LATEST_VERSION);
      const rows = await store.transaction((tx) => tx.query<{ version: number | string }>('SELECT version FROM schema_migrations ORDER BY version'));
      expect(rows.map((r) => Number(r.version))).toEqual(all);
    } finally {
      await store.close();
    }
  }, 60_000);
});
