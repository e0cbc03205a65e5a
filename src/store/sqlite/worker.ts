import { accessSync, constants as fsConstants, statSync } from 'node:fs';
import { dirname } from 'node:path';
import { parentPort, workerData } from 'node:worker_threads';
import Database from 'better-sqlite3';
import { migrationStep, MIGRATIONS } from '../migrations.js';
import type { AcceptRecord, AcceptResult, TransmissionBinding } from '../port.js';
import { bytes, exitOnUnreadableRequest, replyTo } from '../../threads.js';
import * as SQL from './schema-sql.js';
import { TxGate, type Msg } from './tx-gate.js';
import { workOps, type Ops } from './work-ops.js';

/**
 * The SQLite writer thread. better-sqlite3 is synchronous, so its work (including the
 * fsync of each group commit) runs here, never on the HTTP event loop.
 */
export interface WorkerInit {
  readonly file: string;
  readonly busyTimeoutMs: number;
  /** A handler transaction open longer than this is rolled back (its main side hung or died). */
  readonly txTimeoutMs: number;
  /** false: engine ops commit with synchronous = NORMAL (no fsync); accepts always FULL. */
  readonly durableEngineCommits: boolean;
}

const { file, busyTimeoutMs, txTimeoutMs, durableEngineCommits } = workerData as WorkerInit;
const db = openDatabase();

function openDatabase(): Database.Database {
  try {
    const d = new Database(file);
    d.pragma('journal_mode = WAL');
    // FULL: every commit is fsynced to the WAL before we answer 2xx (NORMAL could lose the tail on power loss).
    d.pragma('synchronous = FULL');
    d.pragma('foreign_keys = ON');
    // Another process's write lock is waited for by the gate (tx-gate.ts), between messages, not
    // by SQLite inside an op, where this thread could answer nothing (a /readyz ping) meanwhile.
    d.pragma('busy_timeout = 0');
    return d;
  } catch (err) {
    // A plain Error: a SqliteError reaches the main thread as `{ code }` alone, and the operator
    // saw "SQLite worker stopped" with no word of the file or why (not a database, a directory).
    throw new Error(`cannot open SQLite database ${file}: ${(err as Error).message}${unwritableFolder()}`);
  }
}

/**
 * SQLite creates the database and its -wal and -shm files beside it, so a folder this user cannot
 * write to fails the open with "unable to open database file" (or "readonly database"), which
 * names neither cause nor cure: said here.
 */
function unwritableFolder(): string {
  if (file === ':memory:') return '';
  const folder = dirname(file);
  try {
    accessSync(folder, fsConstants.W_OK);
    return '';
  } catch {
    return ` (the folder ${folder} is not writable by this user: SQLite creates the database and its -wal and -shm files there)`;
  }
}

/**
 * SQLite goes on committing to a database or WAL file deleted (or replaced) under its open
 * connection, and none of it is there at the next start: an accept answered 2xx would be lost.
 * So each is checked, by identity, after every accept commit and at every ping.
 */
const fileId = (path: string): string | undefined => {
  try {
    const s = statSync(path);
    return `${s.dev}:${s.ino}`;
  } catch {
    return undefined;
  }
};
const opened = file === ':memory:' ? undefined : { db: fileId(file), wal: fileId(`${file}-wal`) };
function assertFilesInPlace(): void {
  if (!opened) return;
  opened.wal ??= fileId(`${file}-wal`); // the WAL, once it exists, stays while this connection is open
  if (fileId(file) !== opened.db || (opened.wal !== undefined && fileId(`${file}-wal`) !== opened.wal)) {
    throw Object.assign(new Error(`the database file ${file} (or its -wal) was deleted or replaced while open; restart to reopen it`), { code: 'SQLITE_FILE_MOVED' });
  }
}

/** A commit's result, once the files it went to are still this database's: one deleted before or during it lost the commit. */
function committedInPlace<T>(result: T): T {
  assertFilesInPlace();
  return result;
}

/** Runs `fn`; a failure names `step` in its message (its code kept, e.g. SQLITE_BUSY). */
function during<T>(step: string, fn: () => T): T {
  try {
    return fn();
  } catch (err) {
    const e = err as Error & { code?: string };
    throw Object.assign(new Error(`${step} failed: ${e.message}`), { code: e.code });
  }
}

/**
 * Several transactions in one op: tried again whole by the gate, it would not report the versions
 * its first try applied. So it waits for another process's lock inside SQLite, as it always did
 * (at start, before anything else asks this thread).
 */
function migrate(): number[] {
  db.pragma(`busy_timeout = ${busyTimeoutMs}`);
  try {
    return migrateAll();
  } finally {
    db.pragma('busy_timeout = 0');
  }
}

function migrateAll(): number[] {
  during('the schema_migrations table', () => db.exec(`CREATE TABLE IF NOT EXISTS schema_migrations (
    version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at INTEGER NOT NULL)`));
  const applied = new Set((db.prepare('SELECT version FROM schema_migrations').all() as { version: number }[]).map((r) => r.version));
  const now: number[] = [];
  const isApplied = db.prepare('SELECT 1 FROM schema_migrations WHERE version = ?').pluck();
  for (const m of MIGRATIONS) {
    if (applied.has(m.version)) continue;
    // Another process on this file (a `serve` next to a `work`) may have applied it since the read above: look again under the write lock.
    const ran = during(migrationStep(m), () => db.transaction(() => {
      if (isApplied.get(m.version) !== undefined) return false;
      db.exec(m.sqlite);
      db.prepare('INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)').run(m.version, m.name, Date.now());
      return true;
    }).immediate());
    if (ran) now.push(m.version);
  }
  return now;
}

let statements: ReturnType<typeof prepare> | undefined;
function prepare() {
  return {
    inbox: db.prepare(SQL.INSERT_INBOX),
    payload: db.prepare(SQL.INSERT_PAYLOAD),
    outbox: db.prepare(SQL.INSERT_OUTBOX),
    winner: db.prepare(SQL.SELECT_WINNER).pluck(),
    readTransmission: db.prepare(SQL.READ_TRANSMISSION).pluck(),
    insertTransmission: db.prepare(SQL.INSERT_TRANSMISSION),
    pruneTransmissions: db.prepare(SQL.PRUNE_TRANSMISSIONS),
    purgePayloads: db.prepare(SQL.PURGE_PAYLOADS).pluck(),
    pendingNotice: db.prepare(SQL.PENDING_NOTICE).pluck(),
    markNotice: db.prepare(SQL.MARK_NOTICE),
    selectInbox: db.prepare(SQL.SELECT_INBOX),
    count: db.prepare(SQL.COUNT_ROWS),
    ids: db.prepare('SELECT inbox_id FROM webhook_inbox ORDER BY inbox_id').pluck(),
  };
}
const st = () => (statements ??= prepare());

// One transaction per batch: BEGIN IMMEDIATE takes the write lock up front, so a second
// writer process waits (busyTimeoutMs, tx-gate.ts) instead of failing mid-transaction.
const acceptTx = db.transaction((records: AcceptRecord[]): AcceptResult[] => {
  const s = st();
  return records.map((r) => {
    // The one writer makes look-then-insert exact here: no other accept runs in between.
    if (r.coalesceKey !== undefined) {
      const pending = s.pendingNotice.get(r.provider, r.endpointId, r.coalesceKey) as string | undefined;
      if (pending !== undefined) return { inboxId: pending, duplicate: true };
    }
    const won = s.inbox.get({ ...r, payloadHash: bytes(r.payloadHash) });
    if (won !== undefined) {
      if (r.coalesceKey !== undefined) s.markNotice.run(r.coalesceKey, r.inboxId);
      s.payload.run(r.payloadId, r.payload.keyId, bytes(r.payload.nonce), bytes(r.payload.ciphertext), r.receivedAtMs, r.payload.encoding ?? null, r.payload.rawBytes ?? null);
      s.outbox.run(r.outboxId, r.inboxId, r.topic, r.receivedAtMs, r.relay ? r.receivedAtMs : null, r.relay ? null : r.receivedAtMs);
      return { inboxId: r.inboxId, duplicate: false };
    }
    const winner = s.winner.get(r.provider, r.endpointId, r.providerEventId) as string | undefined;
    if (winner === undefined) throw new Error('unique conflict without a visible winner');
    return { inboxId: winner, duplicate: true };
  });
});

// Its own transaction, committed with FULL as accepts are: a 2xx may follow it (an ignored type) with no other commit.
const bindTx = db.transaction((ts: TransmissionBinding[]): boolean[] => {
  const s = st();
  return ts.map((t) => {
    const hash = bytes(t.payloadHash);
    const held = s.readTransmission.get(t.provider, t.transmissionId) as Buffer | undefined;
    if (held !== undefined) return held.equals(hash);
    s.insertTransmission.run(t.provider, t.endpointId, t.transmissionId, hash, t.receivedAtMs);
    return true;
  });
});

const ops: Ops = {
  migrate,
  bindTransmissions: (ts: TransmissionBinding[]) => committedInPlace(bindTx.immediate(ts)),
  // One statement, its own transaction: a bounded batch, so accepts wait behind it only briefly.
  pruneTransmissions: ({ provider, receivedBeforeMs, limit }: { provider: string; receivedBeforeMs: number; limit: number }) =>
    st().pruneTransmissions.run(provider, receivedBeforeMs, limit).changes,
  purgePayloads: ({ status, after, below, receivedBeforeMs, limit }: { status: string; after: string; below: string; receivedBeforeMs: number; limit: number }) => {
    const ids = st().purgePayloads.all(after, below, status, receivedBeforeMs, limit) as string[];
    // RETURNING's order is not the subquery's: the cursor is the highest id deleted.
    return { deleted: ids.length, last: ids.reduce<string | undefined>((m, id) => (m === undefined || id > m ? id : m), undefined) };
  },
  accept: (records: AcceptRecord[]) => committedInPlace(acceptTx.immediate(records)),
  // The schema's version (null: never migrated), which also proves the file readable and in place.
  ping: () => (assertFilesInPlace(), db.prepare("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema_migrations'").get()
    ? (db.prepare('SELECT max(version) AS v FROM schema_migrations').get() as { v: number | null }).v
    : null),
  // Changes when ANOTHER connection (another process) commits to this database file.
  dataVersion: () => db.pragma('data_version', { simple: true }),
  getInbox: (id: string) => st().selectInbox.get(id) ?? null,
  count: () => st().count.get(),
  listIds: () => st().ids.all(),
  close: () => db.close(),
};

const work = workOps(db);
// In WAL mode a FULL commit fsyncs the whole log, so the engine's NORMAL commits before it become
// durable with it: an accept is never reordered behind an undurable write.
const ENGINE_OPS = ['claimInbox', 'claimEffects', 'claimOutbox', 'extendInboxLeases', 'extendOutboxLeases', 'settleEffect', 'settleOutboxBatch', 'finishBatchTx', 'txBegin'];
const engineSync = durableEngineCommits ? null : new Set(ENGINE_OPS);
const gate = new TxGate(db, txTimeoutMs, { ...ops, ...work.free }, work.inTx, engineSync, replyTo, busyTimeoutMs);
exitOnUnreadableRequest();
parentPort!.on('message', (msg: Msg) => gate.receive(msg));
