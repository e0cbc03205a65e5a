import { standardPublicKeyOf } from '../../../src/providers/standard-webhooks.js';
import { standardWebhooksCase } from './standard-webhooks.js';
import { rotation, type Case, type Secrets } from './types.js';

/**
 * Standard Webhooks with asymmetric `v1a` (ed25519) signatures: the same deliveries as the `v1`
 * case, but the endpoint trusts only the producer's PUBLIC keys (`whpk_…`), while the test signs
 * with the matching PRIVATE keys (`whsk_…`, the 32-byte seed). So `secrets` (used to sign) and
 * `config.secrets` (trusted) differ.
 */
const seed = (b: number) => 'whsk_' + Buffer.alloc(32, b).toString('base64');
const PRIVATE: Secrets = { v2: seed(0x22), v1: seed(0x11), v0: seed(0xa0) };
const PUBLIC: Secrets = { v2: standardPublicKeyOf(PRIVATE.v2), v1: standardPublicKeyOf(PRIVATE.v1), v0: standardPublicKeyOf(PRIVATE.v0) };

export const standardWebhooksV1aCase: Case = {
  ...standardWebhooksCase,
  endpoint: 'sw-v1a',
  secrets: PRIVATE,
  config: { id: 'sw-v1a', provider: 'standard-webhooks', secrets: rotation(PUBLIC) },
};
