import { PROVIDERS } from '../../../src/providers/registry.js';
import { bumpTimestamp, fields, rotation, uid, type Case, type Secrets } from './types.js';

const SECRETS: Secrets = {
  v2: 'whsec_' + Buffer.alloc(32, 2).toString('base64'),
  v1: 'whsec_' + Buffer.alloc(32, 1).toString('base64'),
  v0: 'whsec_' + Buffer.alloc(32, 0xa0).toString('base64'),
};

export const standardWebhooksCase: Case = {
  name: 'standard-webhooks', endpoint: 'sw', adapter: PROVIDERS['standard-webhooks']!(undefined, 'x'), secrets: SECRETS, tolerance: 300, signatureHeader: 'webhook-signature', json: true,
  config: { id: 'sw', provider: 'standard-webhooks', secrets: rotation(SECRETS) },
  make(text = 'plain', type = 'invoice.paid', objectId = 'inv_1') {
    const id = `msg_${uid()}`;
    const body = `{"type": "${type}", "timestamp": "2024-01-02T03:04:05Z", "data": {"id": "${objectId}", ${fields(text)}}}`;
    return { body: Buffer.from(body, 'utf8'), headers: { 'content-type': 'application/json' }, signOpts: { id }, key: id, type };
  },
  changeId: (m, headers) => ({ body: m.body, headers: { ...headers, 'webhook-id': `msg_${uid()}` } }),
  changeTimestamp: (h) => ({ ...h, 'webhook-timestamp': bumpTimestamp(h['webhook-timestamp']!) }),
};
