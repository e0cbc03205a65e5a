import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pino from 'pino';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { parseConfig, startWorkers, StorageUnavailableError } from '../../src/index.js';
import { configDoc } from '../helpers/app.js';

/**
 * A start that fails leaves nothing running: startWorkers whose store cannot be opened (a SQLite
 * path under a regular file) had already started its 10 s secret checks, and that interval ran on
 * for the life of the process (unref'd, so it did not hold the exit, but a host that retries the
 * start gathered one more per attempt).
 */
describe('library: startWorkers that cannot open its store', () => {
  let dir: string | undefined;
  afterEach(() => {
    vi.useRealTimers();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it('leaves no timer behind', async () => {
    dir = mkdtempSync(join(tmpdir(), 'wi-failed-start-'));
    writeFileSync(join(dir, 'a-file'), 'not a directory');
    const config = parseConfig(configDoc(`sqlite:${join(dir, 'a-file', 'inbox.db')}`), {});
    vi.useFakeTimers({ toFake: ['setInterval', 'clearInterval', 'setTimeout', 'clearTimeout'] });
    const err = await startWorkers(config, { logger: pino({ level: 'silent' }), env: {} }).then(() => null, (e: unknown) => e);
    expect(err).toBeInstanceOf(StorageUnavailableError);
    expect(vi.getTimerCount()).toBe(0);
  });
});
