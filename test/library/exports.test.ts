import { createServer } from 'node:net';
import type { AddressInfo } from 'node:net';
import pino from 'pino';
import { afterEach, beforeEach, expect, it } from 'vitest';
import * as lib from '../../src/index.js';
import { configDoc } from '../helpers/app.js';
import { describeEachStore, freshDatabase, type TestDatabase } from '../helpers/stores.js';

/**
 * The package exports only its index: what a library caller meets must be reachable from it —
 * startWorkers (workers without ingress, as `work` runs them) and the typed errors a start
 * throws (ListenError, SchemaOutdatedError), so a caller can tell them apart with instanceof.
 */
describeEachStore('library exports: startWorkers and the typed errors of a start', (kind) => {
  let db: TestDatabase;
  const logger = pino({ level: 'silent' });
  beforeEach(async () => {
    db = await freshDatabase(kind);
  });
  afterEach(() => db.cleanup());

  it('startApp on a port in use rejects with the exported ListenError; startWorkers is exported and runs', async () => {
    const taken = createServer();
    await new Promise<void>((r) => taken.listen(0, '127.0.0.1', r));
    try {
      const port = (taken.address() as AddressInfo).port;
      const config = lib.parseConfig(configDoc(db.url, { listen: { host: '127.0.0.1', port } }), {});
      const err = await lib.startApp(config, { logger, env: {}, workers: false }).then(() => null, (e: unknown) => e);
      expect(lib.ListenError).toBeTypeOf('function');
      expect(err).toBeInstanceOf(lib.ListenError);
      expect(lib.startWorkers).toBeTypeOf('function');
      const workers = await lib.startWorkers(config, { logger, env: {} });
      await workers.stop();
    } finally {
      taken.close();
    }
  });

  it('a store never migrated answers ping with the exported SchemaOutdatedError', async () => {
    const store = lib.openStore(db.url);
    try {
      const err = await store.ping().then(() => null, (e: unknown) => e);
      expect(lib.SchemaOutdatedError).toBeTypeOf('function');
      expect(err).toBeInstanceOf(lib.SchemaOutdatedError);
    } finally {
      await store.close();
    }
  });
});
