import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Agent, request } from 'node:http';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { PayloadCipher } from '../../src/crypto/payload-cipher.js';
import { openStore } from '../../src/store/open.js';
import { configDoc, PAYLOAD_KEY } from '../helpers/app.js';
import { stripeEvent, stripeHeaders } from '../helpers/events.js';
import { describeEachStore, freshDatabase, type TestDatabase } from '../helpers/stores.js';
import { spawnServer } from '../helpers/server-process.js';

/** POST over a keep-alive agent; resolves with the parsed answer or null if the connection died. */
function tryPost(agent: Agent, url: string, body: Buffer): Promise<{ status: number; json: { inbox_id: string; duplicate: boolean } } | null> {
  return new Promise((resolve) => {
    const req = request(url, { method: 'POST', agent, headers: { ...stripeHeaders(body), 'content-length': body.length } }, (res) => {
      let text = '';
      res.on('data', (c) => (text += c));
      res.on('end', () => resolve({ status: res.statusCode!, json: text ? JSON.parse(text) : null }));
      res.on('error', () => resolve(null));
    });
    req.on('error', () => resolve(null));
    req.end(body);
  });
}

describeEachStore('SIGKILL while events are in flight', (kind) => {
  let db: TestDatabase;
  let dir: string;
  beforeAll(async () => {
    db = await freshDatabase(kind);
    dir = mkdtempSync(join(tmpdir(), 'wi-crash-'));
  });
  afterAll(async () => {
    await db?.cleanup();
    rmSync(dir, { recursive: true, force: true });
  });

  it('every event that got a 2xx is in the inbox after restart, with its exact bytes', async () => {
    const doc = configDoc(db.url, { log: { level: 'warn' } });
    const server = await spawnServer(join(dir, 'config.yaml'), doc);
    const agent = new Agent({ keepAlive: true, maxSockets: 32 });
    const sent = new Map<string, Buffer>();
    const acked = new Map<string, string>(); // event id → inbox id
    let seq = 0;
    let killed = false;
    const endpoint = `${server.url}/webhooks/stripe`;

    // 32 senders loop until the process dies; the kill lands mid-stream.
    const senders = Array.from({ length: 32 }, async () => {
      while (!killed) {
        const id = `evt_crash_${seq++}`;
        const body = stripeEvent(id, { size: 2000 + (seq % 7) * 500 });
        sent.set(id, body);
        const r = await tryPost(agent, endpoint, body);
        if (r === null) return;
        if (r.status === 200) acked.set(id, r.json.inbox_id);
        if (acked.size >= 400 && !killed) {
          killed = true;
          // One request certainly in flight at the kill (the others may all have been answered
          // by then): half its body is on the wire, the rest never comes.
          const halfId = `evt_crash_half_${seq++}`;
          const half = stripeEvent(halfId, { size: 3000 });
          sent.set(halfId, half);
          const req = request(endpoint, { method: 'POST', agent: false, headers: { ...stripeHeaders(half), 'content-length': half.length } });
          req.on('error', () => undefined);
          req.write(half.subarray(0, half.length >> 1));
          await new Promise((r) => setTimeout(r, 50));
          server.child.kill('SIGKILL');
        }
      }
    });
    await Promise.all(senders);
    agent.destroy();
    expect(killed).toBe(true);
    expect(sent.size).toBeGreaterThan(acked.size); // at least the half-sent request was in flight at the kill

    const store = openStore(db.url);
    try {
      const cipher = new PayloadCipher(new Map([['k1', Buffer.from(PAYLOAD_KEY, 'base64')]]), 'k1');
      for (const [eventId, inboxId] of acked) {
        const row = await store.getInbox(inboxId);
        expect(row, `acked ${eventId} missing after SIGKILL`).not.toBeNull();
        expect(row!.providerEventId).toBe(eventId);
        const payload = (await store.getPayload(row!.rawPayloadRef!))!;
        const raw = cipher.open(payload, { provider: 'stripe', endpointId: 'stripe', providerEventId: eventId });
        expect(raw.equals(sent.get(eventId)!)).toBe(true);
      }
    } finally {
      await store.close();
    }

    // After restart, the provider's retries of acked events are duplicates of the same rows.
    const again = await spawnServer(join(dir, 'config.yaml'), doc);
    const agent2 = new Agent({ keepAlive: true, maxSockets: 8 });
    try {
      const sample = [...acked].slice(0, 50);
      for (const [eventId, inboxId] of sample) {
        const r = await tryPost(agent2, `${again.url}/webhooks/stripe`, sent.get(eventId)!);
        expect(r).toEqual({ status: 200, json: { inbox_id: inboxId, duplicate: true } });
      }
    } finally {
      agent2.destroy();
      again.child.kill('SIGTERM');
      await new Promise((r) => again.child.once('exit', r));
    }
  });
});
