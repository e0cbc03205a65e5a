import { PROVIDERS } from '../../../src/providers/registry.js';
import { bumpTimestamp, fields, rotation, uid, type Case, type Secrets } from './types.js';

const SECRETS: Secrets = { v2: 'generic-current-v2', v1: 'generic-previous-v1', v0: 'generic-retired-v0' };
const OPTIONS = {
  signatureHeader: 'x-signature',
  prefix: 'sha256=',
  signedContent: '{id}.{timestamp}.{body}',
  idHeader: 'x-event-id',
  timestampHeader: 'x-timestamp',
  toleranceSeconds: 120,
  objectIdPath: 'data.id',
};

export const genericHmacCase: Case = {
  name: 'generic-hmac', endpoint: 'generic', adapter: PROVIDERS['generic-hmac']!(OPTIONS, 'x'), secrets: SECRETS, tolerance: 120, signatureHeader: 'x-signature', json: true,
  config: { id: 'generic', provider: 'generic-hmac', secrets: rotation(SECRETS), options: OPTIONS },
  make(text = 'plain', type = 'order.paid', objectId = 'ord_1') {
    const id = `evt_${uid()}`;
    const body = `{"type": "${type}", "data": {"id": "${objectId}", ${fields(text)}}}`;
    return { body: Buffer.from(body, 'utf8'), headers: { 'content-type': 'application/json' }, signOpts: { id }, key: id, type, objectId };
  },
  changeId: (m, headers) => ({ body: m.body, headers: { ...headers, 'x-event-id': `evt_${uid()}` } }),
  changeTimestamp: (h) => ({ ...h, 'x-timestamp': bumpTimestamp(h['x-timestamp']!) }),
};
