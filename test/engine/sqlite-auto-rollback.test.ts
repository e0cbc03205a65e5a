import pino from 'pino';
import Database from 'better-sqlite3';
import { afterEach, describe, expect, it } from 'vitest';
import { openStore } from '../../src/store/open.js';
import { freshDatabase } from '../helpers/stores.js';
import { startApp, type RunningApp } from '../../src/app.js';
import { parseConfig } from '../../src/config/schema.js';
import { HandlerRegistry } from '../../src/engine/handlers.js';
import { configDoc, startTestApp, type TestApp } from '../helpers/app.js';
import { waitFor } from '../helpers/engine.js';
import { post } from '../helpers/http.js';
import { stripeEvent, stripeHeaders } from '../helpers/events.js';

/**
 * SQLite rolls a whole transaction back on its own after some statement errors (SQLITE_FULL,
 * SQLITE_IOERR, SQLITE_NOMEM, a trigger's RAISE(ROLLBACK)). A settle transaction that goes on
 * after one must not run the rest of the batch in autocommit mode.
 */
describe('SQLite: a statement error that rolls back the whole settle transaction', () => {
  let first: TestApp | undefined;
  let second: RunningApp | undefined;
  afterEach(async () => { await second?.close(); await first?.stop(); });

  it('no event is PROCESSED without its mutation, and no mutation is applied twice', async () => {
    const over = { workers: { pollMs: 50, leaseMs: 1000, batchSize: 8 }, retry: { baseMs: 10, capMs: 40, maxAttempts: 3 } };
    first = await startTestApp('sqlite', over, {}, { workers: false });
    const file = first.db.url.slice('sqlite:'.length);
    const setup = new Database(file);
    setup.exec(`CREATE TABLE ledger (event_id TEXT NOT NULL);
      CREATE TABLE refused (event_id TEXT NOT NULL);
      CREATE TRIGGER refuse BEFORE INSERT ON refused BEGIN SELECT RAISE(ROLLBACK, 'refused by a trigger'); END;`);
    setup.close();
    for (const id of ['evt_a', 'evt_poison', 'evt_b']) {
      const body = stripeEvent(id, { type: 'payment_intent.succeeded' });
      expect((await post(`${first.url}/webhooks/stripe`, body, stripeHeaders(body))).status).toBe(200);
    }
    await first.close();

    const handlers = new HandlerRegistry().on('payment_intent.*', async (event, ctx) => {
      await ctx.tx.query('INSERT INTO ledger (event_id) VALUES (?)', [event.providerEventId]);
      if (event.providerEventId === 'evt_poison') await ctx.tx.query('INSERT INTO refused (event_id) VALUES (?)', [event.providerEventId]);
    }, { version: '1', name: 'ledger' });
    second = await startApp(parseConfig(configDoc(first.db.url, over), {}), { logger: pino({ level: 'silent' }), env: {}, shutdownGraceMs: 200, workers: true, handlers });

    const db = new Database(file, { readonly: true });
    try {
      // evt_poison can never succeed: it ends FAILED; the others must end PROCESSED, each applied once.
      await waitFor(() => (db.prepare("SELECT count(*) FROM webhook_inbox WHERE status IN ('PROCESSED', 'FAILED')").pluck().get() as number) === 3 || null, 15_000, 'all settled')
        .catch(() => undefined);
      const rows = db.prepare('SELECT i.provider_event_id id, i.status, (SELECT count(*) FROM ledger l WHERE l.event_id = i.provider_event_id) applied FROM webhook_inbox i ORDER BY id').all();
      expect(rows).toEqual([
        { id: 'evt_a', status: 'PROCESSED', applied: 1 },
        { id: 'evt_b', status: 'PROCESSED', applied: 1 },
        { id: 'evt_poison', status: 'FAILED', applied: 0 },
      ]);
    } finally {
      db.close();
    }
  }, 30_000);

  it('a disk that fills inside a handler transaction (SQLITE_FULL): what the transaction runs after it is refused, never committed on its own', async () => {
    const db = await freshDatabase('sqlite');
    const store = openStore(db.url);
    try {
      await store.migrate();
      await store.transaction((tx) => tx.query('CREATE TABLE notes (note BLOB NOT NULL)'));
      // The database may grow by a few pages only: as a disk with that much room left.
      await store.transaction(async (tx) => {
        const n = (await tx.query<{ n: number }>('SELECT page_count + 3 AS n FROM pragma_page_count()'))[0]!.n;
        await tx.query(`PRAGMA max_page_count = ${n}`);
      });
      const run = store.transaction(async (tx) => {
        await tx.query('INSERT INTO notes (note) VALUES (?)', [Buffer.alloc(10)]);
        await tx.query('SAVEPOINT h');
        await expect(tx.query('INSERT INTO notes (note) VALUES (?)', [Buffer.alloc(100_000)])).rejects.toThrow(/full/);
        // A handler's error path, then the next handler and the settle, as the engine runs them.
        await tx.query('ROLLBACK TO SAVEPOINT h').catch(() => undefined);
        await tx.query('SAVEPOINT h2').catch(() => undefined);
        await tx.query('INSERT INTO notes (note) VALUES (?)', [Buffer.from('after')]).catch(() => undefined);
        await tx.query('RELEASE SAVEPOINT h2').catch(() => undefined);
      });
      await expect(run).rejects.toThrow();
      const notes = await store.transaction((tx) => tx.query<{ n: number }>('SELECT count(*) AS n FROM notes'));
      expect(notes[0]!.n).toBe(0);
    } finally {
      await store.close();
      await db.cleanup();
    }
  });
});
