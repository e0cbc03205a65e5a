import { Paddle } from '@paddle/paddle-node-sdk';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseConfig } from '../../src/config/schema.js';
import { hmac, type TrustedKey } from '../../src/crypto/hmac.js';
import { ConfigError } from '../../src/errors.js';
import type { ProviderAdapter } from '../../src/providers/contract.js';
import { PROVIDERS } from '../../src/providers/registry.js';
import { expectedFirst, reasonOf, thrownBy, trustedKeys, verifyWith, view } from '../helpers/adapter.js';
import { startTestApp, type TestApp } from '../helpers/app.js';
import { post } from '../helpers/http.js';
import { describeEachStore } from '../helpers/stores.js';

const adapter: ProviderAdapter = PROVIDERS.paddle!(undefined, 'endpoints[0].options');
const paddle = new Paddle('pdl_sdbx_apikey_not_used_for_webhooks');

const HEADER = 'paddle-signature';
const SECRET = 'pdl_ntfset_01hsdn8d43dt7mezr1ef2jtbaw_currentSecretForWebhookInbox';
const OLD_SECRET = 'pdl_ntfset_01hsdn8d43dt7mezr1ef2jtbaw_previousSecretForWebhookInbox';
const NOW = 1_700_000_000;

const keys = (...entries: [string, string, number?][]): TrustedKey[] => trustedKeys(adapter, ...entries);
/** Keys built directly (the SDK suite's secret "VALID_SECRET" is not a pdl_ntfset_ key, which prepareSecret does not require). */
const rawKey = (version: string, secret: string): TrustedKey => ({ version, key: Buffer.from(secret, 'utf8') });
const check = (header: string, body: Buffer | string, ks: TrustedKey[]) => verifyWith(adapter, [[HEADER, header]], body, ks, NOW * 1000);
const hex = (secret: string, ts: number | string, body: Buffer | string) => hmac('sha256', Buffer.from(secret, 'utf8'), [`${ts}:`, body]).toString('hex');

/** A transaction.completed notification: spacing, `1.0`, a `\u00e9` escape and multi-byte text. */
const EVENT = Buffer.from('{\n  "event_id": "evt_01hv8wptq8987qeep44cyrewp9",\n  "event_type": "transaction.completed",\n  "occurred_at": "2024-04-12T10:18:49.621022Z",\n  "notification_id": "ntf_01hv8wpts6n6qyzbkyt7w3wxp5",\n  "data": {"id": "txn_01hv8wnw7ej3vdcvwkgvyk1j4f", "status": "completed", "amount": 1.0, "note": "caf\\u00e9 ☕ 東京", "created_at": "2024-04-12T10:17:51.541306Z", "updated_at": "2024-04-12T10:18:49.551474Z"}\n}\n');

describe('paddle: published vectors', () => {
  it('PaddleHQ/paddle-go-sdk example_webhook_verifier_test.go (price.created, real pdl_ntfset_ key)', () => {
    const body = '{"data":{"id":"pri_01hsdn96k2hxjzsq5yerecdj9j","name":null,"status":"active","quantity":{"maximum":999999,"minimum":1},"tax_mode":"account_setting","product_id":"pro_01hsdn8qp7yydry3x1yeg6a9rv","unit_price":{"amount":"1000","currency_code":"USD"},"custom_data":null,"description":"testing","import_meta":null,"trial_period":null,"billing_cycle":{"interval":"month","frequency":1},"unit_price_overrides":[]},"event_id":"evt_01hsdn97563968dy0szkmgjwh3","event_type":"price.created","occurred_at":"2024-03-20T10:07:35.590857Z","notification_id":"ntf_01hsdn977e920kbgzt6r6c9rqc"}';
    const secret = 'pdl_ntfset_01hsdn8d43dt7mezr1ef2jtbaw_hKkRiCGyyRhbFwIUuqiTBgI7gnWoV0Gr';
    const header = 'ts=1710929255;h1=6c05ef8fa83c44d751be6d259ec955ce5638e2c54095bf128e408e2fce1589c8';
    expect(adapter.sign(Buffer.from(body), secret, { timestamp: 1710929255 })).toEqual({ [HEADER]: header });
    expect(verifyWith(adapter, [['Paddle-Signature', header]], body, keys(['v1', secret]))).toBe('v1');
    expect(adapter.parseSignature(view([[HEADER, header]])).timestamp).toBe(1710929255);
    expect(adapter.envelope(Buffer.from(body), view([]), { timestamp: 1710929255 })).toEqual({
      eventId: 'evt_01hsdn97563968dy0szkmgjwh3',
      eventType: 'price.created',
      objectId: 'pri_01hsdn96k2hxjzsq5yerecdj9j',
      objectVersion: null,
      providerCreatedAtMs: Date.parse('2024-03-20T10:07:35.590Z'),
    });
    expect(verifyWith(adapter, [[HEADER, header]], `${body} `, keys(['v1', secret]))).toBeNull();
  });

  // PaddleHQ/paddle-node-sdk src/__tests__/notifications/webhooks-validator{,.node,.edge}.test.ts (secret "VALID_SECRET").
  it.each([
    ['Valid signature', '{"data": ["1", "2"]}', 'ts=1698796800;h1=a300428748dce5c70e4da19bffd60769591ea969c99dea3105d0ec9612cf43f9', 'VALID_SECRET', 'v1'],
    ['Valid signature with multiple hashes (and an h2 to ignore)', '{"data": "value"}', 'ts=1698796800;h1=28981e941fae76e53db32f3d2a83cb69db41476595e84e1970a1b5d98f62b261;h1=28981e941fae76e53db32f3d2a83cb69db41476595e84e1970a1b5d98f62b261;h2=RANDOM_HASH', 'VALID_SECRET', 'v1'],
    ['Invalid secret', '{"data": ["1", "2"]}', 'ts=1698796800;h1=a300428748dce5c70e4da19bffd60769591ea969c99dea3105d0ec9612cf43f9', 'INVALID_VALID_SECRET', null],
    ['Invalid timestamp (ts is signed)', '{"data": ["1", "2"]}', 'ts=9876;h1=a300428748dce5c70e4da19bffd60769591ea969c99dea3105d0ec9612cf43f9', 'VALID_SECRET', null],
    ['Invalid data - has more space', '{ "data": [ "1", "2" ]}', 'ts=1698796800;h1=a300428748dce5c70e4da19bffd60769591ea969c99dea3105d0ec9612cf43f9', 'VALID_SECRET', null],
  ])('paddle-node-sdk vector: %s', (_name, body, header, secret, expected) => {
    expect(verifyWith(adapter, [[HEADER, header]], body, [rawKey('v1', secret)])).toBe(expected);
  });

  it('paddle-node-sdk vector "Invalid signature" (h1=invalid_signature) is malformed; its header-shape cases are refused too', () => {
    expect(reasonOf(() => adapter.parseSignature(view([[HEADER, 'ts=1234;h1=invalid_signature']])))).toBe('malformed_signature');
    expect(reasonOf(() => adapter.parseSignature(view([[HEADER, 'invalid_header']])))).toBe('malformed_signature');
    expect(reasonOf(() => adapter.parseSignature(view([[HEADER, 'h1=invalid_header']])))).toBe('malformed_signature');
    expect(reasonOf(() => adapter.parseSignature(view([[HEADER, 'ts=1234;h2=invalid_header']])))).toBe('missing_signature');
  });
});

describe('paddle: cross-checks with @paddle/paddle-node-sdk (webhooks.unmarshal / isSignatureValid; the SDK has no signer)', () => {
  it('ours → SDK: unmarshal accepts our signature (multi-byte body) and yields the same event id, type and object', async () => {
    // A complete price.created (the SDK builds typed entities, so the data must be whole): the paddle-go-sdk example, pretty-printed, multi-byte description.
    const body = '{\n  "data": {"id": "pri_01hsdn96k2hxjzsq5yerecdj9j", "name": null, "status": "active", "quantity": {"maximum": 999999, "minimum": 1}, "tax_mode": "account_setting", "product_id": "pro_01hsdn8qp7yydry3x1yeg6a9rv", "unit_price": {"amount": "1000", "currency_code": "USD"}, "custom_data": null, "description": "caf\\u00e9 ☕ 東京", "import_meta": null, "trial_period": null, "billing_cycle": {"interval": "month", "frequency": 1}, "unit_price_overrides": [], "created_at": "2024-03-20T10:07:35.000000Z", "updated_at": "2024-03-20T10:07:35.000000Z"},\n  "event_id": "evt_01hsdn97563968dy0szkmgjwh3",\n  "event_type": "price.created",\n  "occurred_at": "2024-03-20T10:07:35.590857Z",\n  "notification_id": "ntf_01hsdn977e920kbgzt6r6c9rqc"\n}\n';
    const ts = Math.floor(Date.now() / 1000);
    const header = adapter.sign(Buffer.from(body), SECRET, { timestamp: ts })[HEADER]!;
    const event = await paddle.webhooks.unmarshal(body, SECRET, header);
    const ours = adapter.envelope(Buffer.from(body), view([]), adapter.parseSignature(view([[HEADER, header]])));
    expect(event.eventId).toBe(ours.eventId);
    expect(event.eventType).toBe(ours.eventType);
    expect((event.data as { id: string; description: string }).id).toBe(ours.objectId);
    expect((event.data as { description: string }).description).toBe('café ☕ 東京');
    expect(event.notificationId).toBe('ntf_01hsdn977e920kbgzt6r6c9rqc');
    expect(ours.eventId).not.toBe(event.notificationId);
  });

  it('ours → SDK: tampered body, wrong secret and a re-serialised body are refused by both', async () => {
    const ts = Math.floor(Date.now() / 1000);
    const header = adapter.sign(EVENT, SECRET, { timestamp: ts })[HEADER]!;
    const tampered = EVENT.toString('utf8').replace('1.0', '2.0');
    const reserialised = JSON.stringify(JSON.parse(EVENT.toString('utf8')));
    expect(reserialised).not.toBe(EVENT.toString('utf8'));
    for (const [body, secret] of [[tampered, SECRET], [EVENT.toString('utf8'), OLD_SECRET], [reserialised, SECRET]] as const) {
      expect(await paddle.webhooks.isSignatureValid(body, secret, header)).toBe(false);
      expect(verifyWith(adapter, [[HEADER, header]], body, keys(['v1', secret]), ts * 1000)).toBeNull();
    }
    await expect(paddle.webhooks.unmarshal(tampered, SECRET, header)).rejects.toThrow(/signature verification failed/);
  });

  it('SDK → ours: headers the SDK accepts (its own suite, generated by its implementation) verify here too', async () => {
    // isSignatureValid checks "now ≤ ts + 5": sign for now to exercise the SDK's acceptance.
    const ts = Math.floor(Date.now() / 1000);
    for (const body of ['{"data": ["1", "2"]}', EVENT.toString('utf8')]) {
      const header = `ts=${ts};h1=${hex('VALID_SECRET', ts, body)}`;
      expect(await paddle.webhooks.isSignatureValid(body, 'VALID_SECRET', header)).toBe(true);
      expect(verifyWith(adapter, [[HEADER, header]], body, [rawKey('v1', 'VALID_SECRET')])).toBe('v1');
    }
  });

  it('several h1 (a secret change): we accept any matching h1; the SDK keeps only the LAST h1 — the bug we do not copy', async () => {
    const ts = Math.floor(Date.now() / 1000);
    const body = EVENT.toString('utf8');
    const header = `ts=${ts};h1=${hex(SECRET, ts, body)};h1=${hex(OLD_SECRET, ts, body)}`;
    // A receiver that has only the NEW secret: the SDK reads the last h1 (old secret's) and refuses.
    expect(await paddle.webhooks.isSignatureValid(body, SECRET, header)).toBe(false);
    expect(await paddle.webhooks.isSignatureValid(body, OLD_SECRET, header)).toBe(true);
    expect(verifyWith(adapter, [[HEADER, header]], body, keys(['v2', SECRET]), ts * 1000)).toBe('v2');
    expect(verifyWith(adapter, [[HEADER, header]], body, keys(['v1', OLD_SECRET]), ts * 1000)).toBe('v1');
  });

  it('the SDK window is 5 s and past-only (a ts one hour ahead passes it); ours is ±300 s, enforced both ways by the pipeline', async () => {
    const future = Math.floor(Date.now() / 1000) + 3600;
    const body = EVENT.toString('utf8');
    expect(await paddle.webhooks.isSignatureValid(body, SECRET, `ts=${future};h1=${hex(SECRET, future, body)}`)).toBe(true);
    const tenSecondsAgo = Math.floor(Date.now() / 1000) - 10;
    expect(await paddle.webhooks.isSignatureValid(body, SECRET, `ts=${tenSecondsAgo};h1=${hex(SECRET, tenSecondsAgo, body)}`)).toBe(false);
    expect(adapter.defaultToleranceSeconds).toBe(300);
  });
});

describe('paddle: Paddle-Signature parsing', () => {
  const body = Buffer.from('{"event_id":"evt_1","event_type":"transaction.paid"}');
  const good = hex(SECRET, NOW, body);
  const old = hex(OLD_SECRET, NOW, body);

  it('several h1: any one matching any trusted (non-retired) key verifies, in any order', () => {
    const k = keys(['v2', SECRET], ['v1', OLD_SECRET]);
    expect(check(`ts=${NOW};h1=${good};h1=${old}`, body, k)).toBe('v2');
    expect(check(`ts=${NOW};h1=${old};h1=${good}`, body, k)).toBe('v2');
    expect(check(`ts=${NOW};h1=${old};h1=${good}`, body, keys(['v1', OLD_SECRET]))).toBe('v1');
    expect(check(`ts=${NOW};h1=${'0'.repeat(64)};h1=${good}`, body, keys(['v2', SECRET]))).toBe('v2');
    expect(check(`ts=${NOW};h1=${'0'.repeat(64)};h1=${'f'.repeat(64)}`, body, k)).toBeNull();
    expect(check(`ts=${NOW};h1=${good}`, body, keys(['v2', SECRET, NOW * 1000], ['v1', OLD_SECRET]))).toBeNull();
  });

  it('ts is signed: another ts with the same h1 fails; order of items and spaces around them do not matter', () => {
    expect(check(`ts=${NOW + 1};h1=${good}`, body, keys(['v1', SECRET]))).toBeNull();
    expect(check(`h1=${good};ts=${NOW}`, body, keys(['v1', SECRET]))).toBe('v1');
    expect(check(` ts=${NOW} ; h1=${good.toUpperCase()} `, body, keys(['v1', SECRET]))).toBe('v1');
    expect(adapter.parseSignature(view([[HEADER, `ts=${NOW};h1=${good}`]])).timestamp).toBe(NOW);
  });

  it('other schemes (h2=…) are ignored, even when they are not hex', () => {
    expect(check(`ts=${NOW};h2=not-hex;h1=${good}`, body, keys(['v1', SECRET]))).toBe('v1');
    expect(reasonOf(() => adapter.parseSignature(view([[HEADER, `ts=${NOW};h2=${good}`]])))).toBe('missing_signature');
  });

  it.each(expectedFirst([
    ['absent header', null, 'missing_signature'],
    ['empty header', '', 'missing_signature'],
    ['no h1', `ts=${NOW}`, 'missing_signature'],
    ['no ts', `h1=${'a'.repeat(64)}`, 'malformed_signature'],
    ['non-numeric ts', `ts=17e8;h1=${'a'.repeat(64)}`, 'malformed_signature'],
    ['negative ts', `ts=-1;h1=${'a'.repeat(64)}`, 'malformed_signature'],
    ['empty ts', `ts=;h1=${'a'.repeat(64)}`, 'malformed_signature'],
    ['two ts', `ts=${NOW};ts=${NOW + 1};h1=${'a'.repeat(64)}`, 'ambiguous_signature'],
    ['item without "="', `ts=${NOW};h1`, 'malformed_signature'],
    ['trailing ";"', `ts=${NOW};h1=${'a'.repeat(64)};`, 'malformed_signature'],
    ['Stripe-style "," separator', `ts=${NOW},h1=${'a'.repeat(64)}`, 'malformed_signature'],
    ['malformed hex', `ts=${NOW};h1=${'g'.repeat(64)}`, 'malformed_signature'],
    ['short digest', `ts=${NOW};h1=${'a'.repeat(62)}`, 'malformed_signature'],
    ['long digest', `ts=${NOW};h1=${'a'.repeat(66)}`, 'malformed_signature'],
    ['one good and one malformed h1', `ts=${NOW};h1=${'a'.repeat(64)};h1=xyz`, 'malformed_signature'],
  ]))('%s → %s', (_name, reason, header) => {
    const pairs: [string, string][] = header === null ? [] : [[HEADER, header]];
    expect(reasonOf(() => adapter.parseSignature(view(pairs)))).toBe(reason);
  });

  it('the header sent twice is ambiguous, never joined', () => {
    const h = `ts=${NOW};h1=${good}`;
    expect(reasonOf(() => adapter.parseSignature(view([[HEADER, h], ['Paddle-Signature', h]])))).toBe('ambiguous_signature');
  });

  it('one changed byte, wrong secret', () => {
    const mutated = Buffer.from(body);
    mutated.writeUInt8(mutated.readUInt8(5) ^ 0x01, 5);
    expect(check(`ts=${NOW};h1=${good}`, mutated, keys(['v1', SECRET]))).toBeNull();
    expect(check(`ts=${NOW};h1=${good}`, body, keys(['v1', OLD_SECRET]))).toBeNull();
  });
});

describe('paddle: secrets and options', () => {
  it('the secret key is used as-is (UTF-8), not decoded; an API key is refused', () => {
    expect(adapter.prepareSecret(SECRET).equals(Buffer.from(SECRET, 'utf8'))).toBe(true);
    expect(() => adapter.prepareSecret('pdl_live_apikey_01gtgztp8fn0bj5fxcxzq8b0fr_xyz')).toThrow(/API key/);
    expect(() => adapter.prepareSecret('pdl_sdbx_apikey_01gtgztp8fn0bj5fxcxzq8b0fr_xyz')).toThrow(/API key/);
    expect(() => adapter.prepareSecret('')).toThrow(/empty/);
  });

  it('takes no options: any key is a ConfigError naming it', () => {
    expect(thrownBy(() => PROVIDERS.paddle!({ tolerance: 5 }, 'endpoints[4].options'), ConfigError).path).toBe('endpoints[4].options.tolerance');
  });

  it('toleranceSeconds on the endpoint overrides the 300 s default', () => {
    const doc = {
      database: 'sqlite::memory:',
      payloadKeys: { current: 'k1', keys: { k1: Buffer.alloc(32, 7).toString('base64') } },
      endpoints: [{ id: 'pd', provider: 'paddle', secrets: [{ version: 'v1', value: SECRET }], toleranceSeconds: 600 }],
    };
    expect(parseConfig(doc, {}).endpoints[0]!.toleranceSeconds).toBe(600);
  });
});

describe('paddle: envelope', () => {
  it('event_id (not notification_id), event_type, data.id, data.updated_at, occurred_at', () => {
    expect(adapter.envelope(EVENT, view([]), { timestamp: NOW })).toEqual({
      eventId: 'evt_01hv8wptq8987qeep44cyrewp9',
      eventType: 'transaction.completed',
      objectId: 'txn_01hv8wnw7ej3vdcvwkgvyk1j4f',
      objectVersion: '2024-04-12T10:18:49.551474Z',
      providerCreatedAtMs: Date.parse('2024-04-12T10:18:49.621Z'),
    });
  });

  it('a replay (new notification_id, same event_id) has the same key', () => {
    const replay = Buffer.from(EVENT.toString('utf8').replace('ntf_01hv8wpts6n6qyzbkyt7w3wxp5', 'ntf_01hv8xreplayreplayreplay00'));
    expect(adapter.envelope(replay, view([]), { timestamp: NOW }).eventId).toBe(adapter.envelope(EVENT, view([]), { timestamp: NOW }).eventId);
  });

  it.each([
    ['not JSON', 'not json', 'malformed_payload'],
    ['a JSON array', '[{"event_id":"evt_1"}]', 'malformed_payload'],
    ['no event_id (only notification_id)', '{"notification_id":"ntf_1","event_type":"transaction.paid"}', 'missing_event_id'],
    ['empty event_id', '{"event_id":"","event_type":"transaction.paid"}', 'missing_event_id'],
    ['no event_type', '{"event_id":"evt_1"}', 'missing_event_type'],
    ['type under "type" (Standard Webhooks style) is not read', '{"event_id":"evt_1","type":"transaction.paid"}', 'missing_event_type'],
  ])('%s → %s', (_name, body, reason) => {
    expect(reasonOf(() => adapter.envelope(Buffer.from(body), view([]), { timestamp: NOW }))).toBe(reason);
  });

  it('sample() verifies and parses', () => {
    const s = adapter.sample('abc');
    const h = adapter.sign(s.body, SECRET, { ...s.signOptions, timestamp: NOW });
    expect(check(h[HEADER]!, s.body, keys(['v1', SECRET]))).toBe('v1');
    expect(adapter.envelope(s.body, view([]), { timestamp: NOW })).toMatchObject({ eventId: 'evt_sampleabc', objectId: 'txn_sampleabc' });
  });
});

describeEachStore('paddle over HTTP: several h1 during a secret change', (kind) => {
  let app: TestApp;
  beforeAll(async () => {
    app = await startTestApp(kind, { endpoints: [{ id: 'pd', provider: 'paddle', secrets: [{ version: 'v2', value: SECRET }] }] });
  });
  afterAll(async () => {
    await app?.stop();
  });

  it('the matching h1 FIRST and an unknown one last (the SDK would refuse) → 200; a replay with a new notification_id → duplicate', async () => {
    const ts = Math.floor(Date.now() / 1000);
    const header = `ts=${ts};h1=${hex(SECRET, ts, EVENT)};h1=${hex(OLD_SECRET, ts, EVENT)}`;
    const r = await post(`${app.url}/webhooks/pd`, EVENT, { 'content-type': 'application/json', [HEADER]: header });
    expect(r.status, r.text).toBe(200);
    expect(r.json().duplicate).toBe(false);
    const row = await app.store.getInbox(r.json().inbox_id);
    expect(row).toMatchObject({ provider: 'paddle', providerEventId: 'evt_01hv8wptq8987qeep44cyrewp9', objectId: 'txn_01hv8wnw7ej3vdcvwkgvyk1j4f', matchedSecretVersion: 'v2' });

    const replay = Buffer.from(EVENT.toString('utf8').replace('ntf_01hv8wpts6n6qyzbkyt7w3wxp5', 'ntf_01hv8xreplayreplayreplay00'));
    const again = await post(`${app.url}/webhooks/pd`, replay, { 'content-type': 'application/json', ...adapter.sign(replay, SECRET, {}) });
    expect(again.status, again.text).toBe(200);
    expect(again.json()).toEqual({ inbox_id: r.json().inbox_id, duplicate: true });
  });
});
