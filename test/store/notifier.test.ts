import { describe, expect, it } from 'vitest';
import { Notifier } from '../../src/store/postgres/notifier.js';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** A NOTIFY the test answers by hand; records when each one was sent. */
function manualSend() {
  const sent: number[] = [];
  const pending: (() => void)[] = [];
  const send = () => new Promise<void>((resolve) => { sent.push(performance.now()); pending.push(resolve); });
  return { sent, answer: () => pending.shift()?.(), send };
}

describe('PostgreSQL new-work NOTIFY pacing', () => {
  it('the first accept after a quiet spell notifies at once; accepts meanwhile cause exactly one more, one interval later', async () => {
    const { sent, answer, send } = manualSend();
    const n = new Notifier(send, 60);
    n.poke();
    expect(sent).toHaveLength(1); // no timer between a lone accept and its wake-up
    for (let i = 0; i < 50; i++) n.poke(); // while the NOTIFY is in flight
    answer();
    await sleep(20);
    for (let i = 0; i < 50; i++) n.poke(); // after it, inside the interval
    expect(sent).toHaveLength(1);
    await sleep(80);
    expect(sent).toHaveLength(2);
    // Node's timers run on the loop's whole-millisecond clock: one may fire up to 1 ms early by performance.now().
    expect(sent[1]! - sent[0]!).toBeGreaterThanOrEqual(58);
    answer();
    await sleep(100);
    expect(sent).toHaveLength(2); // nothing was accepted since: no third NOTIFY
  });

  it('a steady stream of accepts sends at most one NOTIFY per interval', async () => {
    let sends = 0;
    const n = new Notifier(async () => { sends++; }, 40);
    const until = performance.now() + 400;
    while (performance.now() < until) {
      n.poke();
      await sleep(2);
    }
    await sleep(60);
    // 400 ms of accepts every ~2 ms: one NOTIFY per 40 ms (+ the first), not one per accept.
    expect(sends).toBeGreaterThanOrEqual(5);
    expect(sends).toBeLessThanOrEqual(12);
  });

  it('a failed NOTIFY does not stop later ones (a lost wake-up only waits for the poll)', async () => {
    let sends = 0;
    const n = new Notifier(async () => { sends++; throw new Error('connection lost'); }, 10);
    n.poke();
    await sleep(30);
    n.poke();
    await sleep(30);
    expect(sends).toBe(2);
  });

  it('close drops a paced NOTIFY and sends nothing after', async () => {
    const { sent, answer, send } = manualSend();
    const n = new Notifier(send, 50);
    n.poke();
    n.poke();
    answer(); // the second is now waiting out the interval
    await sleep(5);
    n.close();
    await sleep(80);
    n.poke();
    expect(sent).toHaveLength(1);
  });
});
