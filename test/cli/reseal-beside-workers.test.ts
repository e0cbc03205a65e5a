import pino from 'pino';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { startApp } from '../../src/app.js';
import { parseConfig } from '../../src/config/schema.js';
import { resealAll } from '../../src/cli/keys.js';
import { PayloadCipher, sha256 } from '../../src/crypto/payload-cipher.js';
import { HandlerRegistry } from '../../src/engine/handlers.js';
import { openStore } from '../../src/store/open.js';
import type { InboxStore } from '../../src/store/port.js';
import { configDoc, PAYLOAD_KEY } from '../helpers/app.js';
import { waitFor } from '../helpers/engine.js';
import { largeEvent, stripeEvent, stripeHeaders } from '../helpers/events.js';
import { post } from '../helpers/http.js';
import { describeEachStore, freshDatabase, type TestDatabase } from '../helpers/stores.js';

const K2 = Buffer.alloc(32, 2).toString('base64');
const both = new Map([['k1', Buffer.from(PAYLOAD_KEY, 'base64')], ['k2', Buffer.from(K2, 'base64')]]);
const toK2 = new PayloadCipher(both, 'k2');
const toK1 = new PayloadCipher(both, 'k1');
const EVENTS = 150;

/**
 * `keys reseal` runs beside live workers: a worker must never fail to open a payload because a
 * reseal swapped it between its read and its open, and no payload may be lost or changed. Here
 * reseals swap every payload between two keys back and forth, unpaced, for as long as workers
 * drain the inbox with one attempt each (any failure would be FAILED at once).
 */
describeEachStore('keys reseal beside running workers', (kind) => {
  let db: TestDatabase;
  let store: InboxStore;
  const sent = new Map<string, Buffer>();

  beforeAll(async () => {
    db = await freshDatabase(kind);
    const app = await startApp(parseConfig(configDoc(db.url), {}), { logger: pino({ level: 'silent' }), workers: false });
    try {
      for (let i = 0; i < EVENTS; i++) {
        const id = `evt_${i}`;
        const body = i % 50 === 0 ? largeEvent(id) : stripeEvent(id, { size: 500 + (i % 7) * 1000 }); // some stored compressed
        const r = await post(`${app.url}/webhooks/stripe`, body, stripeHeaders(body));
        expect(r.status).toBe(200);
        sent.set(id, body);
      }
    } finally {
      await app.close();
    }
    store = openStore(db.url);
  }, 60_000);

  afterAll(async () => {
    await store?.close();
    await db?.cleanup();
  });

  it('every event is processed with its exact bytes while its payload is resealed again and again', async () => {
    const seen = new Map<string, Buffer>();
    const handlers = new HandlerRegistry().on('payment_intent.succeeded', async (event) => {
      seen.set(event.providerEventId, Buffer.from(event.raw));
      await new Promise((r) => setTimeout(r, 3)); // keep the drain long enough to overlap many swaps
    });
    const doc = configDoc(db.url, {
      payloadKeys: { current: 'k2', keys: { k1: PAYLOAD_KEY, k2: K2 } },
      workers: { pollMs: 50, leaseMs: 5000, concurrency: 2, batchSize: 4 }, retry: { baseMs: 10, capMs: 40, maxAttempts: 1 },
    });
    const app = await startApp(parseConfig(doc, {}), { logger: pino({ level: 'silent' }), workers: true, handlers });
    let stop = false;
    let swapped = 0;
    const churn = (async () => {
      while (!stop) {
        for (const cipher of [toK2, toK1]) {
          const t = await resealAll(store, cipher);
          expect([t.unauthentic, [...t.missing]]).toEqual([[], []]);
          swapped += t.resealed;
        }
      }
    })();
    try {
      const open = async (status: string) => (await store.listEvents({ status, limit: 1 })).length > 0;
      await waitFor(async () => !(await open('PENDING')) && !(await open('PROCESSING')), 60_000, 'the inbox drained');
    } finally {
      stop = true;
      await churn;
      await app.close();
    }
    expect(swapped).toBeGreaterThan(EVENTS); // the reseals did overlap the drain
    expect(await store.listEvents({ status: 'FAILED', limit: 10 })).toEqual([]);
    expect(seen.size).toBe(EVENTS);
    for (const [id, body] of sent) expect(seen.get(id)!.equals(body), id).toBe(true);
    for (const e of await store.listEvents({ limit: 1000 })) {
      expect(toK1.open((await store.getPayload(e.rawPayloadRef!))!, e).equals(sent.get(e.providerEventId)!), e.providerEventId).toBe(true);
      expect(e.payloadHash.equals(sha256(sent.get(e.providerEventId)!))).toBe(true);
    }
  }, 120_000);
});
