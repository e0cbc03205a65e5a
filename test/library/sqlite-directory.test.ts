import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pino from 'pino';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { parseConfig, startApp, StorageUnavailableError } from '../../src/index.js';
import { startWorkers } from '../../src/workers.js';
import { configDoc } from '../helpers/app.js';

/**
 * A SQLite database whose directory cannot be created (a path under a regular file) is a store
 * that cannot be used: the library caller gets StorageUnavailableError naming the file, as for a
 * file that cannot be opened, not mkdir's bare EEXIST.
 */
describe('library: a sqlite: path whose directory cannot be created', () => {
  let dir: string;
  let db: string;
  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), 'wi-sqlite-dir-'));
    const file = join(dir, 'a-file');
    writeFileSync(file, 'not a directory');
    db = join(file, 'inbox.db');
  });
  afterEach(() => rmSync(dir, { recursive: true, force: true }));

  it('startApp and startWorkers reject with StorageUnavailableError naming the file', async () => {
    const config = parseConfig(configDoc(`sqlite:${db}`), {});
    const logger = pino({ level: 'silent' });
    for (const start of [() => startApp(config, { logger, env: {} }), () => startWorkers(config, { logger, env: {} })]) {
      const err = await start().then(() => null, (e: unknown) => e);
      expect(err).toBeInstanceOf(StorageUnavailableError);
      expect((err as Error).message).toContain(`cannot create the directory of ${db}`);
    }
  });
});
