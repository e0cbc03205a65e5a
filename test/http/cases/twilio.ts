import { createHash } from 'node:crypto';
import { PROVIDERS } from '../../../src/providers/registry.js';
import { rotation, uid, type Case, type Made, type Secrets } from './types.js';

/**
 * Twilio signs the URL it called + the sorted, decoded form parameters; nothing time-related.
 * The endpoint's publicUrl (below) is NOT the test server's URL: exactly the reverse-proxy case,
 * and the reason the shared tests pass only when the adapter signs publicUrl, not what it saw.
 * The key is `MessageSid:MessageStatus` — both signed form parameters, so changeId swaps the SID.
 */
const SECRETS: Secrets = { v2: '0f1e2d3c4b5a69788796a5b4c3d2e1f0', v1: '11112222333344445555666677778888', v0: 'deadbeefdeadbeefdeadbeefdeadbeef' };
export const TWILIO_PUBLIC_URL = 'https://hooks.example.com/twilio/status';
export const TWILIO_OPTIONS = { publicUrl: TWILIO_PUBLIC_URL };
export const TWILIO_SECRETS = SECRETS;

const STATUSES = ['queued', 'sending', 'sent', 'delivered', 'undelivered', 'failed', 'read'];
let next = 0;

const SID_RE = /^SM[0-9a-f]{32}$/;
/** The shared suite pins objects with ids like `obj_…`; a Twilio message is named by an SM… SID. */
const messageSid = (objectId?: string) =>
  objectId === undefined ? `SM${uid()}` : SID_RE.test(objectId) ? objectId : `SM${createHash('sha256').update(objectId).digest('hex').slice(0, 32)}`;

/** Form-encodes only what would change the parameter structure; multi-byte text stays raw UTF-8. */
const formText = (text: string) => text.replace(/[%&+=#]/g, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`).replaceAll(' ', '+');

export const twilioCase: Case = {
  name: 'twilio', endpoint: 'twilio', adapter: PROVIDERS.twilio!(TWILIO_OPTIONS, 'x'), secrets: SECRETS, tolerance: null, signatureHeader: 'x-twilio-signature', json: false,
  config: { id: 'twilio', provider: 'twilio', secrets: rotation(SECRETS), options: TWILIO_OPTIONS },
  make(text = 'plain', type, objectId): Made {
    // Two events about one message differ by status (sent → delivered); without a type, cycle through them.
    const status = type ? type.replace(/^message\./, '') : STATUSES[next++ % STATUSES.length]!;
    const sid = messageSid(objectId);
    // Twilio's parameter order is not sorted; the signature sorts it.
    const body = [
      `SmsSid=${sid}`, `SmsStatus=${status}`, `MessageStatus=${status}`, 'To=%2B15558675310', `Body=${formText(text)}`,
      `MessageSid=${sid}`, 'AccountSid=AC00000000000000000000000000000000', 'From=%2B15017122661', 'ApiVersion=2010-04-01', 'Price=-1.0', 'PriceUnit=USD',
    ].join('&');
    return {
      body: Buffer.from(body, 'utf8'), headers: { 'content-type': 'application/x-www-form-urlencoded; charset=utf-8' }, signOpts: {},
      key: `${sid}:${status}`, type: `message.${status}`, objectId: sid,
    };
  },
  changeId: (m, headers) => {
    const sid = m.objectId!;
    return { body: Buffer.from(m.body.toString('utf8').replaceAll(sid, `SM${uid()}`), 'utf8'), headers };
  },
  changeTimestamp: () => null,
};
