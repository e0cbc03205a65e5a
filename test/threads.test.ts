import { once } from 'node:events';
import { Worker } from 'node:worker_threads';
import { expect, it } from 'vitest';
import { WorkerCalls } from '../src/threads.js';

// Answers `echo`, never `hang`.
const ECHO = `const { parentPort } = require('node:worker_threads');
parentPort.on('message', (m) => { if (m.op === 'echo') parentPort.postMessage({ id: m.id, value: m.value }); });`;

function echoCalls() {
  const started: Worker[] = [];
  const calls = new WorkerCalls<{ id: number; value: unknown }>({
    start: () => {
      const w = new Worker(ECHO, { eval: true });
      started.push(w);
      return w;
    },
    settle: (r) => r.value,
    stopped: (cause) => new Error(`thread stopped: ${cause.message}`),
  });
  return { calls, started };
}

it('a reply the caller cannot read ends the thread and fails every pending call at once; the next call starts a new thread', async () => {
  const { calls, started } = echoCalls();
  expect(await calls.call({ op: 'echo', value: 1 })).toBe(1);
  const waiting = [calls.call({ op: 'hang' }), calls.call({ op: 'hang' })];
  const exited = once(started[0]!, 'exit');
  // What Node emits when a message from the thread fails to deserialize: its id is lost with it.
  started[0]!.emit('messageerror', new Error('could not deserialize the reply'));
  for (const p of waiting) await expect(p).rejects.toThrow('thread stopped: could not deserialize the reply');
  await exited;
  expect(await calls.call({ op: 'echo', value: 2 })).toBe(2);
  expect(started).toHaveLength(2);
  await calls.close();
});
