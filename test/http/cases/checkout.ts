import { PROVIDERS } from '../../../src/providers/registry.js';
import { fields, rotation, uid, type Case, type Secrets } from './types.js';

const SECRETS: Secrets = { v2: 'cko-signature-key-current-v2', v1: 'cko-signature-key-previous-v1', v0: 'cko-signature-key-retired-v0' };

/** Checkout.com signs the body only; the event id is in the body, so changing it breaks the signature. */
export const checkoutCase: Case = {
  name: 'checkout', endpoint: 'checkout', adapter: PROVIDERS.checkout!(undefined, 'x'), secrets: SECRETS, tolerance: null, signatureHeader: 'cko-signature', json: true,
  config: { id: 'checkout', provider: 'checkout', secrets: rotation(SECRETS) },
  make(text = 'plain', type = 'payment_approved', objectId) {
    const id = `evt_${uid().slice(0, 26)}`;
    const obj = objectId ?? `pay_${uid().slice(0, 26)}`;
    const body = `{\n  "id": "${id}",\n  "type": "${type}",\n  "created_on": "2024-11-12T17:56:40.889Z",\n  "data": {"id": "${obj}", ${fields(text)}},\n  "version": "1.0.43"\n}`;
    return { body: Buffer.from(body, 'utf8'), headers: { 'content-type': 'application/json' }, signOpts: {}, key: id, type, objectId: obj };
  },
  changeId: (m, headers) => ({ body: Buffer.from(m.body.toString('utf8').replace(m.key, `evt_${uid().slice(0, 26)}`), 'utf8'), headers }),
  changeTimestamp: () => null,
};
