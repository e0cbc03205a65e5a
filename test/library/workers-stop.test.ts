import pino from 'pino';
import { afterEach, beforeEach, expect, it } from 'vitest';
import { parseConfig, startWorkers } from '../../src/index.js';
import { configDoc } from '../helpers/app.js';
import { describeEachStore, freshDatabase, type TestDatabase } from '../helpers/stores.js';
import { expectSecondCallWaitsForFirst } from '../helpers/twice.js';

/**
 * stop() asked for twice (a signal handler and a teardown, say): the second call must not
 * resolve before the workers are stopped and the store closed, or its caller goes on (drops the
 * database, exits) while the first stop is still closing the pools.
 */
describeEachStore('library: startWorkers stop() called twice', (kind) => {
  let db: TestDatabase;
  beforeEach(async () => {
    db = await freshDatabase(kind);
  });
  afterEach(() => db.cleanup());

  it('the second call resolves only once the first has finished, with the metrics server closed', async () => {
    const workers = await startWorkers(parseConfig(configDoc(db.url), {}), { logger: pino({ level: 'silent' }), metricsListen: { host: '127.0.0.1', port: 0 } });
    await expectSecondCallWaitsForFirst(() => workers.stop(), 'stop');
    await expect(fetch(`${workers.metricsUrl}/healthz`)).rejects.toThrow();
  });
});
