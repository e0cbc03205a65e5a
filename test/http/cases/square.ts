import { randomUUID } from 'node:crypto';
import { PROVIDERS } from '../../../src/providers/registry.js';
import { fields, rotation, type Case, type Secrets } from './types.js';

const SECRETS: Secrets = { v2: 'sq-signature-key-current-v2', v1: 'sq-signature-key-previous-v1', v0: 'sq-signature-key-retired-v0' };
/** The URL registered at Square; the test server listens elsewhere (http://127.0.0.1:<port>), as behind a proxy. */
export const SQUARE_PUBLIC_URL = 'https://hooks.example.com/webhooks/square?src=sq';
export const SQUARE_OPTIONS = { publicUrl: SQUARE_PUBLIC_URL };

/**
 * Square signs the registered notification URL + raw body. No timestamp is signed (changeTimestamp
 * → null); the event id is in the signed body, so changing it breaks the signature.
 */
export const squareCase: Case = {
  name: 'square', endpoint: 'square', adapter: PROVIDERS.square!(SQUARE_OPTIONS, 'x'), secrets: SECRETS, tolerance: null, signatureHeader: 'x-square-hmacsha256-signature', json: true,
  config: { id: 'square', provider: 'square', secrets: rotation(SECRETS), options: SQUARE_OPTIONS },
  make(text = 'plain', type = 'order.updated', objectId) {
    const id = randomUUID();
    const obj = objectId ?? `ORD${id.slice(0, 8)}`;
    const body = `{\n  "merchant_id": "MLEFBHHSJGVHD",\n  "type": "${type}",\n  "event_id": "${id}",\n  "created_at": "2024-01-02T03:04:05.123456789Z",\n  "data": {"type": "order", "id": "${obj}", "object": {"order_updated": {"order_id": "${obj}", "version": 3, ${fields(text)}}}}\n}\n`;
    return { body: Buffer.from(body, 'utf8'), headers: { 'content-type': 'application/json' }, signOpts: {}, key: id, type, objectId: obj };
  },
  changeId: (m, headers) => ({ body: Buffer.from(m.body.toString('utf8').replace(m.key, randomUUID()), 'utf8'), headers }),
  changeTimestamp: () => null,
};
