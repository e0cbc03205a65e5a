import { PROVIDERS } from '../../../src/providers/registry.js';
import { standardPublicKeyOf } from '../../../src/providers/standard-webhooks.js';
import { bumpTimestamp, fields, rotation, uid, type Case, type Secrets } from './types.js';

/**
 * Standard Webhooks with asymmetric `v1a` (ed25519) signatures: the endpoint trusts only the
 * producer's PUBLIC keys (`whpk_…`), while the test signs with the matching PRIVATE keys
 * (`whsk_…`, the 32-byte seed). So `secrets` (used to sign) and `config.secrets` (trusted) differ.
 */
const seed = (b: number) => 'whsk_' + Buffer.alloc(32, b).toString('base64');
const PRIVATE: Secrets = { v2: seed(0x22), v1: seed(0x11), v0: seed(0xa0) };
const PUBLIC: Secrets = { v2: standardPublicKeyOf(PRIVATE.v2), v1: standardPublicKeyOf(PRIVATE.v1), v0: standardPublicKeyOf(PRIVATE.v0) };

export const standardWebhooksV1aCase: Case = {
  name: 'standard-webhooks', endpoint: 'sw-v1a', adapter: PROVIDERS['standard-webhooks']!(undefined, 'x'), secrets: PRIVATE, tolerance: 300, signatureHeader: 'webhook-signature', json: true,
  config: { id: 'sw-v1a', provider: 'standard-webhooks', secrets: rotation(PUBLIC) },
  make(text = 'plain', type = 'invoice.paid', objectId = 'inv_1') {
    const id = `msg_${uid()}`;
    const body = `{"type": "${type}", "timestamp": "2024-01-02T03:04:05Z", "data": {"id": "${objectId}", ${fields(text)}}}`;
    return { body: Buffer.from(body, 'utf8'), headers: { 'content-type': 'application/json' }, signOpts: { id }, key: id, type };
  },
  changeId: (m, headers) => ({ body: m.body, headers: { ...headers, 'webhook-id': `msg_${uid()}` } }),
  changeTimestamp: (h) => ({ ...h, 'webhook-timestamp': bumpTimestamp(h['webhook-timestamp']!) }),
};
