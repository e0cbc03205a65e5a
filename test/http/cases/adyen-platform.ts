import { createHash } from 'node:crypto';
import { PROVIDERS } from '../../../src/providers/registry.js';
import { fields, rotation, uid, type Case, type Secrets } from './types.js';

const SECRETS: Secrets = { v2: 'A1'.repeat(32), v1: 'B2'.repeat(32), v0: 'C3'.repeat(32) };
const OPTIONS = { webhooks: 'platform' };

/** Adyen platform webhooks: HmacSignature over the raw body; the key is the body's SHA-256 (no event id). */
export const adyenPlatformCase: Case = {
  name: 'adyen', endpoint: 'adyen-platform', adapter: PROVIDERS.adyen!(OPTIONS, 'x'), secrets: SECRETS, tolerance: null, signatureHeader: 'hmacsignature', json: true,
  config: { id: 'adyen-platform', provider: 'adyen', secrets: rotation(SECRETS), options: OPTIONS },
  make(text = 'plain', type = 'balancePlatform.transfer.updated', objectId) {
    const transfer = objectId ?? `TR${uid().slice(0, 14).toUpperCase()}`;
    const body = Buffer.from(`{"data": {"id": "${transfer}", "sequenceNumber": "${uid().slice(0, 6)}", ${fields(text)}},\n "environment": "test", "type": "${type}"}`, 'utf8');
    return { body, headers: { 'content-type': 'application/json' }, signOpts: {}, key: `sha256:${createHash('sha256').update(body).digest('hex')}`, type, objectId: transfer };
  },
  changeId: () => null, // the key IS the body's hash: another id means other bytes (the tamper tests)
  changeTimestamp: () => null,
};
