import { readlinkSync } from 'node:fs';
import { getPriority, setPriority } from 'node:os';
import { parentPort, Worker } from 'node:worker_threads';

/**
 * Starts a worker thread from a module next to the caller. Built code (dist/) runs the plain
 * JavaScript file; under the TypeScript test runner the caller is .ts and so is the worker,
 * which then registers tsx before importing it.
 */
export function startWorker(callerUrl: string, name: string, workerData: unknown, env?: NodeJS.ProcessEnv): Worker {
  const fromSource = callerUrl.endsWith('.ts');
  const url = new URL(`./${name}${fromSource ? '.ts' : '.js'}`, callerUrl);
  // `env` becomes the thread's process.env (a copy); absent, it gets a copy of this process's.
  const options = env === undefined ? { workerData } : { workerData, env: { ...env } };
  if (!fromSource) return new Worker(url, options);
  const boot = `import('tsx/esm/api').then((m) => { m.register(); return import(${JSON.stringify(url.href)}); })`;
  return new Worker(boot, { ...options, eval: true });
}

/**
 * In a thread: a request that cannot be read took its id with it, so its caller would wait for
 * good. Ending the thread fails every pending call at once (WorkerCalls), and the next call
 * starts a new thread.
 */
export function exitOnUnreadableRequest(): void {
  parentPort?.on('messageerror', () => process.exit(1));
}

/** What replyTo sends: a result, or an error's message and code. */
export interface ThreadReply {
  readonly id: number;
  readonly ok: boolean;
  readonly result?: unknown;
  readonly message?: string;
  readonly code?: string;
}

/**
 * In a thread: answers request `id` with what `run` returns, or with its error's message and code
 * (an Error itself does not cross threads with its code). The other side is WorkerCalls<ThreadReply>.
 */
export function replyTo(id: number, run: () => unknown): void {
  try {
    parentPort!.postMessage({ id, ok: true, result: run() } satisfies ThreadReply);
  } catch (err) {
    const e = err as { message?: string; code?: string };
    parentPort!.postMessage({ id, ok: false, message: e.message ?? String(err), code: e.code } satisfies ThreadReply);
  }
}

/**
 * In a thread: lowers this thread's CPU priority by `by` nice steps (to at most 19) and no other
 * thread's. On Linux a thread has its own nice value, set through its thread id
 * (/proc/thread-self names it); raising one's own nice value (less priority) needs no privilege. A scheduling hint only:
 * returns whether it was applied (not on other systems), and never throws.
 */
export function lowerThisThreadsPriority(by: number): boolean {
  try {
    const tid = Number(readlinkSync('/proc/thread-self').split('/').pop());
    if (!Number.isInteger(tid) || tid <= 0) return false;
    setPriority(tid, Math.min(19, getPriority(tid) + by));
    return true;
  } catch {
    return false; // not Linux, or not allowed
  }
}

/** A Buffer view (no copy) of bytes that crossed a thread as a plain Uint8Array. */
export const bytes = (v: unknown): Buffer => {
  const u = v as Uint8Array;
  return Buffer.isBuffer(u) ? u : Buffer.from(u.buffer, u.byteOffset, u.byteLength);
};

/**
 * A sealed payload that crossed a thread, with its byte fields as Buffers again (the driver sends
 * a Buffer as binary bytea) and every other field as it came: its key id, and a compressed
 * payload's encoding and raw size, which its associated data binds.
 */
export function revivedPayload<P extends { readonly nonce: Uint8Array; readonly ciphertext: Uint8Array }>(p: P): P {
  return { ...p, nonce: bytes(p.nonce), ciphertext: bytes(p.ciphertext) };
}

/**
 * Whether a Buffer's memory can be moved to another thread: it must own its whole ArrayBuffer
 * (a pooled buffer shares its memory with others and must never be transferred). After the
 * move the sender's views of it are empty.
 */
export function ownsItsMemory(b: Uint8Array): boolean {
  return b.byteOffset === 0 && b.buffer.byteLength === b.byteLength && b.buffer instanceof ArrayBuffer;
}

/**
 * The accept records' ciphertexts that own their memory, to move to a store's thread instead of
 * copying them (seal() gives each its own); nothing on this side reads them again.
 */
export function movableCiphertexts(records: readonly { readonly payload: { readonly ciphertext: Buffer } }[]): ArrayBuffer[] {
  const out: ArrayBuffer[] = [];
  for (const r of records) if (ownsItsMemory(r.payload.ciphertext)) out.push(r.payload.ciphertext.buffer as ArrayBuffer);
  return out;
}

/**
 * Request and reply over one worker thread. Each call posts `{ ...msg, id }` and settles when
 * the reply with that id arrives (`settle` turns it into the value, or throws to reject). The
 * thread starts on the first call; if it dies, every pending call is rejected with
 * `stopped(cause)` and the next call starts a new one.
 */
export class WorkerCalls<Reply extends { readonly id: number }> {
  private worker: Worker | undefined;
  private nextId = 1;
  private readonly pending = new Map<number, { resolve(v: unknown): void; reject(e: unknown): void }>();

  constructor(private readonly opts: {
    readonly start: () => Worker;
    readonly settle: (reply: Reply) => unknown;
    readonly stopped: (cause: Error) => Error;
  }) {}

  /** Throws at once, having transferred nothing, if `msg` does not clone (DataCloneError). */
  call<T>(msg: object, transfer: readonly ArrayBuffer[] = []): Promise<T> {
    const id = this.nextId++;
    this.thread().postMessage({ ...msg, id }, transfer as ArrayBuffer[]);
    return new Promise<T>((resolve, reject) => this.pending.set(id, { resolve: resolve as (v: unknown) => void, reject }));
  }

  private thread(): Worker {
    if (this.worker) return this.worker;
    const w = this.opts.start();
    w.on('message', (r: Reply) => {
      const p = this.pending.get(r.id);
      if (!p) return;
      this.pending.delete(r.id);
      try {
        p.resolve(this.opts.settle(r));
      } catch (err) {
        p.reject(err);
      }
    });
    const fail = (cause: Error) => {
      if (this.worker !== w) return;
      this.worker = undefined;
      this.rejectAll(cause);
    };
    w.on('error', fail);
    w.on('exit', (code) => fail(new Error(`exit ${code}`)));
    // A reply that cannot be read took its id with it: its call (and the commit slot behind it)
    // would wait for good. End the thread instead, failing every pending call; the next starts anew.
    w.on('messageerror', (err) => {
      fail(err);
      void w.terminate();
    });
    this.worker = w;
    return w;
  }

  private rejectAll(cause: Error): void {
    for (const p of this.pending.values()) p.reject(this.opts.stopped(cause));
    this.pending.clear();
  }

  async close(): Promise<void> {
    const w = this.worker;
    this.worker = undefined;
    if (w) await w.terminate();
    this.rejectAll(new Error('closed'));
  }
}
