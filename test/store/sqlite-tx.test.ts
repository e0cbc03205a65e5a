import Database from 'better-sqlite3';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { TxGate } from '../../src/store/sqlite/tx-gate.js';
import { parseSqliteUrl } from '../../src/store/sqlite/url.js';
import { openStore } from '../../src/store/open.js';
import type { InboxStore } from '../../src/store/port.js';
import { record } from '../helpers/records.js';
import { freshDatabase, type TestDatabase } from '../helpers/stores.js';

const T = 1_800_000_000_000;
const TX_TIMEOUT_MS = 300;

/** The SQLite writer thread's transaction protocol (tx-gate.ts): what the shared contract cannot see. */
describe('SQLite handler transactions on the writer thread', () => {
  let db: TestDatabase;
  let store: InboxStore;
  beforeEach(async () => {
    db = await freshDatabase('sqlite');
    store = openStore(`${db.url}?txTimeoutMs=${TX_TIMEOUT_MS}`);
    await store.migrate();
    await store.transaction((tx) => tx.query('CREATE TABLE notes (id INTEGER PRIMARY KEY, note TEXT NOT NULL)'));
  });
  afterEach(async () => {
    await store?.close();
    await db?.cleanup();
  });
  const notes = () => store.transaction((tx) => tx.query('SELECT id FROM notes ORDER BY id'));

  it('a writer thread that dies fails what it held (storage_unavailable, nothing half-written) and the next call starts a new one on the same file', async () => {
    const kept = record('evt_before_crash', undefined, { receivedAtMs: T });
    await store.acceptBatch([kept]);
    const writer = (store as unknown as { writer: { worker: { terminate(): Promise<number> } } }).writer.worker;
    const dying = writer.terminate();
    const lost = store.acceptBatch([record('evt_during_crash', undefined, { receivedAtMs: T })]);
    await expect(lost).rejects.toMatchObject({ name: 'StorageUnavailableError', message: 'SQLite worker stopped' });
    await dying;
    const after = record('evt_after_crash', undefined, { receivedAtMs: T });
    expect(await store.acceptBatch([after])).toEqual([{ inboxId: after.inboxId, duplicate: false }]);
    expect((await store.getInbox(kept.inboxId))?.providerEventId).toBe('evt_before_crash');
    expect(await store.countRows()).toEqual({ inbox: 2, outbox: 2, payload: 2 });
  });

  it('reads txTimeoutMs from the URL, 10 s by default', () => {
    expect(parseSqliteUrl('sqlite:/tmp/x.db').txTimeoutMs).toBe(10_000);
    expect(parseSqliteUrl('sqlite:/tmp/x.db?txTimeoutMs=250&busyTimeoutMs=5')).toMatchObject({ txTimeoutMs: 250, busyTimeoutMs: 5 });
  });

  it('runs work that arrives during a transaction after it, in arrival order', async () => {
    const r = record('evt_fifo', undefined, { receivedAtMs: T });
    let accepted!: Promise<unknown>, claimed!: Promise<{ inboxId: string }[]>;
    await store.transaction(async (tx) => {
      await tx.query('INSERT INTO notes (id, note) VALUES (?, ?)', [1, 'x']); // BEGIN happens here
      accepted = store.acceptBatch([r]);
      claimed = store.claimInbox(10, 'w1', 1000, T);
      await tx.query('INSERT INTO notes (id, note) VALUES (?, ?)', [2, 'y']);
      // Neither has run yet: both wait for this transaction.
      expect(await Promise.race([accepted.then(() => 'ran'), new Promise((res) => setTimeout(() => res('waiting'), 50))])).toBe('waiting');
    });
    await accepted;
    expect((await claimed).map((c) => c.inboxId)).toEqual([r.inboxId]);
  });

  it('begins lazily: the batch protocol\'s reads and a lone finishBatch never hold the writer between messages', async () => {
    const r = record('evt_lazy', undefined, { receivedAtMs: T });
    const other = record('evt_lazy_other', undefined, { receivedAtMs: T });
    await store.acceptBatch([r]);
    await store.claimInbox(1, 'w1', 60_000, T);
    const key = { provider: r.provider, endpointId: r.endpointId, providerEventId: r.providerEventId };
    const settled = await store.transaction(async (tx) => {
      expect(await tx.lockLeased([r.inboxId], 'w1')).toEqual([r.inboxId]);
      expect(await tx.processed([key])).toEqual([]);
      // No BEGIN yet: an accept arriving now runs at once instead of waiting for this transaction.
      await store.acceptBatch([other]);
      const n = await tx.finishBatch('w1', {
        markers: [{ ...key, consumer: 'handler:x', inboxId: r.inboxId, handlerVersion: 'x@1', nowMs: T + 1 }],
        effects: [],
        settlements: [{ inboxId: r.inboxId, s: { status: 'PROCESSED', handlerVersion: 'x@1', nowMs: T + 1 } }],
      });
      // finishBatch was BEGIN … COMMIT on its own: nothing can join it afterwards.
      await expect(tx.query('SELECT 1')).rejects.toThrow(/already committed/);
      return n;
    });
    expect(settled).toBe(1);
    expect((await store.getEvent(r.inboxId))?.status).toBe('PROCESSED');
    expect((await store.transaction((tx) => tx.processed([key]))).some((m) => m.consumer === 'handler:x')).toBe(true);
  });

  it('rolls back a transaction left open too long, runs the work behind it, and fails its later ops clearly', async () => {
    const r = record('evt_behind_hung_tx', undefined, { receivedAtMs: T });
    let behind!: Promise<unknown>;
    const hung = store.transaction(async (tx) => {
      await tx.query('INSERT INTO notes (id, note) VALUES (?, ?)', [1, 'lost']);
      behind = store.acceptBatch([r]);
      await behind; // only possible because the thread gave up on this transaction
      await tx.query('INSERT INTO notes (id, note) VALUES (?, ?)', [2, 'too late']);
    });
    await expect(hung).rejects.toThrow(/rolled back: it stayed open longer than 300 ms/);
    expect((await store.getInbox(r.inboxId))?.status).toBe('PENDING');
    expect(await notes()).toEqual([]);
  });

  it('a COMMIT that fails (deferred foreign key) rolls back and leaves the thread usable', async () => {
    await store.transaction(async (tx) => {
      await tx.query('CREATE TABLE parent (id INTEGER PRIMARY KEY)');
      await tx.query('CREATE TABLE child (id INTEGER PRIMARY KEY, parent_id INTEGER REFERENCES parent (id) DEFERRABLE INITIALLY DEFERRED)');
    });
    await expect(store.transaction(async (tx) => {
      await tx.query('INSERT INTO notes (id, note) VALUES (?, ?)', [1, 'lost']);
      await tx.query('INSERT INTO child (id, parent_id) VALUES (?, ?)', [1, 42]);
    })).rejects.toThrow(/FOREIGN KEY/);
    expect(await notes()).toEqual([]);
    await store.transaction((tx) => tx.query('INSERT INTO notes (id, note) VALUES (?, ?)', [2, 'kept']));
    expect(await notes()).toEqual([{ id: 2 }]);
  });

  it('binds booleans, undefined and buffers, and returns blobs as Buffers', async () => {
    const rows = await store.transaction(async (tx) => {
      await tx.query('CREATE TABLE mixed (b INTEGER, u TEXT, blob BLOB)');
      await tx.query('INSERT INTO mixed VALUES (?, ?, ?)', [true, undefined, Buffer.from('raw')]);
      return tx.query<{ b: number; u: null; blob: Buffer }>('SELECT * FROM mixed');
    });
    expect(rows[0]!.b).toBe(1);
    expect(rows[0]!.u).toBeNull();
    expect(Buffer.isBuffer(rows[0]!.blob) && rows[0]!.blob.toString()).toBe('raw');
  });
});

describe('SQLite commit durability per op (workers.durableCommits)', () => {
  it('the gate switches back to FULL before any op outside the relaxed set (accepts above all)', () => {
    const sqlite = new Database(':memory:');
    const mode = () => sqlite.pragma('synchronous', { simple: true });
    const replies: unknown[] = [];
    const gate = new TxGate(sqlite, 1000, { accept: mode, claimInbox: mode }, {}, new Set(['claimInbox']), (_id, run) => replies.push(run()));
    let id = 0;
    for (const op of ['claimInbox', 'accept', 'claimInbox', 'claimInbox', 'accept']) gate.receive({ id: ++id, op });
    expect(replies).toEqual([1, 2, 1, 1, 2]);
    sqlite.close();
  });
});
