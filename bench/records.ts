import { uuidv7 } from '../src/crypto/ids.js';
import { sha256, type PayloadCipher } from '../src/crypto/payload-cipher.js';
import type { AcceptRecord, InboxStore } from '../src/store/port.js';
import { EventFactory, prng, type EventFactoryOptions } from './events.js';

/**
 * The record the ingress writes for a verified Stripe-style event `evt_<id>` on the bench
 * endpoint (`stripe-bench`, no broker route: nothing for the relay), its body sealed under
 * `cipher` as the ingress seals it. For benches that accept through the store API directly.
 */
export function sealedRecord(cipher: PayloadCipher, id: string, body: Buffer, nowMs: number): AcceptRecord {
  const binding = { provider: 'stripe', endpointId: 'stripe-bench', providerEventId: `evt_${id}` };
  return {
    inboxId: uuidv7(nowMs), payloadId: uuidv7(nowMs), outboxId: uuidv7(nowMs), ...binding,
    eventType: 'payment_intent.succeeded', objectId: `pi_${id}`, objectVersion: null,
    providerCreatedAtMs: Math.floor(nowMs / 1000) * 1000, receivedAtMs: nowMs,
    payloadHash: sha256(body), matchedSecretVersion: 'v1', payload: cipher.seal(body, binding),
    topic: 'stripe.payment_intent.succeeded', relay: false,
  };
}

/**
 * Accepts `n` bench events `evt_<tag>_<i>` (bodies of `sizes`, none large; a seeded PRNG) through
 * the store API, `batch` per transaction, sealed under `cipher`. Returns the body bytes written.
 */
export async function seedEvents(store: InboxStore, cipher: PayloadCipher, n: number, tag: string, sizes: EventFactoryOptions, seed: number, batch = 500): Promise<number> {
  const factory = new EventFactory(sizes);
  const rnd = prng(seed);
  let bytes = 0;
  for (let i = 0; i < n; i += batch) {
    const records: AcceptRecord[] = [];
    const now = Date.now();
    for (let j = i; j < Math.min(n, i + batch); j++) {
      const id = `${tag}_${j}`;
      const body = factory.make(id, false, rnd, Math.floor(now / 1000));
      bytes += body.length;
      records.push(sealedRecord(cipher, id, body, now));
    }
    await store.acceptBatch(records);
  }
  return bytes;
}
