import { PROVIDERS } from '../../../src/providers/registry.js';
import { bumpTimestamp, fields, rotation, uid, type Case, type Secrets } from './types.js';

const SECRETS: Secrets = { v2: 'whsec_stripe_current_v2', v1: 'whsec_stripe_previous_v1', v0: 'whsec_stripe_retired_v0' };

export const stripeCase: Case = {
  name: 'stripe', endpoint: 'stripe', adapter: PROVIDERS.stripe!(undefined, 'x'), secrets: SECRETS, tolerance: 300, signatureHeader: 'stripe-signature', json: true,
  config: { id: 'stripe', provider: 'stripe', secrets: rotation(SECRETS) },
  make(text = 'plain', type = 'payment_intent.succeeded', objectId) {
    const id = `evt_${uid()}`;
    const obj = objectId ?? `pi_${id.slice(4, 16)}`;
    const body = `{\n  "id": "${id}",\n  "object": "event",\n  "type": "${type}",\n  "created": 1700000000,\n  "data": {"object": {"id": "${obj}", ${fields(text)}}}\n}\n`;
    return { body: Buffer.from(body, 'utf8'), headers: { 'content-type': 'application/json; charset=utf-8' }, signOpts: {}, key: id, type, objectId: obj };
  },
  changeId: (m, headers) => ({ body: Buffer.from(m.body.toString('utf8').replace(m.key, `evt_${uid()}`), 'utf8'), headers }),
  changeTimestamp: (h) => ({ ...h, 'stripe-signature': h['stripe-signature']!.replace(/t=(\d+)/, (_, t: string) => `t=${bumpTimestamp(t)}`) }),
};

/** The same secret on an endpoint that only accepts payment_intent.* (the event-filter tests). */
export const STRIPE_FILTERED_ENDPOINT = { id: 'stripe-pi', provider: 'stripe', secrets: [{ version: 'v1', value: SECRETS.v2 }], events: ['payment_intent.*'] };
