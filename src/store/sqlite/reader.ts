import { parentPort, workerData } from 'node:worker_threads';
import Database from 'better-sqlite3';
import { exitOnUnreadableRequest, replyTo } from '../../threads.js';
import type { Msg } from './tx-gate.js';
import { statsOps, type Ops } from './work-ops.js';

/**
 * The SQLite reader thread: a read-only connection for the statistics /metrics reads (statsOps),
 * so they run beside the writer thread (WAL lets a reader read while a writer writes) and never
 * on the HTTP event loop (better-sqlite3 is synchronous). Started by SqliteStore on the first
 * scrape, once the writer has opened (and created) the file.
 */
export interface ReaderInit {
  readonly file: string;
  /** A reader waits for a lock only in WAL's rare moments (another connection's recovery); this thread has nothing else to answer meanwhile. */
  readonly busyTimeoutMs: number;
}

const { file, busyTimeoutMs } = workerData as ReaderInit;
const db = openReadOnly();

function openReadOnly(): Database.Database {
  try {
    const d = new Database(file, { readonly: true, fileMustExist: true });
    d.pragma(`busy_timeout = ${busyTimeoutMs}`);
    return d;
  } catch (err) {
    // A plain Error: a SqliteError reaches the main thread as `{ code }` alone (as in worker.ts).
    throw new Error(`cannot open SQLite database ${file} for reading: ${(err as Error).message}`);
  }
}

const ops: Ops = { ...statsOps(db), close: () => db.close() };
exitOnUnreadableRequest();
parentPort!.on('message', (msg: Msg) => replyTo(msg.id, () => {
  const op = ops[msg.op];
  if (!op) throw new Error(`unknown reader op "${msg.op}"`);
  return op(msg.arg);
}));
