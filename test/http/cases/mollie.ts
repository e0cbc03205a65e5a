import { PROVIDERS } from '../../../src/providers/registry.js';
import { fields, rotation, uid, type Case, type Secrets } from './types.js';

const SECRETS: Secrets = { v2: 'mollie-signing-secret-v2', v1: 'mollie-signing-secret-v1', v0: 'mollie-signing-secret-v0' };

/** Next-gen (signed) Mollie webhooks; the classic unsigned notices have their own tests (test/providers/mollie.test.ts). */
export const mollieCase: Case = {
  name: 'mollie', endpoint: 'mollie', adapter: PROVIDERS.mollie!(undefined, 'x'), secrets: SECRETS, tolerance: null, signatureHeader: 'x-mollie-signature', json: true,
  config: { id: 'mollie', provider: 'mollie', secrets: rotation(SECRETS) },
  make(text = 'plain', type = 'payment-link.paid', objectId) {
    const id = `event_${uid()}`;
    const entity = objectId ?? `pl_${uid().slice(0, 10)}`;
    const body = `{"resource": "event", "id": "${id}", "type": "${type}", "entityId": "${entity}", "createdAt": "2026-11-30T10:00:00+00:00",\n "_embedded": {"entity": {"id": "${entity}", ${fields(text)}}}}`;
    return { body: Buffer.from(body, 'utf8'), headers: { 'content-type': 'application/json' }, signOpts: {}, key: id, type, objectId: entity };
  },
  changeId: (m, headers) => ({ body: Buffer.from(m.body.toString('utf8').replace(m.key, `event_${uid()}`), 'utf8'), headers }),
  changeTimestamp: () => null,
};
