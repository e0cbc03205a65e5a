import { uuidv7 } from '../../src/crypto/ids.js';
import { PayloadCipher, sha256 } from '../../src/crypto/payload-cipher.js';
import type { AcceptRecord } from '../../src/store/port.js';

/** The payload cipher the store tests seal with (one fixed test key). */
export const cipher = new PayloadCipher(new Map([['k1', Buffer.alloc(32, 1)]]), 'k1');

/** An AcceptRecord for a Stripe event `eventId` on endpoint `ep`, sealed with `cipher`. */
export function record(eventId: string, body = `{"id":"${eventId}"}`, over: Partial<AcceptRecord> = {}): AcceptRecord {
  const raw = Buffer.from(body);
  const binding = { provider: over.provider ?? 'stripe', endpointId: over.endpointId ?? 'ep', providerEventId: eventId };
  return {
    inboxId: uuidv7(), payloadId: uuidv7(), outboxId: uuidv7(), ...binding,
    eventType: 'payment_intent.succeeded', objectId: 'pi_1', objectVersion: null,
    providerCreatedAtMs: 1_700_000_000_000, receivedAtMs: 1_800_000_000_123,
    payloadHash: sha256(raw), matchedSecretVersion: 'v1', payload: cipher.seal(raw, binding),
    topic: 'stripe.payment_intent.succeeded', relay: true, ...over,
  };
}
