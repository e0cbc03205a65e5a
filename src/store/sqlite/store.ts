import { mkdirSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { Worker } from 'node:worker_threads';
import { StorageUnavailableError } from '../../errors.js';
import { acceptUnique } from '../dedupe.js';
import type { AcceptRecord, AcceptResult, InboxRow, InboxStore, StoredPayload } from '../port.js';
import { toInboxRow, toStoredPayload, type RawRow } from '../rows.js';
import type { WorkerInit } from './worker.js';

/** `sqlite:./data/inbox.db?busyTimeoutMs=2000` → file + options. */
export function parseSqliteUrl(url: string): WorkerInit {
  const rest = url.slice('sqlite:'.length);
  const q = rest.indexOf('?');
  const file = q < 0 ? rest : rest.slice(0, q);
  const params = new URLSearchParams(q < 0 ? '' : rest.slice(q + 1));
  const busy = Number(params.get('busyTimeoutMs') ?? 2000);
  if (!file) throw new Error('sqlite URL needs a file path, e.g. sqlite:./data/webhook-inbox.db');
  return { file: file === ':memory:' ? file : resolve(file), busyTimeoutMs: Number.isFinite(busy) ? busy : 2000 };
}

// Built code (dist/) runs the plain JavaScript worker. Under the TypeScript test runner this
// file is .ts and so is the worker: the thread then registers tsx before importing it.
const fromSource = import.meta.url.endsWith('.ts');
const workerUrl = new URL(fromSource ? './worker.ts' : './worker.js', import.meta.url);
function newWorker(workerData: WorkerInit): Worker {
  if (!fromSource) return new Worker(workerUrl, { workerData });
  const boot = `import('tsx/esm/api').then((m) => { m.register(); return import(${JSON.stringify(workerUrl.href)}); })`;
  return new Worker(boot, { eval: true, workerData });
}

/**
 * Ciphertexts that own their whole ArrayBuffer are moved to the writer thread instead of
 * copied (a pooled buffer shares its memory with others and must never be transferred).
 * After the call the sender's views of them are empty — nothing reads them again.
 */
function ownedBuffers(records: readonly AcceptRecord[]): ArrayBuffer[] {
  const out: ArrayBuffer[] = [];
  for (const r of records) {
    const c = r.payload.ciphertext;
    if (c.byteOffset === 0 && c.buffer.byteLength === c.byteLength && c.buffer instanceof ArrayBuffer) out.push(c.buffer);
  }
  return out;
}

/** SQLite adapter: a single writer thread owns the connection; this side only passes messages. */
export class SqliteStore implements InboxStore {
  readonly kind = 'sqlite' as const;
  private worker!: Worker;
  private nextId = 1;
  private pending = new Map<number, { resolve(v: unknown): void; reject(e: unknown): void }>();
  private closed = false;

  constructor(readonly init: WorkerInit) {
    if (init.file !== ':memory:') mkdirSync(dirname(init.file), { recursive: true });
    this.spawn();
  }

  static fromUrl(url: string): SqliteStore {
    return new SqliteStore(parseSqliteUrl(url));
  }

  private spawn(): void {
    const w = newWorker(this.init);
    w.on('message', (m: { id: number; ok: boolean; result?: unknown; message?: string; code?: string }) => {
      const p = this.pending.get(m.id);
      if (!p) return;
      this.pending.delete(m.id);
      if (m.ok) p.resolve(m.result);
      else p.reject(Object.assign(new Error(m.message), { code: m.code }));
    });
    const fail = (err: unknown) => {
      for (const p of this.pending.values()) p.reject(new StorageUnavailableError('SQLite worker stopped', { cause: err }));
      this.pending.clear();
      // A crashed writer is replaced; requests in its batch were answered 503 above.
      if (!this.closed) setTimeout(() => this.spawn(), 100).unref();
    };
    w.on('error', fail);
    w.on('exit', (code) => { if (this.worker === w) fail(new Error(`exit ${code}`)); });
    this.worker = w;
  }

  private call<T>(op: string, arg?: unknown, transfer: ArrayBuffer[] = []): Promise<T> {
    if (this.closed) return Promise.reject(new StorageUnavailableError('store is closed'));
    return new Promise<T>((resolve, reject) => {
      const id = this.nextId++;
      this.pending.set(id, { resolve: resolve as (v: unknown) => void, reject });
      this.worker.postMessage({ id, op, arg }, transfer);
    });
  }

  migrate(): Promise<number[]> {
    return this.call('migrate');
  }

  acceptBatch(records: readonly AcceptRecord[]): Promise<AcceptResult[]> {
    return acceptUnique(records, (unique) => this.call<AcceptResult[]>('accept', unique, ownedBuffers(unique))).catch((err) => {
      throw err instanceof StorageUnavailableError ? err : new StorageUnavailableError(`SQLite commit failed: ${(err as Error).message}`, { cause: err });
    });
  }

  async ping(): Promise<void> {
    await this.call('ping');
  }

  async getInbox(inboxId: string): Promise<InboxRow | null> {
    const r = await this.call<RawRow | null>('getInbox', inboxId);
    return r ? toInboxRow(r) : null;
  }

  async getPayload(payloadId: string): Promise<StoredPayload | null> {
    const r = await this.call<RawRow | null>('getPayload', payloadId);
    return r ? toStoredPayload(r) : null;
  }

  countRows(): Promise<{ inbox: number; outbox: number; payload: number }> {
    return this.call('count');
  }

  listInboxIds(): Promise<string[]> {
    return this.call('listIds');
  }

  async close(): Promise<void> {
    if (this.closed) return;
    await this.call('close').catch(() => undefined);
    this.closed = true;
    await this.worker.terminate();
  }
}
