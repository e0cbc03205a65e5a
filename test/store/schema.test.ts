import { existsSync, readFileSync } from 'node:fs';
import Database from 'better-sqlite3';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { uuidv7 } from '../../src/crypto/ids.js';
import type { PayloadBinding } from '../../src/crypto/payload-cipher.js';
import { MIGRATIONS } from '../../src/store/migrations.js';
import { openStore } from '../../src/store/open.js';
import type { InboxRow, InboxStore } from '../../src/store/port.js';
import { startTestApp, type TestApp } from '../helpers/app.js';
import { stripeEvent, stripeHeaders } from '../helpers/events.js';
import { post } from '../helpers/http.js';
import { record } from '../helpers/records.js';
import { describeEachStore, freshDatabase, type TestDatabase } from '../helpers/stores.js';

/**
 * The schema and storage guarantees the specification (issue 2, "Durable accept") names, checked
 * in the databases themselves rather than through the store's own code: column names, the unique
 * key enforced by the database, SQLite's WAL + synchronous=FULL on the accept connection, and
 * payload ciphertexts that cannot be moved between real rows.
 */

/** The columns the specification lists, copied from it (not from migrations.ts). */
const SPEC_INBOX_COLUMNS = [
  'inbox_id', 'provider', 'endpoint_id', 'provider_event_id', 'event_type', 'object_id', 'object_version',
  'provider_created_at', 'received_at', 'raw_payload_ref', 'payload_hash', 'matched_secret_version', 'status',
  'attempt_count', 'next_attempt_at', 'lease_until', 'last_error',
];
const SPEC_OUTBOX_COLUMNS = ['outbox_id', 'inbox_id', 'topic', 'created_at', 'published_at'];
const SPEC_UNIQUE_KEY = ['provider', 'endpoint_id', 'provider_event_id'];

/** A connection of our own to a store's database, outside the store (same file / same PostgreSQL database). */
interface RawDb {
  all<R = Record<string, unknown>>(sql: string, params?: unknown[]): Promise<R[]>;
  close(): Promise<void>;
}

const sqliteFile = (url: string) => url.slice('sqlite:'.length);

async function rawDb(db: TestDatabase): Promise<RawDb> {
  if (db.kind === 'sqlite') {
    const conn = new Database(sqliteFile(db.url));
    return {
      all: async <R>(sql: string, params: unknown[] = []) => {
        const s = conn.prepare(sql);
        return (s.reader ? s.all(params) : (s.run(params), [])) as R[];
      },
      close: async () => void conn.close(),
    };
  }
  const client = new pg.Client({ connectionString: db.url });
  await client.connect();
  return {
    all: async <R>(sql: string, params: unknown[] = []) => (await client.query(sql, params)).rows as R[],
    close: () => client.end(),
  };
}

/** A minimal inbox row inserted with plain SQL, bypassing the store's ON CONFLICT DO NOTHING. */
function directInsert(kind: 'sqlite' | 'postgres', eventId: string): [string, unknown[]] {
  return kind === 'sqlite'
    ? [`INSERT INTO webhook_inbox (inbox_id, provider, endpoint_id, provider_event_id, event_type, received_at, payload_hash)
        VALUES (?, 'stripe', 'ep', ?, 'test.direct', 1800000000000, x'00')`, [uuidv7(), eventId]]
    : [`INSERT INTO webhook_inbox (inbox_id, provider, endpoint_id, provider_event_id, event_type, received_at, payload_hash)
        VALUES ($1, 'stripe', 'ep', $2, 'test.direct', now(), '\\x00'::bytea)`, [uuidv7(), eventId]];
}

describeEachStore('schema as the specification names it', (kind) => {
  let db: TestDatabase;
  let store: InboxStore;
  let raw: RawDb;
  beforeAll(async () => {
    db = await freshDatabase(kind);
    store = openStore(db.url);
    expect(await store.migrate()).toEqual(MIGRATIONS.map((m) => m.version));
    raw = await rawDb(db);
  });
  afterAll(async () => {
    await raw?.close();
    await store?.close();
    await db?.cleanup();
  });

  const columnsOf = async (table: string): Promise<string[]> => kind === 'sqlite'
    ? (await raw.all<{ name: string }>(`SELECT name FROM pragma_table_info(?)`, [table])).map((r) => r.name)
    : (await raw.all<{ column_name: string }>(
      `SELECT column_name FROM information_schema.columns WHERE table_schema = current_schema() AND table_name = $1`, [table])).map((r) => r.column_name);

  it('webhook_inbox has every column the specification lists', async () => {
    const cols = await columnsOf('webhook_inbox');
    expect(cols.length).toBeGreaterThan(0);
    expect(SPEC_INBOX_COLUMNS.filter((c) => !cols.includes(c)), 'spec columns missing from webhook_inbox').toEqual([]);
  });

  it('webhook_outbox has every column the specification lists', async () => {
    const cols = await columnsOf('webhook_outbox');
    expect(cols.length).toBeGreaterThan(0);
    expect(SPEC_OUTBOX_COLUMNS.filter((c) => !cols.includes(c)), 'spec columns missing from webhook_outbox').toEqual([]);
  });

  it('the payload lives in its own table, which raw_payload_ref references', async () => {
    if (kind === 'sqlite') {
      const fks = await raw.all<{ table: string; from: string; to: string }>(`SELECT "table", "from", "to" FROM pragma_foreign_key_list('webhook_inbox')`);
      expect(fks).toContainEqual({ table: 'webhook_payload', from: 'raw_payload_ref', to: 'payload_id' });
    } else {
      const fks = await raw.all<{ target: string; cols: string[]; refcols: string[] }>(`
        SELECT c.confrelid::regclass::text AS target,
               array(SELECT attname::text FROM unnest(c.conkey) k JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = k) AS cols,
               array(SELECT attname::text FROM unnest(c.confkey) k JOIN pg_attribute a ON a.attrelid = c.confrelid AND a.attnum = k) AS refcols
        FROM pg_constraint c WHERE c.conrelid = 'webhook_inbox'::regclass AND c.contype = 'f'`);
      expect(fks).toContainEqual({ target: 'webhook_payload', cols: ['raw_payload_ref'], refcols: ['payload_id'] });
    }
  });

  it('a UNIQUE constraint covers exactly (provider, endpoint_id, provider_event_id)', async () => {
    let keys: string[][];
    if (kind === 'sqlite') {
      // Whole-table unique indexes only: a partial one would not make the key unique.
      const indexes = await raw.all<{ name: string; unique: number; partial: number }>(`SELECT name, "unique", partial FROM pragma_index_list('webhook_inbox')`);
      keys = [];
      for (const ix of indexes.filter((i) => i.unique === 1 && i.partial === 0)) {
        keys.push((await raw.all<{ name: string | null }>(`SELECT name FROM pragma_index_info(?) ORDER BY seqno`, [ix.name])).map((r) => r.name ?? '<expression>'));
      }
    } else {
      // A declared constraint (what ON CONFLICT (provider, endpoint_id, provider_event_id) infers), not deferrable.
      keys = (await raw.all<{ cols: string[] }>(`
        SELECT array(SELECT a.attname::text FROM unnest(c.conkey) WITH ORDINALITY k(attnum, ord)
                     JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = k.attnum ORDER BY k.ord) AS cols
        FROM pg_constraint c
        WHERE c.conrelid = 'webhook_inbox'::regclass AND c.contype = 'u' AND NOT c.condeferrable`)).map((r) => r.cols);
      // …and the index behind it, as pg_indexes shows it.
      const defs = (await raw.all<{ indexdef: string }>(`SELECT indexdef FROM pg_indexes WHERE schemaname = current_schema() AND tablename = 'webhook_inbox'`)).map((r) => r.indexdef);
      expect(defs).toContainEqual(expect.stringMatching(/^CREATE UNIQUE INDEX \S+ ON \S*webhook_inbox USING btree \(provider, endpoint_id, provider_event_id\)$/));
    }
    const sorted = (cols: string[]) => [...cols].sort().join(',');
    expect(keys.map(sorted)).toContain(sorted(SPEC_UNIQUE_KEY));
  });

  it('the database itself rejects a second plain INSERT with the same key (no ON CONFLICT, no store code)', async () => {
    const [first, firstParams] = directInsert(kind, 'evt_direct_dup');
    await raw.all(first, firstParams);
    const [second, secondParams] = directInsert(kind, 'evt_direct_dup');
    const err = await raw.all(second, secondParams).then(() => null, (e: { code?: string; message?: string }) => e);
    expect(err, 'second INSERT with the same (provider, endpoint_id, provider_event_id) was accepted').not.toBeNull();
    if (kind === 'sqlite') {
      expect(err!.code).toBe('SQLITE_CONSTRAINT_UNIQUE');
      expect(err!.message).toMatch(/webhook_inbox\.provider, webhook_inbox\.endpoint_id, webhook_inbox\.provider_event_id/);
    } else {
      expect(err!.code).toBe('23505'); // unique_violation
    }
    // Control: the same statement with another event id goes in, so the failure above was the key.
    const [other, otherParams] = directInsert(kind, 'evt_direct_other');
    await raw.all(other, otherParams);
    const n = await raw.all<{ n: number | string }>(
      `SELECT count(*) AS n FROM webhook_inbox WHERE provider_event_id IN ('evt_direct_dup', 'evt_direct_other')`);
    expect(Number(n[0]!.n)).toBe(2);
  });
});

describe('SQLite accept connection: WAL and synchronous=FULL, on a database file', () => {
  it('the file is in WAL mode: a -wal log appears with the first accept and journal_mode reads back wal from another connection', async () => {
    const db = await freshDatabase('sqlite');
    const file = sqliteFile(db.url);
    const store = openStore(db.url);
    try {
      await store.migrate();
      await store.acceptBatch([record('evt_wal')]);
      // Looked at before any connection of ours touches the file: the store's writer made this log.
      expect(existsSync(`${file}-wal`), `${file}-wal after an accept`).toBe(true);
      const magic = readFileSync(`${file}-wal`).readUInt32BE(0);
      expect([0x377f0682, 0x377f0683]).toContain(magic); // a WAL header, not some other file
      const outside = new Database(file, { readonly: true });
      try {
        expect(outside.pragma('journal_mode', { simple: true })).toBe('wal'); // persistent in the file
      } finally {
        outside.close();
      }
    } finally {
      await store.close();
      await db.cleanup();
    }
  });

  /**
   * `synchronous` is per connection, so it is read ON the writer's connection, at the moment it
   * inserts an accepted row: a trigger (created from outside) records `pragma_synchronous` for each
   * inbox INSERT. 2 = FULL, 1 = NORMAL. With durableEngineCommits false the engine's ops switch
   * the same connection to NORMAL; an accept after them must still run with FULL.
   */
  it.each([true, false])('every accept inserts with synchronous = FULL on the writer connection (durableEngineCommits %s)', async (durableEngineCommits) => {
    const db = await freshDatabase('sqlite');
    const file = sqliteFile(db.url);
    const store = openStore(db.url, { durableEngineCommits });
    const outside = new Database(file);
    try {
      await store.migrate();
      outside.exec(`
        CREATE TABLE sync_probe (seq INTEGER PRIMARY KEY, event_id TEXT, level INTEGER);
        CREATE TRIGGER sync_probe_inbox AFTER INSERT ON webhook_inbox BEGIN
          INSERT INTO sync_probe (event_id, level) SELECT NEW.provider_event_id, synchronous FROM pragma_synchronous;
        END;`);
      const probe = () => outside.prepare('SELECT event_id, level FROM sync_probe ORDER BY seq').all() as { event_id: string; level: number }[];

      await store.acceptBatch([record('evt_sync_first')]); // the connection's first write
      await store.claimInbox(10, 'probe-worker', 30_000, Date.now()); // an engine op (NORMAL when relaxed)
      await store.acceptBatch([record('evt_sync_after_claim'), record('evt_sync_batch_2')]);
      // A handler's transaction on the same connection: relaxed → NORMAL. It shows the probe sees the mode change.
      await store.transaction((tx) => tx.query(
        `INSERT INTO webhook_inbox (inbox_id, provider, endpoint_id, provider_event_id, event_type, received_at, payload_hash)
         VALUES (?, 'stripe', 'ep', 'evt_sync_engine_tx', 'test.direct', 1800000000000, x'00')`, [uuidv7()]));
      await store.acceptBatch([record('evt_sync_after_tx')]);

      expect(probe()).toEqual([
        { event_id: 'evt_sync_first', level: 2 },
        { event_id: 'evt_sync_after_claim', level: 2 },
        { event_id: 'evt_sync_batch_2', level: 2 },
        { event_id: 'evt_sync_engine_tx', level: durableEngineCommits ? 2 : 1 },
        { event_id: 'evt_sync_after_tx', level: 2 },
      ]);
    } finally {
      outside.close();
      await store.close();
      await db.cleanup();
    }
  });
});

describeEachStore('payload ciphertexts cannot move between real rows', (kind) => {
  let app: TestApp;
  let raw: RawDb;
  const rows: InboxRow[] = [];
  const bodies = new Map<string, Buffer>();
  const bindingOf = (r: InboxRow): PayloadBinding => ({ provider: r.provider, endpointId: r.endpointId, providerEventId: r.providerEventId });
  const cipher = () => app.keyring.cipher!;
  /** The sealed payload an inbox row points at, read by the store. */
  const payloadOf = async (r: InboxRow) => (await app.store.getPayload(r.rawPayloadRef!))!;

  beforeAll(async () => {
    app = await startTestApp(kind);
    // Two real accepts over HTTP, same shape and size, so nothing but the binding tells them apart.
    for (const id of ['evt_swap_a', 'evt_swap_b']) {
      const body = stripeEvent(id, { size: 400 });
      bodies.set(id, body);
      const res = await post(`${app.url}/webhooks/stripe`, body, stripeHeaders(body));
      expect(res.status, `accept ${id}`).toBe(200);
    }
    for (const inboxId of await app.store.listInboxIds()) rows.push((await app.store.getInbox(inboxId))!);
    rows.sort((x, y) => x.providerEventId.localeCompare(y.providerEventId));
    expect(rows.map((r) => r.providerEventId)).toEqual(['evt_swap_a', 'evt_swap_b']);
    raw = await rawDb(app.db);
  });
  afterAll(async () => {
    await raw?.close();
    await app?.stop();
  });

  it('each stored payload opens with its own row identity to the exact bytes received', async () => {
    for (const r of rows) {
      const sealed = await payloadOf(r);
      expect(cipher().open(sealed, bindingOf(r)).equals(bodies.get(r.providerEventId)!)).toBe(true);
    }
  });

  it("row A's sealed payload does not open with row B's identity, nor B's with A's", async () => {
    const [a, b] = rows as [InboxRow, InboxRow];
    expect(a.endpointId).toBe(b.endpointId);
    expect(a.provider).toBe(b.provider);
    const sealedA = await payloadOf(a), sealedB = await payloadOf(b);
    expect(sealedA.keyId).toBe(sealedB.keyId); // same key: only the associated data can tell them apart
    expect(() => cipher().open(sealedA, bindingOf(b))).toThrow(/authenticate/);
    expect(() => cipher().open(sealedB, bindingOf(a))).toThrow(/authenticate/);
  });

  it('ciphertext and nonce swapped between the two payload rows with SQL: each row then fails authentication instead of yielding the other event', async () => {
    const [a, b] = rows as [InboxRow, InboxRow];
    const before = { a: await payloadOf(a), b: await payloadOf(b) };
    const p = kind === 'sqlite' ? ['?', '?', '?'] : ['$1', '$2', '$3'];
    const update = `UPDATE webhook_payload SET nonce = ${p[0]}, ciphertext = ${p[1]} WHERE payload_id = ${p[2]}`;
    await raw.all(update, [before.b.nonce, before.b.ciphertext, a.rawPayloadRef]);
    await raw.all(update, [before.a.nonce, before.a.ciphertext, b.rawPayloadRef]);

    const after = { a: await payloadOf(a), b: await payloadOf(b) };
    // The swap happened: row A's payload row now holds B's sealed bytes and vice versa.
    expect(after.a.ciphertext.equals(before.b.ciphertext) && after.a.nonce.equals(before.b.nonce)).toBe(true);
    expect(after.b.ciphertext.equals(before.a.ciphertext) && after.b.nonce.equals(before.a.nonce)).toBe(true);
    // Opened as the rows that reference them, as a worker opens a claimed row's payload: refused.
    expect(() => cipher().open(after.a, bindingOf(a))).toThrow(/authenticate/);
    expect(() => cipher().open(after.b, bindingOf(b))).toThrow(/authenticate/);
  });
});
