import { parentPort, workerData } from 'node:worker_threads';
import pg from 'pg';
import type { AcceptRecord } from '../port.js';
import { bytes, exitOnUnreadableRequest, movableCiphertexts, revivedPayload } from '../../threads.js';
import { insertUnique, warmPool, type Query } from './accept.js';

/**
 * The PostgreSQL accept thread: it owns its own accept connections and runs the statement of each
 * batch it is given (postgres/accept.ts): the large ones (store.ts THREAD_MIN_ROWS). The event loop is the ingress's bottleneck at high rates (in a 4,300
 * req/s step it was runnable ~100 % of the time: 73 % running, 28 % waiting for a core), and
 * building a batch's Bind message (~700 KB for 70 events: the driver copies every ciphertext
 * into it) and writing it to the socket was ~15 % of its time. Here that work runs beside it.
 */
export interface AcceptWorkerInit {
  readonly pool: pg.PoolConfig;
}

export type AcceptRequest =
  | { readonly id: number; readonly op: 'accept'; readonly records: AcceptRecord[] }
  | { readonly id: number; readonly op: 'warm'; readonly sizes: number[] }
  | { readonly id: number; readonly op: 'close' };

const pool = new pg.Pool((workerData as AcceptWorkerInit).pool);
// An idle client losing its connection must not end the thread; the next query reconnects.
pool.on('error', () => undefined);
const query: Query = (config) => pool.query(config);

/** Buffers arrive as plain Uint8Arrays; the driver sends Buffers as binary bytea. */
function revive(r: AcceptRecord): AcceptRecord {
  return { ...r, payloadHash: bytes(r.payloadHash), payload: revivedPayload(r.payload) };
}

exitOnUnreadableRequest();
parentPort!.on('message', (m: AcceptRequest) => {
  if (m.op === 'close') {
    void pool.end().catch(() => undefined).then(() => parentPort!.postMessage({ id: m.id, ok: true }));
    return;
  }
  if (m.op === 'warm') {
    warmPool(pool, m.sizes).then(
      () => parentPort!.postMessage({ id: m.id, ok: true }),
      (err: unknown) => parentPort!.postMessage({ id: m.id, ok: false, message: (err as Error).message }),
    );
    return;
  }
  const records = m.records.map(revive);
  insertUnique(query, records).then(
    // The ciphertexts go back with the answer, to die where collections are frequent: this
    // thread allocates little, so V8 collected it rarely and its dead buffers piled up (the 1 MiB
    // flood's peak RSS was 313-353 MiB with them kept here, 262-284 sent back).
    ({ results, inserted }) => parentPort!.postMessage({ id: m.id, ok: true, results, inserted }, movableCiphertexts(records)),
    (err: unknown) => parentPort!.postMessage({ id: m.id, ok: false, message: (err as Error).message }),
  );
});
