import { describe, expect, it } from 'vitest';
import { warmBodyPath } from '../../src/http/body.js';

/**
 * startApp runs warmBodyPath before it opens anything: a body in several chunks through readBody
 * and Node's body stream, so V8 has seen both of that path's shapes before it optimises it. It
 * must end (a start that waited on it for good would never listen) and leave nothing behind
 * (no socket, timer or handle that would keep a stopped process alive).
 */
describe('warmBodyPath', () => {
  it('ends, and leaves no socket, timer or handle behind', async () => {
    const before = process.getActiveResourcesInfo().sort();
    for (let i = 0; i < 3; i++) await warmBodyPath(); // and again: every start in the process calls it
    // What readBody's stream left to end (its 'close', a socket's teardown) runs in the next turns.
    await new Promise((resolve) => setImmediate(resolve));
    await new Promise((resolve) => setImmediate(resolve));
    expect(process.getActiveResourcesInfo().sort()).toEqual(before);
  }, 10_000);
});
