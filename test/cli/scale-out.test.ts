import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { PayloadCipher } from '../../src/crypto/payload-cipher.js';
import { openStore } from '../../src/store/open.js';
import { configDoc, PAYLOAD_KEY } from '../helpers/app.js';
import { stripeEvent, stripeHeaders } from '../helpers/events.js';
import { post } from '../helpers/http.js';
import { describeEachStore, freshDatabase, type TestDatabase } from '../helpers/stores.js';
import { exited, spawnServer, type ServerProcess } from '../helpers/server-process.js';

interface Answer {
  readonly status: number;
  readonly inboxId: string;
  readonly duplicate: boolean;
}

async function deliver(server: ServerProcess, body: Buffer): Promise<Answer> {
  const r = await post(`${server.url}/webhooks/stripe`, body, stripeHeaders(body));
  const json = r.status === 200 ? (r.json() as { inbox_id: string; duplicate: boolean }) : { inbox_id: '', duplicate: false };
  return { status: r.status, inboxId: json.inbox_id, duplicate: json.duplicate };
}

/**
 * Scaling out: several `serve` processes on one database, a load balancer in front, so a
 * provider's retry (or a storm of copies) reaches them all at once. The de-duplication that makes
 * this safe is the database's unique key, not anything a process remembers.
 */
describeEachStore('two serve processes on one database', (kind) => {
  let db: TestDatabase;
  let dir: string;
  let a: ServerProcess;
  let b: ServerProcess;
  beforeAll(async () => {
    db = await freshDatabase(kind);
    dir = mkdtempSync(join(tmpdir(), 'wi-scale-'));
    const doc = configDoc(db.url, { log: { level: 'warn' } });
    a = await spawnServer(join(dir, 'a.yaml'), doc);
    // The second one migrates too: it finds the schema current and starts.
    b = await spawnServer(join(dir, 'b.yaml'), doc);
  }, 60_000);
  afterAll(async () => {
    for (const s of [a, b]) {
      if (!s) continue;
      s.child.kill('SIGTERM');
      await exited(s);
    }
    await db?.cleanup();
    rmSync(dir, { recursive: true, force: true });
  });

  it('300 concurrent copies of one event, split between them: all 200, one inbox row, one accepted answer', async () => {
    const body = stripeEvent('evt_scale_storm', { size: 4096 });
    const answers = await Promise.all(Array.from({ length: 300 }, (_, i) => deliver(i % 2 ? b : a, body)));
    expect(answers.filter((x) => x.status !== 200)).toEqual([]);
    expect(answers.filter((x) => !x.duplicate)).toHaveLength(1);
    expect(new Set(answers.map((x) => x.inboxId)).size).toBe(1);
    const store = openStore(db.url);
    try {
      expect(await store.countRows()).toEqual({ inbox: 1, outbox: 1, payload: 1 });
    } finally {
      await store.close();
    }
  }, 60_000);

  it('each of 100 events sent to both at once: both answers name one row, exactly one of them new, and that row holds the exact bytes', async () => {
    const store = openStore(db.url);
    try {
      const before = await store.countRows();
      const bodies = Array.from({ length: 100 }, (_, i) => stripeEvent(`evt_scale_${i}`, { size: 1000 + i * 37 }));
      const pairs = await Promise.all(bodies.map((body) => Promise.all([deliver(a, body), deliver(b, body)])));
      const cipher = new PayloadCipher(new Map([['k1', Buffer.from(PAYLOAD_KEY, 'base64')]]), 'k1');
      for (const [i, [x, y]] of pairs.entries()) {
        expect([x.status, y.status]).toEqual([200, 200]);
        expect(y.inboxId).toBe(x.inboxId);
        expect([x.duplicate, y.duplicate].filter((d) => !d)).toHaveLength(1);
        const row = (await store.getInbox(x.inboxId))!;
        expect(row.providerEventId).toBe(`evt_scale_${i}`);
        const raw = cipher.open((await store.getPayload(row.rawPayloadRef!))!, { provider: 'stripe', endpointId: 'stripe', providerEventId: `evt_scale_${i}` });
        expect(raw.equals(bodies[i]!)).toBe(true);
      }
      const after = await store.countRows();
      expect(after).toEqual({ inbox: before.inbox + 100, outbox: before.outbox + 100, payload: before.payload + 100 });
    } finally {
      await store.close();
    }
  }, 60_000);
});
