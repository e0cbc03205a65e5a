import { PROVIDERS } from '../../../src/providers/registry.js';
import { fields, rotation, uid, type Case, type Secrets } from './types.js';

const SECRETS: Secrets = { v2: 'rzp-webhook-secret-current-v2', v1: 'rzp-webhook-secret-previous-v1', v0: 'rzp-webhook-secret-retired-v0' };

/**
 * Razorpay signs the raw body only. The key is the UNSIGNED `x-razorpay-event-id` header (changeId
 * → null: see test/providers/razorpay.test.ts for what a changed id does over HTTP), and no
 * timestamp is signed (changeTimestamp → null).
 */
export const razorpayCase: Case = {
  name: 'razorpay', endpoint: 'razorpay', adapter: PROVIDERS.razorpay!(undefined, 'x'), secrets: SECRETS, tolerance: null, signatureHeader: 'x-razorpay-signature', json: true,
  config: { id: 'razorpay', provider: 'razorpay', secrets: rotation(SECRETS) },
  make(text = 'plain', type = 'payment.captured', objectId) {
    const id = `Evt${uid().slice(0, 14)}`;
    const obj = objectId ?? `pay_${uid().slice(0, 14)}`;
    const body = `{"entity": "event", "account_id": "acc_BFQ7uQEaa7j2z7", "event": "${type}", "contains": ["payment"], "payload": {"payment": {"entity": {"id": "${obj}", "entity": "payment", ${fields(text)}, "currency": "INR", "status": "captured", "created_at": 1700000000}}}, "created_at": 1700000001}`;
    return { body: Buffer.from(body, 'utf8'), headers: { 'content-type': 'application/json', 'x-razorpay-event-id': id }, signOpts: {}, key: id, type, objectId: obj };
  },
  changeId: () => null,
  changeTimestamp: () => null,
};
