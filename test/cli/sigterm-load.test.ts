import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Agent, request } from 'node:http';
import { connect } from 'node:net';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { openStore } from '../../src/store/open.js';
import { configDoc } from '../helpers/app.js';
import { stripeEvent, stripeHeaders } from '../helpers/events.js';
import { describeEachStore, freshDatabase, type TestDatabase } from '../helpers/stores.js';
import { exited, spawnServer } from '../helpers/server-process.js';

type Answer = { status: number; retryAfter?: string; json: { inbox_id?: string } | null } | { error: string };

/** POSTs `body`, all at once or (slowMs) in five parts over that long; the answer, or the connection's error. */
function tryPost(agent: Agent | false, url: string, body: Buffer, slowMs = 0): Promise<Answer> {
  return new Promise((resolve) => {
    const req = request(url, { method: 'POST', agent, headers: { ...stripeHeaders(body), 'content-length': body.length } }, (res) => {
      let text = '';
      res.on('data', (c) => (text += c));
      res.on('end', () => resolve({ status: res.statusCode!, retryAfter: res.headers['retry-after'] as string | undefined, json: text ? JSON.parse(text) : null }));
      res.on('error', (e) => resolve({ error: e.message }));
    });
    req.on('error', (e) => resolve({ error: (e as NodeJS.ErrnoException).code ?? e.message }));
    if (!slowMs) return req.end(body);
    const step = Math.ceil(body.length / 5);
    let i = 0;
    const tick = () => {
      if (req.destroyed) return;
      if (i + step >= body.length) return req.end(body.subarray(i));
      req.write(body.subarray(i, i + step));
      i += step;
      setTimeout(tick, slowMs / 5);
    };
    tick();
  });
}

/**
 * SIGTERM to serve under load: group commits in flight, keep-alive senders, senders streaming
 * their bodies, and idle connections that never sent a byte. Every 2xx names its stored row, every
 * other answer is 503 with Retry-After (a failed connection is no answer), and serve exits 0.
 */
describeEachStore('SIGTERM under load', (kind) => {
  let db: TestDatabase;
  let dir: string;
  beforeAll(async () => {
    db = await freshDatabase(kind);
    dir = mkdtempSync(join(tmpdir(), 'wi-sigterm-'));
  });
  afterAll(async () => {
    await db?.cleanup();
    rmSync(dir, { recursive: true, force: true });
  });

  it('every 2xx has its row, any other answer is 503 with Retry-After, and serve exits 0', async () => {
    const server = await spawnServer(join(dir, 'config.yaml'), configDoc(db.url, { log: { level: 'warn' }, groupCommit: { maxBatch: 16 } }));
    const agent = new Agent({ keepAlive: true, maxSockets: 24 });
    const endpoint = `${server.url}/webhooks/stripe`;
    const idle = Array.from({ length: 3 }, () => connect(Number(new URL(server.url).port), '127.0.0.1').on('error', () => undefined));
    const answers: { id: string; a: Answer }[] = [];
    let seq = 0;
    let signalled = false;
    // 24 senders until their connection fails; one in six streams its body over 400 ms on a connection of its own.
    const senders = Array.from({ length: 24 }, async (_, k) => {
      const slow = k % 6 === 0;
      for (;;) {
        const id = `evt_term_${seq++}`;
        const a = await tryPost(slow ? false : agent, endpoint, stripeEvent(id, { size: 1500 + (seq % 5) * 700 }), slow ? 400 : 0);
        answers.push({ id, a });
        if ('error' in a) return;
        if (!signalled && answers.length >= 300) {
          signalled = true;
          server.child.kill('SIGTERM');
        }
      }
    });
    const exit = exited(server);
    await Promise.all(senders);
    const code = await Promise.race([exit, new Promise<string>((r) => setTimeout(() => r('still running'), 15_000))]);
    agent.destroy();
    for (const s of idle) s.destroy();
    expect(code, server.stderr()).toBe('0');
    const store = openStore(db.url);
    try {
      for (const { id, a } of answers) {
        if ('error' in a) continue;
        expect([200, 503], id).toContain(a.status);
        if (a.status === 503) expect(a.retryAfter, id).toBeDefined();
        if (a.status !== 200) continue;
        const row = await store.getInbox(a.json!.inbox_id!);
        expect(row, `acked ${id}`).not.toBeNull();
        expect(row!.providerEventId).toBe(id);
      }
    } finally {
      await store.close();
    }
  });
});
