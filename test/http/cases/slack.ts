import { PROVIDERS } from '../../../src/providers/registry.js';
import { bumpTimestamp, fields, rotation, uid, type Case, type Secrets } from './types.js';

const SECRETS: Secrets = { v2: 'slack0signing0secret0current0v2', v1: 'slack0signing0secret0previous0v1', v0: 'slack0signing0secret0retired0v0' };

/**
 * Slack Events API deliveries (JSON). The key (`event_id`) and the timestamp are both signed.
 * Form-encoded slash commands / interactions, the url_verification handshake and retries carrying
 * X-Slack-Retry-Num are covered in test/providers/slack.test.ts.
 */
export const slackCase: Case = {
  name: 'slack', endpoint: 'slack', adapter: PROVIDERS.slack!(undefined, 'x'), secrets: SECRETS, tolerance: 300, signatureHeader: 'x-slack-signature', json: true,
  config: { id: 'slack', provider: 'slack', secrets: rotation(SECRETS) },
  make(text = 'plain', type = 'app_mention', objectId) {
    const id = `Ev${uid().slice(0, 12).toUpperCase()}`;
    const channel = objectId ?? `C${uid().slice(0, 10).toUpperCase()}`;
    const body = `{\n  "token": "legacy-verification-token",\n  "team_id": "T0001",\n  "api_app_id": "A0001",\n  "type": "event_callback",\n  "event_id": "${id}",\n  "event_time": 1700000000,\n  "event": {"type": "${type}", "user": "U0001", "channel": "${channel}", "ts": "1700000000.000100", "event_ts": "1700000000.000100", ${fields(text)}}\n}\n`;
    return { body: Buffer.from(body, 'utf8'), headers: { 'content-type': 'application/json' }, signOpts: {}, key: id, type, objectId: channel };
  },
  changeId: (m, headers) => ({ body: Buffer.from(m.body.toString('utf8').replace(m.key, `Ev${uid().slice(0, 12).toUpperCase()}`), 'utf8'), headers }),
  changeTimestamp: (h) => ({ ...h, 'x-slack-request-timestamp': bumpTimestamp(h['x-slack-request-timestamp']!) }),
};
