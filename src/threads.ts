import { Worker } from 'node:worker_threads';

/**
 * Starts a worker thread from a module next to the caller. Built code (dist/) runs the plain
 * JavaScript file; under the TypeScript test runner the caller is .ts and so is the worker,
 * which then registers tsx before importing it.
 */
export function startWorker(callerUrl: string, name: string, workerData: unknown): Worker {
  const fromSource = callerUrl.endsWith('.ts');
  const url = new URL(`./${name}${fromSource ? '.ts' : '.js'}`, callerUrl);
  if (!fromSource) return new Worker(url, { workerData });
  const boot = `import('tsx/esm/api').then((m) => { m.register(); return import(${JSON.stringify(url.href)}); })`;
  return new Worker(boot, { eval: true, workerData });
}

/**
 * Whether a Buffer's memory can be moved to another thread: it must own its whole ArrayBuffer
 * (a pooled buffer shares its memory with others and must never be transferred). After the
 * move the sender's views of it are empty.
 */
export function ownsItsMemory(b: Uint8Array): boolean {
  return b.byteOffset === 0 && b.buffer.byteLength === b.byteLength && b.buffer instanceof ArrayBuffer;
}
