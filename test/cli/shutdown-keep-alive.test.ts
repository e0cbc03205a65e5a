import { once } from 'node:events';
import { mkdtempSync, rmSync } from 'node:fs';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { openStore } from '../../src/store/open.js';
import { configDoc } from '../helpers/app.js';
import { stripeEvent, stripeHeaders } from '../helpers/events.js';
import { describeEachStore, freshDatabase, type TestDatabase } from '../helpers/stores.js';
import { exited, spawnServer } from '../helpers/server-process.js';

const request = (body: Buffer): Buffer => {
  const head = Object.entries(stripeHeaders(body)).map(([k, v]) => `${k}: ${v}\r\n`).join('');
  return Buffer.concat([Buffer.from(`POST /webhooks/stripe HTTP/1.1\r\nHost: x\r\n${head}content-length: ${body.length}\r\n\r\n`), body]);
};

/**
 * A sender that keeps its connection busy (a provider's burst: the next request as soon as the
 * last is answered) at SIGTERM. Every answer after the SIGTERM says Connection: close, so the
 * sender sends nothing more on it; the connection ends after that answer and serve exits, well
 * within the grace period. Before, each answer said keep-alive, the sender's next requests were
 * taken and answered on the connection for the whole 5 s grace, and then it was cut with one of
 * them unanswered.
 */
describeEachStore('SIGTERM with a busy keep-alive connection', (kind) => {
  let db: TestDatabase;
  let dir: string;
  beforeAll(async () => {
    db = await freshDatabase(kind);
    dir = mkdtempSync(join(tmpdir(), 'wi-busy-'));
  });
  afterAll(async () => {
    await db?.cleanup();
    rmSync(dir, { recursive: true, force: true });
  });

  it('the answer in flight says Connection: close, nothing sent is left unanswered, and serve exits 0 before the grace is out', async () => {
    const server = await spawnServer(join(dir, 'config.yaml'), configDoc(db.url));
    const sock = connect(Number(new URL(server.url).port), '127.0.0.1');
    await once(sock, 'connect');
    let received = '';
    let sent = 0;
    const answers: { status: number; connection: string }[] = [];
    const ended = new Promise((r) => sock.once('close', r));
    sock.on('error', () => undefined);
    // A keep-alive sender: on each complete answer that does not close, its next request at once.
    const sendNext = () => {
      const body = stripeEvent(`evt_busy_${sent++}`);
      sock.write(request(body));
    };
    sock.on('data', (d: Buffer) => {
      received += d.toString();
      for (;;) {
        const m = /^HTTP\/1\.1 (\d{3}) [^\r]*\r\n([\s\S]*?)\r\n\r\n/.exec(received);
        if (!m) return;
        const length = Number(/content-length: (\d+)/i.exec(m[2]!)?.[1] ?? 0);
        if (received.length < m[0].length + length) return;
        received = received.slice(m[0].length + length);
        const connection = /(?:^|\r\n)connection: ([^\r]*)/i.exec(m[2]!)?.[1]?.toLowerCase() ?? 'keep-alive';
        answers.push({ status: Number(m[1]), connection });
        if (connection !== 'close' && sent < 2000) sendNext();
      }
    });
    // The first request is in flight (half its body sent) when the SIGTERM comes.
    const first = request(stripeEvent(`evt_busy_${sent++}`));
    sock.write(first.subarray(0, first.length - 20));
    await new Promise((r) => setTimeout(r, 200));
    const exit = exited(server);
    server.child.kill('SIGTERM');
    await new Promise((r) => setTimeout(r, 300));
    const t0 = Date.now();
    sock.write(first.subarray(first.length - 20));
    await ended;
    const code = await exit;
    const ms = Date.now() - t0;
    expect(answers.length, `requests sent: ${sent}, answered: ${answers.length}`).toBe(sent);
    expect(answers.every((a) => a.status === 200)).toBe(true);
    expect(answers.at(-1)!.connection).toBe('close');
    expect(code).toBe('0');
    expect(ms, 'the busy connection held the shutdown').toBeLessThan(3500); // the grace is 5 s
    // Each answer's event is stored.
    const store = openStore(db.url);
    try {
      expect((await store.countRows()).inbox).toBe(sent);
    } finally {
      await store.close();
    }
  });
});
