import { expect } from 'vitest';

/**
 * Calls `call` twice at once, then once more: the second call must not resolve before the first
 * has finished (its caller would go on while the first is still closing things), and a call after
 * both must resolve too.
 */
export async function expectSecondCallWaitsForFirst(call: () => Promise<void>, what: string): Promise<void> {
  let firstDone = false;
  const first = call().then(() => {
    firstDone = true;
  });
  await call();
  expect(firstDone, `the second ${what} resolved while the first was still running`).toBe(true);
  await first;
  await call();
}
