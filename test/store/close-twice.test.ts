import { afterEach, beforeEach, it } from 'vitest';
import { openStore } from '../../src/index.js';
import { describeEachStore, freshDatabase, type TestDatabase } from '../helpers/stores.js';
import { expectSecondCallWaitsForFirst } from '../helpers/twice.js';

/**
 * InboxStore.close() asked for twice at once (openStore is exported): the second call returned at
 * once (PostgreSQL: the store was already marked closed; SQLite: its writer thread was not yet
 * ended), so its caller went on while the pools or the thread were still open.
 */
describeEachStore('store close() called twice', (kind) => {
  let db: TestDatabase;
  beforeEach(async () => {
    db = await freshDatabase(kind);
  });
  afterEach(() => db.cleanup());

  it('the second call resolves only once the first has finished', async () => {
    const store = openStore(db.url);
    await store.migrate();
    await store.warm?.(8);
    await expectSecondCallWaitsForFirst(() => store.close(), 'close');
  });
});
