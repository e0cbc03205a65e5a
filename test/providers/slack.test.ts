import { createHash, createHmac } from 'node:crypto';
import { isValidSlackRequest, verifySlackRequest } from '@slack/bolt';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { hmac, type TrustedKey } from '../../src/crypto/hmac.js';
import type { ProviderAdapter, SignatureMetadata } from '../../src/providers/contract.js';
import { PROVIDERS } from '../../src/providers/registry.js';
import { expectedFirst, reasonOf, trustedKeys, verifyWith, view } from '../helpers/adapter.js';
import { startTestApp, storedBytes, type TestApp } from '../helpers/app.js';
import { post } from '../helpers/http.js';
import { describeEachStore } from '../helpers/stores.js';

const adapter: ProviderAdapter = PROVIDERS.slack!(undefined, 'endpoints[0].options');

const SECRET = 'e3b98d0c1a2f4b5c6d7e8f9012345678';
const OLD_SECRET = '0a1b2c3d4e5f60718293a4b5c6d7e8f9';
const NOW = 1_700_000_000;

const keys = (...entries: [string, string, number?][]): TrustedKey[] => trustedKeys(adapter, ...entries);
const JSON_CT = ['content-type', 'application/json'] as [string, string];
const FORM_CT = ['content-type', 'application/x-www-form-urlencoded'] as [string, string];

/** parseSignature + verify, as the pipeline does; the version that matched or null. */
const check = (sig: string, ts: string, body: Buffer | string, ks: TrustedKey[], nowMs = NOW * 1000) =>
  verifyWith(adapter, [['x-slack-signature', sig], ['x-slack-request-timestamp', ts]], body, ks, nowMs);

/** The signature the way Slack's docs and bolt-js's own tests compute it (string HMAC, hex). */
const theirs = (secret: string, ts: number | string, body: string) => `v0=${createHmac('sha256', secret).update(`v0:${ts}:${body}`).digest('hex')}`;

const meta = (timestamp = NOW): SignatureMetadata => adapter.parseSignature(view([['x-slack-signature', `v0=${'a'.repeat(64)}`], ['x-slack-request-timestamp', String(timestamp)]]));

// docs.slack.dev "Verifying requests from Slack" (also slackapi/python-slack-sdk tests/slack_sdk/signature/test_signature_verifier.py).
const DOC = {
  secret: '8f742231b10e8888abcd99yyyzzz85a5',
  ts: 1531420618,
  body: 'token=xyzz0WbapA4vBCDEFasx0q6G&team_id=T1DC2JH3J&team_domain=testteamnow&channel_id=G8PSS9T3V&channel_name=foobar&user_id=U2CERLKJA&user_name=roadrunner&command=%2Fwebhook-collect&text=&response_url=https%3A%2F%2Fhooks.slack.com%2Fcommands%2FT1DC2JH3J%2F397700885554%2F96rGlfmibIGlgcZRskXaIFfN&trigger_id=398738663015.47445629121.803a0bc887a14d10d2c447fce8b6703c',
  signature: 'v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503',
};

const EVENT = Buffer.from('{\n  "token": "XXYYZZ",\n  "team_id": "T123ABC456",\n  "api_app_id": "A123ABC456",\n  "event": {"type": "app_mention", "user": "U123ABC456", "text": "<@U0LAN0Z89> caf\\u00e9 ☕ 東京 1.0", "ts": "1515449522.000016", "channel": "C123ABC456", "event_ts": "1515449522000016"},\n  "type": "event_callback",\n  "authed_users": ["U0LAN0Z89"],\n  "event_id": "Ev123ABC456",\n  "event_time": 1515449522\n}\n');

function slash(fields: Record<string, string> = {}): Buffer {
  return Buffer.from(new URLSearchParams({
    token: 'gIkuvaNzQIHg97ATvDxqgjtO', team_id: 'T0001', team_domain: 'example', channel_id: 'C2147483705', channel_name: 'test',
    user_id: 'U2147483697', user_name: 'Steve', command: '/deploy', text: 'prod café ☕', api_app_id: 'A0001',
    response_url: 'https://hooks.slack.com/commands/1234/5678', trigger_id: '13345224609.738474920.8088930838d88f008e0', ...fields,
  }).toString());
}

const interaction = (p: Record<string, unknown>) => Buffer.from(new URLSearchParams({ payload: JSON.stringify(p) }).toString());
const BLOCK_ACTIONS = {
  type: 'block_actions', user: { id: 'U0001', name: 'steve' }, api_app_id: 'A0001', token: 'x', container: { type: 'message', message_ts: '1548261231.000200', channel_id: 'C0001' },
  trigger_id: '12321423423.333649436676.d8c1bb837935619ccad0f624c448ffb3', team: { id: 'T0001', domain: 'example' }, channel: { id: 'C0001', name: 'general' },
  response_url: 'https://hooks.slack.com/actions/T0001/1/x', actions: [{ action_id: 'approve', block_id: 'b1', type: 'button', value: 'café ☕', action_ts: '1548426417.840180' }],
};
const VIEW_CLOSED = { type: 'view_closed', team: { id: 'T0001', domain: 'example' }, user: { id: 'U0001', name: 'steve' }, api_app_id: 'A0001', token: 'x', view: { id: 'V0001', hash: '156772938.1827394' }, is_cleared: false };

describe('slack: the published vector (Slack docs "Verifying requests from Slack")', () => {
  it('sign() reproduces the documented signature', () => {
    expect(adapter.sign(Buffer.from(DOC.body), DOC.secret, { timestamp: DOC.ts })).toEqual({ 'x-slack-request-timestamp': String(DOC.ts), 'x-slack-signature': DOC.signature });
  });

  it('the documented request verifies; one changed byte, another timestamp or another secret does not', () => {
    const k = keys(['v1', DOC.secret]);
    expect(check(DOC.signature, String(DOC.ts), DOC.body, k)).toBe('v1');
    expect(check(DOC.signature, String(DOC.ts + 1), DOC.body, k)).toBeNull();
    expect(check(DOC.signature, String(DOC.ts), DOC.body, keys(['v1', SECRET]))).toBeNull();
    const body = Buffer.from(DOC.body);
    for (const at of [0, body.indexOf('command'), body.length - 1]) {
      const mutated = Buffer.from(body);
      mutated[at] = mutated[at]! ^ 0x01;
      expect(check(DOC.signature, String(DOC.ts), mutated, k)).toBeNull();
    }
    expect(check(DOC.signature, String(DOC.ts), DOC.body + '\n', k)).toBeNull();
  });

  it('bolt-js verifySlackRequest agrees on the documented vector (its clock pinned to the example)', () => {
    const opts = { signingSecret: DOC.secret, body: DOC.body, headers: { 'x-slack-signature': DOC.signature, 'x-slack-request-timestamp': DOC.ts }, nowMilliseconds: DOC.ts * 1000 };
    expect(() => verifySlackRequest(opts)).not.toThrow();
  });

  it('the documented slash command becomes command:<trigger_id>, type "/webhook-collect"', () => {
    const m = adapter.parseSignature(view([['x-slack-signature', DOC.signature], ['x-slack-request-timestamp', String(DOC.ts)]]));
    expect(adapter.envelope(Buffer.from(DOC.body), view([FORM_CT]), m)).toEqual({
      eventId: 'command:398738663015.47445629121.803a0bc887a14d10d2c447fce8b6703c',
      eventType: '/webhook-collect',
      objectId: 'G8PSS9T3V',
      objectVersion: null,
      providerCreatedAtMs: DOC.ts * 1000,
    });
    expect(adapter.parsePayload!(Buffer.from(DOC.body))).toMatchObject({ command: '/webhook-collect', text: '', trigger_id: '398738663015.47445629121.803a0bc887a14d10d2c447fce8b6703c', response_url: 'https://hooks.slack.com/commands/T1DC2JH3J/397700885554/96rGlfmibIGlgcZRskXaIFfN' });
  });
});

describe('slack: cross-checks with @slack/bolt', () => {
  const now = () => Math.floor(Date.now() / 1000);

  it.each([
    ['Events API JSON (multi-byte)', EVENT],
    ['slash command form (multi-byte, percent-encoded)', slash()],
    ['interaction payload form', interaction(BLOCK_ACTIONS)],
  ])('ours → bolt: verifySlackRequest accepts our signature on %s, and rejects a changed body or secret', (_name, body) => {
    const ts = now();
    const h = adapter.sign(body, SECRET, { timestamp: ts });
    const opts = { signingSecret: SECRET, body: body.toString('utf8'), headers: { 'x-slack-signature': h['x-slack-signature']!, 'x-slack-request-timestamp': Number(h['x-slack-request-timestamp']) } };
    expect(() => verifySlackRequest(opts)).not.toThrow();
    expect(isValidSlackRequest(opts)).toBe(true);
    expect(isValidSlackRequest({ ...opts, signingSecret: OLD_SECRET })).toBe(false);
    expect(isValidSlackRequest({ ...opts, body: opts.body.replace('1', '2') })).toBe(false);
    expect(isValidSlackRequest({ ...opts, headers: { ...opts.headers, 'x-slack-request-timestamp': ts - 1 } })).toBe(false);
  });

  it.each([
    ['Events API JSON (multi-byte)', EVENT],
    ['slash command form', slash()],
  ])('bolt → ours: a signature computed as bolt-js\'s tests compute it verifies on %s', (_name, body) => {
    const sig = theirs(SECRET, NOW, body.toString('utf8'));
    expect(sig).toBe(adapter.sign(body, SECRET, { timestamp: NOW })['x-slack-signature']);
    expect(check(sig, String(NOW), body, keys(['v1', SECRET]))).toBe('v1');
    expect(check(sig, String(NOW), body, keys(['v1', OLD_SECRET]))).toBeNull();
    const reserialised = body === EVENT ? Buffer.from(JSON.stringify(JSON.parse(EVENT.toString('utf8')))) : Buffer.from(body.toString('utf8').replaceAll('+', '%20'));
    expect(reserialised.equals(body)).toBe(false);
    expect(check(sig, String(NOW), reserialised, keys(['v1', SECRET]))).toBeNull();
  });

  it('bolt checks only the past side of the window; the pipeline bounds both (we expose the signed timestamp)', () => {
    const ts = now() + 3600;
    const body = '{"type":"event_callback"}';
    expect(isValidSlackRequest({ signingSecret: SECRET, body, headers: { 'x-slack-signature': theirs(SECRET, ts, body), 'x-slack-request-timestamp': ts } })).toBe(true);
    expect(adapter.defaultToleranceSeconds).toBe(300);
    expect(meta(ts).timestamp).toBe(ts);
  });
});

describe('slack: X-Slack-Signature / X-Slack-Request-Timestamp parsing', () => {
  const body = Buffer.from('{"type":"event_callback","event_id":"Ev1","event":{"type":"app_mention"}}');
  const good = hmac('sha256', Buffer.from(SECRET), [`v0:${NOW}:`, body]).toString('hex');

  it('upper-case hex is the same digest', () => {
    expect(check(`v0=${good.toUpperCase()}`, String(NOW), body, keys(['v1', SECRET]))).toBe('v1');
  });

  it('the timestamp is signed exactly as it arrived', () => {
    const padded = `0${NOW}`;
    const sig = `v0=${hmac('sha256', Buffer.from(SECRET), [`v0:${padded}:`, body]).toString('hex')}`;
    expect(check(sig, padded, body, keys(['v1', SECRET]))).toBe('v1');
    expect(check(sig, String(NOW), body, keys(['v1', SECRET]))).toBeNull();
    expect(check(`v0=${good}`, padded, body, keys(['v1', SECRET]))).toBeNull();
  });

  it('any trusted, non-retired secret version verifies (rotation)', () => {
    expect(check(`v0=${good}`, String(NOW), body, keys(['v2', OLD_SECRET], ['v1', SECRET]))).toBe('v1');
    expect(check(`v0=${good}`, String(NOW), body, keys(['v2', OLD_SECRET], ['v1', SECRET, NOW * 1000]))).toBeNull();
    expect(check(`v0=${good}`, String(NOW), body, keys(['v1', SECRET, NOW * 1000 + 1]))).toBe('v1');
  });

  const sig = `v0=${'a'.repeat(64)}`;
  it.each(expectedFirst<string, [string, string][], string>([
    ['no headers', [], 'missing_signature'],
    ['signature absent', [['x-slack-request-timestamp', String(NOW)]], 'missing_signature'],
    ['empty signature', [['x-slack-signature', ''], ['x-slack-request-timestamp', String(NOW)]], 'missing_signature'],
    ['another scheme (v1=)', [['x-slack-signature', `v1=${'a'.repeat(64)}`], ['x-slack-request-timestamp', String(NOW)]], 'missing_signature'],
    ['no "="', [['x-slack-signature', 'v0'], ['x-slack-request-timestamp', String(NOW)]], 'malformed_signature'],
    ['no version', [['x-slack-signature', `=${'a'.repeat(64)}`], ['x-slack-request-timestamp', String(NOW)]], 'malformed_signature'],
    ['not hex', [['x-slack-signature', `v0=${'g'.repeat(64)}`], ['x-slack-request-timestamp', String(NOW)]], 'malformed_signature'],
    ['short digest', [['x-slack-signature', `v0=${'a'.repeat(62)}`], ['x-slack-request-timestamp', String(NOW)]], 'malformed_signature'],
    ['long digest', [['x-slack-signature', `v0=${'a'.repeat(66)}`], ['x-slack-request-timestamp', String(NOW)]], 'malformed_signature'],
    ['empty digest', [['x-slack-signature', 'v0='], ['x-slack-request-timestamp', String(NOW)]], 'malformed_signature'],
    ['two signatures in one value', [['x-slack-signature', `${sig},${sig}`], ['x-slack-request-timestamp', String(NOW)]], 'malformed_signature'],
    ['timestamp absent', [['x-slack-signature', sig]], 'malformed_signature'],
    ['timestamp empty', [['x-slack-signature', sig], ['x-slack-request-timestamp', '']], 'malformed_signature'],
    ['timestamp not numeric', [['x-slack-signature', sig], ['x-slack-request-timestamp', '17e8']], 'malformed_signature'],
    ['timestamp negative', [['x-slack-signature', sig], ['x-slack-request-timestamp', '-1']], 'malformed_signature'],
    ['timestamp with a fraction', [['x-slack-signature', sig], ['x-slack-request-timestamp', `${NOW}.5`]], 'malformed_signature'],
    ['signature header twice', [['x-slack-signature', sig], ['X-Slack-Signature', sig], ['x-slack-request-timestamp', String(NOW)]], 'ambiguous_signature'],
    ['timestamp header twice', [['x-slack-signature', sig], ['x-slack-request-timestamp', String(NOW)], ['X-Slack-Request-Timestamp', String(NOW + 1)]], 'ambiguous_signature'],
  ]))('%s → %s', (_name, reason, pairs) => {
    expect(reasonOf(() => adapter.parseSignature(view(pairs)))).toBe(reason);
  });
});

describe('slack: secrets', () => {
  it('the signing secret is used as-is (UTF-8 bytes)', () => {
    expect(adapter.prepareSecret(DOC.secret).equals(Buffer.from(DOC.secret, 'utf8'))).toBe(true);
  });

  it.each([
    ['empty', ''],
    ['trailing newline', `${SECRET}\n`],
    ['leading space', ` ${SECRET}`],
    ['a bot token', 'xoxb-1234-5678-abcdef'],
    ['a user token', 'xoxp-1234-5678-abcdef'],
    ['an app-level token', 'xapp-1-A0001-1234-abcdef'],
  ])('refuses %s', (_name, value) => {
    expect(() => adapter.prepareSecret(value)).toThrow();
  });
});

describe('slack: handshake (after verification and freshness)', () => {
  const hs = (body: string, ct: [string, string] = JSON_CT) => adapter.handshake!(Buffer.from(body), view([ct]), meta());

  it('url_verification → 200 text/plain with the challenge', () => {
    const body = '{"token":"Jhj5dZrVaK7ZwHHjRyZWjbDl","challenge":"3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P","type":"url_verification"}';
    expect(hs(body)).toEqual({ status: 200, contentType: 'text/plain', body: '3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P' });
  });

  it('an event is not a handshake, even when its text mentions url_verification', () => {
    expect(hs(EVENT.toString('utf8'))).toBeNull();
    expect(hs('{"type":"event_callback","event_id":"Ev1","event":{"type":"message","text":"type url_verification"}}')).toBeNull();
  });

  it('url_verification without a usable challenge → malformed_payload', () => {
    expect(reasonOf(() => hs('{"type":"url_verification"}'))).toBe('malformed_payload');
    expect(reasonOf(() => hs('{"type":"url_verification","challenge":42}'))).toBe('malformed_payload');
    expect(reasonOf(() => hs('{"type":"url_verification","challenge":""}'))).toBe('malformed_payload');
  });

  it('a signed ssl_check=1 → empty 200; a slash command or interaction is not a handshake', () => {
    expect(hs('ssl_check=1&token=x', FORM_CT)).toEqual({ status: 200, contentType: 'text/plain', body: '' });
    expect(hs(slash({ text: 'ssl_check=1' }).toString(), FORM_CT)).toBeNull();
    expect(hs(interaction(BLOCK_ACTIONS).toString(), FORM_CT)).toBeNull();
  });
});

describe('slack: envelope (verified body → logical event)', () => {
  const env = (body: Buffer | string, ct: [string, string] = JSON_CT) => adapter.envelope(Buffer.from(body), view([ct]), meta());

  it('Events API: event_id, the inner event.type, the conversation, event_ts, event_time', () => {
    expect(env(EVENT)).toEqual({ eventId: 'Ev123ABC456', eventType: 'app_mention', objectId: 'C123ABC456', objectVersion: '1515449522000016', providerCreatedAtMs: 1515449522_000 });
  });

  it.each([
    ['reaction_added (item.channel)', { type: 'reaction_added', user: 'U1', reaction: 'thumbsup', item: { type: 'message', channel: 'C9', ts: '1360782400.498405' }, event_ts: '1360782804.083113' }, 'C9', '1360782804.083113'],
    ['channel_rename (channel object)', { type: 'channel_rename', channel: { id: 'C8', name: 'new', created: 1360782804 }, event_ts: '1360782804.000001' }, 'C8', '1360782804.000001'],
    ['file_shared (channel_id)', { type: 'file_shared', file_id: 'F1', user_id: 'U1', channel_id: 'C7', event_ts: '1361482916.000004' }, 'C7', '1361482916.000004'],
    ['user_change (user object)', { type: 'user_change', user: { id: 'U6', name: 'x' }, event_ts: '1361482916.000005' }, 'U6', '1361482916.000005'],
    ['team_rename (nothing)', { type: 'team_rename', name: 'New', ts: '1361482916.000006' }, null, '1361482916.000006'],
  ])('object id of %s', (_name, event, objectId, version) => {
    const body = JSON.stringify({ type: 'event_callback', event_id: 'Ev9', event });
    expect(env(body)).toMatchObject({ eventId: 'Ev9', eventType: event.type, objectId, objectVersion: version, providerCreatedAtMs: Math.round(Number(version) * 1000) });
  });

  it('app_rate_limited (no event_id): key per team and minute', () => {
    const body = '{"token":"x","type":"app_rate_limited","team_id":"T123456","minute_rate_limited":1518467820,"api_app_id":"A123456"}';
    expect(env(body)).toEqual({ eventId: 'app_rate_limited:T123456:1518467820', eventType: 'app_rate_limited', objectId: 'T123456', objectVersion: null, providerCreatedAtMs: 1518467820_000 });
  });

  it.each([
    ['not JSON', 'token=x', 'malformed_payload'],
    ['a JSON array', '[{"event_id":"Ev1"}]', 'malformed_payload'],
    ['no event_id', '{"type":"event_callback","event":{"type":"app_mention"}}', 'missing_event_id'],
    ['empty event_id', '{"type":"event_callback","event_id":"","event":{"type":"app_mention"}}', 'missing_event_id'],
    ['no event.type', '{"type":"event_callback","event_id":"Ev1","event":{"user":"U1"}}', 'missing_event_type'],
    ['app_rate_limited without team', '{"type":"app_rate_limited","minute_rate_limited":1518467820}', 'missing_event_id'],
  ])('Events API %s → %s', (_name, body, reason) => {
    expect(reasonOf(() => env(body))).toBe(reason);
  });

  it('slash command: command:<trigger_id>, type = the command, object = channel_id, time = the signed timestamp', () => {
    expect(env(slash(), FORM_CT)).toEqual({ eventId: 'command:13345224609.738474920.8088930838d88f008e0', eventType: '/deploy', objectId: 'C2147483705', objectVersion: null, providerCreatedAtMs: NOW * 1000 });
  });

  it('interaction with a trigger_id: interaction:<trigger_id>, payload.type, channel, action_ts', () => {
    expect(env(interaction(BLOCK_ACTIONS), FORM_CT)).toEqual({
      eventId: 'interaction:12321423423.333649436676.d8c1bb837935619ccad0f624c448ffb3', eventType: 'block_actions', objectId: 'C0001',
      objectVersion: '1548426417.840180', providerCreatedAtMs: 1548426417_840,
    });
    const modal = { type: 'view_submission', trigger_id: '1.2.abc', view: { id: 'V42', hash: 'h' }, user: { id: 'U1' } };
    expect(env(interaction(modal), FORM_CT)).toEqual({ eventId: 'interaction:1.2.abc', eventType: 'view_submission', objectId: 'V42', objectVersion: null, providerCreatedAtMs: NOW * 1000 });
  });

  it('interaction without a trigger_id (view_closed): keyed by the SHA-256 of the exact bytes — a replay is the same key', () => {
    const body = interaction(VIEW_CLOSED);
    const e = env(body, FORM_CT);
    expect(e).toMatchObject({ eventId: `interaction:sha256:${createHash('sha256').update(body).digest('hex')}`, eventType: 'view_closed', objectId: 'V0001' });
    expect(env(body, FORM_CT).eventId).toBe(e.eventId);
    expect(env(interaction({ ...VIEW_CLOSED, is_cleared: true }), FORM_CT).eventId).not.toBe(e.eventId);
  });

  it.each([
    ['neither command nor payload', 'token=x&team_id=T1', 'malformed_payload'],
    ['payload not JSON', 'payload=%7Bnope', 'malformed_payload'],
    ['payload a JSON array', `payload=${encodeURIComponent('[1]')}`, 'malformed_payload'],
    ['payload without type', `payload=${encodeURIComponent('{"trigger_id":"1.2.3"}')}`, 'missing_event_type'],
    ['payload twice', `payload=${encodeURIComponent(JSON.stringify(BLOCK_ACTIONS))}&payload=${encodeURIComponent('{"type":"x"}')}`, 'malformed_payload'],
    ['command twice', `${slash().toString()}&command=%2Fother`, 'malformed_payload'],
    ['slash command without trigger_id', slash({ trigger_id: '' }).toString(), 'missing_event_id'],
    ['slash command with an empty command', slash({ command: '' }).toString(), 'missing_event_type'],
  ])('form %s → %s', (_name, body, reason) => {
    expect(reasonOf(() => env(body, FORM_CT))).toBe(reason);
  });
});

describe('slack: parsePayload (stored bytes → the handler\'s event.payload) and the ack', () => {
  it('Events API → the JSON; slash command → its fields; interaction → the interaction object', () => {
    expect(adapter.parsePayload!(EVENT)).toEqual(JSON.parse(EVENT.toString('utf8')));
    expect(adapter.parsePayload!(slash())).toMatchObject({ command: '/deploy', text: 'prod café ☕', channel_id: 'C2147483705' });
    expect(adapter.parsePayload!(interaction(BLOCK_ACTIONS))).toEqual(BLOCK_ACTIONS);
    expect(() => adapter.parsePayload!(Buffer.from('payload=%7Bnope'))).toThrow(SyntaxError);
    expect(() => adapter.parsePayload!(Buffer.from('{nope'))).toThrow(SyntaxError);
  });

  it('slash commands and interactions (form bodies) are acked with an empty 200; Events API gets the default JSON (null)', () => {
    const one = [{ eventId: 'command:1.2.3', inboxId: 'i1', duplicate: false, ignored: false }];
    const form = view([['content-type', 'application/x-www-form-urlencoded']]);
    expect(adapter.acceptedReply!(one, form)).toEqual({ status: 200, contentType: 'text/plain', body: '' });
    expect(adapter.acceptedReply!([{ ...one[0]!, ignored: true, inboxId: null }], form)).toEqual({ status: 200, contentType: 'text/plain', body: '' });
    expect(adapter.acceptedReply!(one, view([['content-type', 'application/json; charset=utf-8']]))).toBeNull();
  });
});

describeEachStore('slack over HTTP', (kind) => {
  let app: TestApp;
  beforeAll(async () => {
    app = await startTestApp(kind, { endpoints: [{ id: 'slack-app', provider: 'slack', secrets: [{ version: 'v2', value: SECRET }, { version: 'v1', value: OLD_SECRET }] }] });
  });
  afterAll(async () => {
    await app?.stop();
  });

  const now = () => Math.floor(Date.now() / 1000);
  const send = (body: Buffer, headers: Record<string, string>) => post(`${app.url}/webhooks/slack-app`, body, headers);
  const signed = (body: Buffer, ct: string, opts: { secret?: string; timestamp?: number; extra?: Record<string, string> } = {}) =>
    ({ 'content-type': ct, ...adapter.sign(body, opts.secret ?? SECRET, { timestamp: opts.timestamp ?? now() }), ...opts.extra });

  async function rowsFor(key: string) {
    const rows = await Promise.all((await app.store.listInboxIds()).map((id) => app.store.getInbox(id)));
    return rows.filter((r) => r !== null && r.endpointId === 'slack-app' && r.providerEventId === key);
  }

  const eventBody = (id: string) => Buffer.from(EVENT.toString('utf8').replace('Ev123ABC456', id));

  describe('url_verification', () => {
    const challenge = () => `ch${Math.random().toString(36).slice(2)}`;
    const body = (c: string) => Buffer.from(`{"token":"Jhj5dZrVaK7ZwHHjRyZWjbDl","challenge":"${c}","type":"url_verification"}`);

    it('is answered 200 text/plain with the challenge, and creates no row', async () => {
      const before = await app.store.countRows();
      const c = challenge();
      const r = await send(body(c), signed(body(c), 'application/json'));
      expect(r.status, r.text).toBe(200);
      expect(r.headers['content-type']).toBe('text/plain');
      expect(r.text).toBe(c);
      expect(await app.store.countRows()).toEqual(before);
    });

    it('with a bad signature → 401 invalid_signature, no challenge echoed, no row', async () => {
      const before = await app.store.countRows();
      const c = challenge();
      const r = await send(body(c), signed(body(c), 'application/json', { secret: 'not-the-signing-secret' }));
      expect(r.status).toBe(401);
      expect(r.json()).toEqual({ error: 'invalid_signature' });
      expect(r.text).not.toContain(c);
      expect(await app.store.countRows()).toEqual(before);
    });

    it('stale (signed 10 minutes ago) → 401 stale_timestamp, no challenge echoed', async () => {
      const c = challenge();
      const r = await send(body(c), signed(body(c), 'application/json', { timestamp: now() - 600 }));
      expect(r.status).toBe(401);
      expect(r.json().error).toBe('stale_timestamp');
      expect(r.text).not.toContain(c);
    });
  });

  describe('form-encoded deliveries', () => {
    it('a slash command is accepted: empty 200, one row command:<trigger_id> of type /deploy; a replay is the same row', async () => {
      const trigger = `${now()}.738474920.${Math.random().toString(16).slice(2)}`;
      const body = slash({ trigger_id: trigger });
      const before = await app.store.countRows();
      const r = await send(body, signed(body, 'application/x-www-form-urlencoded'));
      expect(r.status, r.text).toBe(200);
      expect(r.text).toBe('');
      expect(await app.store.countRows()).toEqual({ inbox: before.inbox + 1, outbox: before.outbox + 1, payload: before.payload + 1 });
      const rows = await rowsFor(`command:${trigger}`);
      expect(rows).toHaveLength(1);
      expect(rows[0]).toMatchObject({ provider: 'slack', eventType: '/deploy', objectId: 'C2147483705', matchedSecretVersion: 'v2', status: 'PENDING' });
      // The stored bytes are exactly what arrived, and parse into the command's fields for the handler.
      const plain = await storedBytes(app, rows[0]!, { provider: 'slack', endpointId: 'slack-app', providerEventId: `command:${trigger}` });
      expect(plain.equals(body)).toBe(true);
      expect(adapter.parsePayload!(plain)).toMatchObject({ command: '/deploy', text: 'prod café ☕', trigger_id: trigger });
      // The same request replayed (re-signed a moment later): acknowledged, still one row.
      const again = await send(body, signed(body, 'application/x-www-form-urlencoded', { secret: OLD_SECRET }));
      expect(again.status).toBe(200);
      expect(again.text).toBe('');
      expect(await rowsFor(`command:${trigger}`)).toHaveLength(1);
    });

    it('an interaction payload is accepted as interaction:<trigger_id> of its type', async () => {
      const trigger = `${now()}.333649436676.${Math.random().toString(16).slice(2)}`;
      const body = interaction({ ...BLOCK_ACTIONS, trigger_id: trigger });
      const r = await send(body, signed(body, 'application/x-www-form-urlencoded'));
      expect(r.status, r.text).toBe(200);
      expect(r.text).toBe('');
      expect(await rowsFor(`interaction:${trigger}`)).toMatchObject([{ eventType: 'block_actions', objectId: 'C0001', objectVersion: '1548426417.840180' }]);
    });

    it('a tampered slash command → 401 invalid_signature', async () => {
      const trigger = `${now()}.1.${Math.random().toString(16).slice(2)}`;
      const body = slash({ trigger_id: trigger });
      const h = signed(body, 'application/x-www-form-urlencoded');
      const r = await send(Buffer.from(body.toString().replace('%2Fdeploy', '%2Fdelete')), h);
      expect(r.status).toBe(401);
      expect(r.json()).toEqual({ error: 'invalid_signature' });
      expect(await rowsFor(`command:${trigger}`)).toHaveLength(0);
    });

    it('ssl_check: signed → empty 200; unsigned, as Slack sends it (bolt-js #1397) → empty 200; neither stores anything', async () => {
      const before = await app.store.countRows();
      const body = Buffer.from('ssl_check=1&token=gIkuvaNzQIHg97ATvDxqgjtO');
      const r = await send(body, signed(body, 'application/x-www-form-urlencoded'));
      expect(r.status).toBe(200);
      expect(r.text).toBe('');
      const unsigned = await send(body, { 'content-type': 'application/x-www-form-urlencoded' });
      expect(unsigned.status).toBe(200);
      expect(unsigned.text).toBe('');
      expect(await app.store.countRows()).toEqual(before);
    });

    it('the unsigned probe is only its exact shape: a smuggled command, another value, a bad signature → verified as usual (401)', async () => {
      const before = await app.store.countRows();
      const form = { 'content-type': 'application/x-www-form-urlencoded' };
      for (const body of ['ssl_check=1&command=%2Fdeploy&trigger_id=1.2.3&text=prod', 'ssl_check=true', 'ssl_check=1&ssl_check=1', `ssl_check=1&token=${'x'.repeat(300)}`]) {
        const r = await send(Buffer.from(body), form);
        expect(r.status, body).toBe(401);
        expect(r.json().error, body).toBe('missing_signature');
      }
      // With a signature header it is never a probe: a wrong signature is refused.
      const body = Buffer.from('ssl_check=1&token=x');
      const r = await send(body, { ...form, 'x-slack-request-timestamp': String(now()), 'x-slack-signature': `v0=${'0'.repeat(64)}` });
      expect(r.status).toBe(401);
      expect(r.json().error).toBe('invalid_signature');
      expect(await app.store.countRows()).toEqual(before);
    });
  });

  describe('Events API retries', () => {
    it('a retry (X-Slack-Retry-Num / X-Slack-Retry-Reason) of the same event_id → duplicate, one row', async () => {
      const id = `Ev${now()}${Math.random().toString(36).slice(2, 8).toUpperCase()}`;
      const body = eventBody(id);
      const first = await send(body, signed(body, 'application/json', { timestamp: now() - 60 }));
      expect(first.status, first.text).toBe(200);
      expect(first.json()).toEqual({ inbox_id: expect.any(String), duplicate: false });
      const retry = await send(body, signed(body, 'application/json', { extra: { 'x-slack-retry-num': '1', 'x-slack-retry-reason': 'http_timeout' } }));
      expect(retry.status, retry.text).toBe(200);
      expect(retry.json()).toEqual({ inbox_id: first.json().inbox_id, duplicate: true });
      expect(await rowsFor(id)).toMatchObject([{ inboxId: first.json().inbox_id, eventType: 'app_mention', objectId: 'C123ABC456' }]);
    });

    it('a retry whose first attempt never arrived is stored (the unsigned retry headers are never a reason to drop)', async () => {
      const id = `Ev${now()}${Math.random().toString(36).slice(2, 8).toUpperCase()}`;
      const body = eventBody(id);
      const r = await send(body, signed(body, 'application/json', { extra: { 'x-slack-retry-num': '3', 'x-slack-retry-reason': 'http_error' } }));
      expect(r.status, r.text).toBe(200);
      expect(r.json()).toEqual({ inbox_id: expect.any(String), duplicate: false });
      expect(await rowsFor(id)).toHaveLength(1);
    });
  });
});
