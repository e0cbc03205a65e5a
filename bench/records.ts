import { uuidv7 } from '../src/crypto/ids.js';
import { sha256, type PayloadCipher } from '../src/crypto/payload-cipher.js';
import type { AcceptRecord } from '../src/store/port.js';

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
