import { PROVIDERS } from '../../../src/providers/registry.js';
import { bumpTimestamp, fields, rotation, uid, type Case, type Secrets } from './types.js';

const SECRETS: Secrets = {
  v2: 'pdl_ntfset_01hsdn8d43dt7mezr1ef2jtbaw_current-v2-secret',
  v1: 'pdl_ntfset_01hsdn8d43dt7mezr1ef2jtbaw_previous-v1-secret',
  v0: 'pdl_ntfset_01hsdn8d43dt7mezr1ef2jtbaw_retired-v0-secret',
};

/** Paddle signs `${ts}:${raw}`: the event id is in the signed body, the timestamp in the signed header. */
export const paddleCase: Case = {
  name: 'paddle', endpoint: 'paddle', adapter: PROVIDERS.paddle!(undefined, 'x'), secrets: SECRETS, tolerance: 300, signatureHeader: 'paddle-signature', json: true,
  config: { id: 'paddle', provider: 'paddle', secrets: rotation(SECRETS) },
  make(text = 'plain', type = 'transaction.completed', objectId) {
    const id = `evt_${uid().slice(0, 26)}`;
    const obj = objectId ?? `txn_${id.slice(4, 30)}`;
    const body = `{"data": {"id": "${obj}", "status": "completed", ${fields(text)}, "updated_at": "2024-03-20T10:07:35.590857Z"}, "event_id": "${id}", "event_type": "${type}", "occurred_at": "2024-03-20T10:07:35.590857Z", "notification_id": "ntf_${uid().slice(0, 26)}"}`;
    return { body: Buffer.from(body, 'utf8'), headers: { 'content-type': 'application/json' }, signOpts: {}, key: id, type, objectId: obj };
  },
  changeId: (m, headers) => ({ body: Buffer.from(m.body.toString('utf8').replace(m.key, `evt_${uid().slice(0, 26)}`), 'utf8'), headers }),
  changeTimestamp: (h) => ({ ...h, 'paddle-signature': h['paddle-signature']!.replace(/ts=(\d+)/, (_, t: string) => `ts=${bumpTimestamp(t)}`) }),
};
