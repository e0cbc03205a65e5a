import { WebhooksHelper } from 'square';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseConfig } from '../../src/config/schema.js';
import { hmac, type TrustedKey } from '../../src/crypto/hmac.js';
import { ConfigError } from '../../src/errors.js';
import type { ProviderAdapter } from '../../src/providers/contract.js';
import { PROVIDERS } from '../../src/providers/registry.js';
import { expectedFirst, reasonOf, thrownBy, trustedKeys, verifyWith, view } from '../helpers/adapter.js';
import { configDoc, startTestApp, type TestApp } from '../helpers/app.js';
import { post } from '../helpers/http.js';
import { describeEachStore } from '../helpers/stores.js';

const PATH = 'endpoints[2].options';
const square = (publicUrl: string): ProviderAdapter => PROVIDERS.square!({ publicUrl }, PATH);
const configPath = (fn: () => unknown): string => thrownBy(fn, ConfigError).path;

const HEADER = 'x-square-hmacsha256-signature';
const URL_ = 'https://hooks.example.com/webhooks/square';
const adapter = square(URL_);
const KEY = 'sq-signature-key-current';
const OLD_KEY = 'sq-signature-key-previous';

const keys = (...entries: [string, string, number?][]): TrustedKey[] => trustedKeys(adapter, ...entries);
const check = (a: ProviderAdapter, sig: string, body: Buffer | string, ks: TrustedKey[]) => verifyWith(a, [[HEADER, sig]], body, ks);

/** An order.updated event (shape of developer.squareup.com/reference/square/webhooks/order.updated): spacing, `1.0`, a `\u00e9` escape, multi-byte text. */
const EVENT = Buffer.from('{\n  "merchant_id": "6SSW7HV8K2ST5",\n  "type": "order.updated",\n  "event_id": "4b8e5c91-9e6d-3a8b-a2b7-a6d1e2d1f4c2",\n  "created_at": "2020-04-16T23:14:26.129Z",\n  "data": {"type": "order", "id": "eA3vssLHKJrv9H0IdJCM3gNqfdcZY", "object": {"order_updated": {"order_id": "eA3vssLHKJrv9H0IdJCM3gNqfdcZY", "location_id": "FPYCBCHYMXFK1", "state": "OPEN", "version": 3, "amount": 1.0, "note": "caf\\u00e9 ☕ 東京", "created_at": "2020-04-16T23:14:26.129Z", "updated_at": "2020-04-16T23:14:26.359Z"}}}\n}\n');

describe('square: published vectors', () => {
  it.each([
    // Square docs, "Validate that the notification is from Square" (developer.squareup.com/docs/webhooks/step3validate) sample server.
    ['Square docs sample', 'asdf1234', 'https://example.com/webhook', '{"hello":"world"}', '2kRE5qRU2tR+tBGlDwMEw2avJ7QM4ikPYD/PJ3bd9Og='],
    // square/square-python-sdk tests/utilities/test_webhooks_helper.py and tests/integration/test_webhooks_helper.py.
    ['square-python-sdk test_signature_validation_pass', 'Ibxx_5AKakO-3qeNVR61Dw', 'https://webhook.site/679a4f3a-dcfa-49ee-bac5-9d0edad886b9',
      '{"merchant_id":"MLEFBHHSJGVHD","type":"webhooks.test_notification","event_id":"ac3ac95b-f97d-458c-a6e6-18981597e05f","created_at":"2022-07-13T20:30:59.037339943Z","data":{"type":"webhooks","id":"bc368e64-01aa-407e-b46e-3231809b1129"}}',
      'GF4YkrJgGBDZ9NIYbNXBnMzqb2HoL4RW/S6vkZ9/2N4='],
    // square/square-python-sdk tests/integration/test_webhooks_helper.py test_signature_validation_escaped_pass.
    ['square-python-sdk escaped body', 'signature-key', 'https://webhook.site/webhooks', '{"data":{"type":"webhooks","id":">id<"}}', 'Cxt7+aTi4rKgcA0bC4g9EHdVtLSDWdqccmL5MvihU4U='],
  ])('%s', (_name, key, url, body, expected) => {
    const a = square(url);
    expect(a.sign(Buffer.from(body), key, {})).toEqual({ [HEADER]: expected });
    expect(check(a, expected, body, trustedKeys(a, ['v1', key]))).toBe('v1');
    // The SDK suite's negatives: another URL, another key, another body.
    expect(check(square(url.replace(/.$/, '')), expected, body, trustedKeys(a, ['v1', key]))).toBeNull();
    expect(check(a, expected, body, trustedKeys(a, ['v1', 'MCmhFRxGX82xMwg5FsaoQA']))).toBeNull();
    expect(check(a, expected, `${body} `, trustedKeys(a, ['v1', key]))).toBeNull();
  });

  it('square-python-sdk test_signature_validation_body_mismatch: one date digit changed', () => {
    const body = '{"merchant_id":"MLEFBHHSJGVHD","type":"webhooks.test_notification","event_id":"ac3ac95b-f97d-458c-a6e6-18981597e05f","created_at":"2022-06-13T20:30:59.037339943Z","data":{"type":"webhooks","id":"bc368e64-01aa-407e-b46e-3231809b1129"}}';
    const a = square('https://webhook.site/679a4f3a-dcfa-49ee-bac5-9d0edad886b9');
    expect(check(a, 'GF4YkrJgGBDZ9NIYbNXBnMzqb2HoL4RW/S6vkZ9/2N4=', body, trustedKeys(a, ['v1', 'Ibxx_5AKakO-3qeNVR61Dw']))).toBeNull();
  });

  it('the square-python-sdk wrong header (an old SHA-1 sized digest) is malformed, not merely wrong', () => {
    expect(reasonOf(() => adapter.parseSignature(view([[HEADER, '1z2n3DEJJiUPKcPzQo1ftvbxGdw=']])))).toBe('malformed_signature');
  });

  it('signs exactly HMAC-SHA256(key, publicUrl + raw body), base64', () => {
    const expected = hmac('sha256', Buffer.from(KEY), [Buffer.from(URL_ + EVENT.toString('utf8'), 'utf8')]).toString('base64');
    expect(adapter.sign(EVENT, KEY, {})).toEqual({ [HEADER]: expected });
  });
});

describe('square: cross-checks with the official square SDK (v46 WebhooksHelper.verifySignature; the SDK has no signer)', () => {
  const sdk = (body: Buffer, signatureHeader: string, signatureKey: string, notificationUrl = URL_) =>
    WebhooksHelper.verifySignature({ requestBody: body.toString('utf8'), signatureHeader, signatureKey, notificationUrl });

  it('ours → SDK: our signature verifies (multi-byte body); tampered body, wrong key, other URL do not', async () => {
    const sig = adapter.sign(EVENT, KEY, {})[HEADER]!;
    expect(await sdk(EVENT, sig, KEY)).toBe(true);
    expect(await sdk(Buffer.from(EVENT.toString('utf8').replace('1.0', '2.0')), sig, KEY)).toBe(false);
    expect(await sdk(EVENT, sig, OLD_KEY)).toBe(false);
    expect(await sdk(EVENT, sig, KEY, `${URL_}/`)).toBe(false);
  });

  it('SDK and ours agree on every published vector and on a re-serialised body', async () => {
    const body = Buffer.from('{"hello":"world"}');
    expect(await sdk(body, '2kRE5qRU2tR+tBGlDwMEw2avJ7QM4ikPYD/PJ3bd9Og=', 'asdf1234', 'https://example.com/webhook')).toBe(true);
    const sig = adapter.sign(EVENT, KEY, {})[HEADER]!;
    const reserialised = Buffer.from(JSON.stringify(JSON.parse(EVENT.toString('utf8'))));
    expect(reserialised.equals(EVENT)).toBe(false);
    expect(await sdk(reserialised, sig, KEY)).toBe(false);
    expect(check(adapter, sig, reserialised, keys(['v1', KEY]))).toBeNull();
  });
});

describe('square: the notification URL is configuration (options.publicUrl), signed verbatim', () => {
  const body = Buffer.from('{"event_id":"e1","type":"payment.updated"}');

  it('the URL the server sees (behind a proxy) does not verify; only the registered string does', () => {
    const sig = adapter.sign(body, KEY, {})[HEADER]!;
    expect(check(adapter, sig, body, keys(['v1', KEY]))).toBe('v1');
    for (const seen of ['http://hooks.example.com/webhooks/square', 'https://hooks.example.com:443/webhooks/square', 'https://HOOKS.example.com/webhooks/square', `${URL_}/`, `${URL_}?x=1`, 'http://127.0.0.1:8080/webhooks/square']) {
      const overSeen = hmac('sha256', Buffer.from(KEY), [seen, body]).toString('base64');
      expect(check(adapter, overSeen, body, keys(['v1', KEY])), seen).toBeNull();
    }
  });

  it('is not normalised: "https://example.com" and "https://example.com/" sign differently', () => {
    expect(square('https://example.com').sign(body, KEY, {})).not.toEqual(square('https://example.com/').sign(body, KEY, {}));
  });

  it.each(expectedFirst<string, unknown, string>([
    ['options absent', undefined, `${PATH}.publicUrl`],
    ['publicUrl absent', {}, `${PATH}.publicUrl`],
    ['publicUrl empty', { publicUrl: '' }, `${PATH}.publicUrl`],
    ['publicUrl not a string', { publicUrl: 42 }, `${PATH}.publicUrl`],
    ['relative URL', { publicUrl: '/webhooks/square' }, `${PATH}.publicUrl`],
    ['http:// URL', { publicUrl: 'http://hooks.example.com/webhooks/square' }, `${PATH}.publicUrl`],
    ['trailing space (would be trimmed by a URL parser)', { publicUrl: `${URL_} ` }, `${PATH}.publicUrl`],
    ['embedded newline', { publicUrl: 'https://hooks.example.com/\nsquare' }, `${PATH}.publicUrl`],
    ['not a URL', { publicUrl: 'hooks.example.com/webhooks/square' }, `${PATH}.publicUrl`],
    ['unknown option', { publicUrl: URL_, notificationUrl: URL_ }, `${PATH}.notificationUrl`],
    ['options not an object', 'https://example.com', PATH],
  ]))('%s → ConfigError at %s', (_name, path, options) => {
    expect(configPath(() => PROVIDERS.square!(options as Record<string, unknown> | undefined, PATH))).toBe(path);
  });

  it('through the config loader the full endpoint path is named', () => {
    const doc = configDoc('sqlite::memory:', {
      endpoints: [
        { id: 'ok', provider: 'github', secrets: [{ version: 'v1', value: 'x' }] },
        { id: 'sq', provider: 'square', secrets: [{ version: 'v1', value: 'x' }] },
      ],
    });
    expect(configPath(() => parseConfig(doc, {}))).toBe('endpoints[1].options.publicUrl');
    const ok = { ...doc, endpoints: [{ id: 'sq', provider: 'square', secrets: [{ version: 'v1', value: 'x' }], options: { publicUrl: URL_ } }] };
    expect(parseConfig(ok, {}).endpoints[0]!.toleranceSeconds).toBeNull();
  });

  it('no timestamp is signed: toleranceSeconds on a Square endpoint is a config error', () => {
    expect(adapter.defaultToleranceSeconds).toBeNull();
    const doc = {
      database: 'sqlite::memory:',
      payloadKeys: { current: 'k1', keys: { k1: Buffer.alloc(32, 7).toString('base64') } },
      endpoints: [{ id: 'sq', provider: 'square', secrets: [{ version: 'v1', value: 'x' }], options: { publicUrl: URL_ }, toleranceSeconds: 300 }],
    };
    expect(configPath(() => parseConfig(doc, {}))).toBe('endpoints[0].toleranceSeconds');
  });
});

describe('square: signature header', () => {
  const body = Buffer.from('{"event_id":"e1","type":"payment.updated"}');
  const good = adapter.sign(body, KEY, {})[HEADER]!;

  it.each(expectedFirst([
    ['absent header', null, 'missing_signature'],
    ['empty header', '', 'missing_signature'],
    ['not base64', '!!!!', 'malformed_signature'],
    ['bad base64 length', good.slice(1), 'malformed_signature'],
    ['hex instead of base64', 'a'.repeat(64), 'malformed_signature'],
    ['SHA-1 sized (legacy x-square-signature style)', '1z2n3DEJJiUPKcPzQo1ftvbxGdw=', 'malformed_signature'],
  ]))('%s → %s', (_name, reason, header) => {
    const pairs: [string, string][] = header === null ? [] : [[HEADER, header]];
    expect(reasonOf(() => adapter.parseSignature(view(pairs)))).toBe(reason);
  });

  it('the legacy x-square-signature (HMAC-SHA1) alone is not accepted', () => {
    expect(reasonOf(() => adapter.parseSignature(view([['x-square-signature', '1z2n3DEJJiUPKcPzQo1ftvbxGdw=']])))).toBe('missing_signature');
  });

  it('the header sent twice is ambiguous, never joined', () => {
    expect(reasonOf(() => adapter.parseSignature(view([[HEADER, good], ['X-Square-HmacSha256-Signature', good]])))).toBe('ambiguous_signature');
  });

  it('header name is case-insensitive; no timestamp is exposed', () => {
    expect(adapter.parseSignature(view([['X-Square-HmacSha256-Signature', good]])).timestamp).toBeNull();
    expect(verifyWith(adapter, [['X-Square-HmacSha256-Signature', good]], body, keys(['v1', KEY]))).toBe('v1');
  });

  it('one changed byte, wrong key, retired key', () => {
    const mutated = Buffer.from(body);
    mutated.writeUInt8(mutated.readUInt8(mutated.length - 3) ^ 0x01, mutated.length - 3);
    expect(check(adapter, good, mutated, keys(['v1', KEY]))).toBeNull();
    expect(check(adapter, good, body, keys(['v1', OLD_KEY]))).toBeNull();
    const now = Date.now();
    expect(verifyWith(adapter, [[HEADER, good]], body, keys(['v1', KEY, now - 1]), now)).toBeNull();
    expect(verifyWith(adapter, [[HEADER, good]], body, keys(['v2', OLD_KEY], ['v1', KEY]), now)).toBe('v1');
  });

  it('refuses an empty signature key', () => {
    expect(() => adapter.prepareSecret('')).toThrow(/empty/);
  });
});

describe('square: envelope', () => {
  it('event_id, type, data.id, the resource version and created_at (RFC 3339, nanoseconds)', () => {
    expect(adapter.envelope(EVENT, view([]), { timestamp: null })).toEqual({
      eventId: '4b8e5c91-9e6d-3a8b-a2b7-a6d1e2d1f4c2',
      eventType: 'order.updated',
      objectId: 'eA3vssLHKJrv9H0IdJCM3gNqfdcZY',
      objectVersion: '3',
      providerCreatedAtMs: Date.parse('2020-04-16T23:14:26.129Z'),
    });
    const sdkVector = Buffer.from('{"merchant_id":"MLEFBHHSJGVHD","type":"webhooks.test_notification","event_id":"ac3ac95b-f97d-458c-a6e6-18981597e05f","created_at":"2022-07-13T20:30:59.037339943Z","data":{"type":"webhooks","id":"bc368e64-01aa-407e-b46e-3231809b1129"}}');
    expect(adapter.envelope(sdkVector, view([]), { timestamp: null })).toMatchObject({ objectVersion: null, providerCreatedAtMs: Date.parse('2022-07-13T20:30:59.037Z') });
  });

  it.each([
    ['resource named by data.type (customer)', { type: 'customer', id: 'C1', object: { customer: { id: 'C1', version: 7 } } }, '7'],
    ['single resource under another name (order_fulfillment_updated)', { type: 'order', id: 'O1', object: { order_fulfillment_updated: { order_id: 'O1', version: 12 } } }, '12'],
    ['version as a digit string', { type: 'invoice', id: 'I1', object: { invoice: { id: 'I1', version: '4' } } }, '4'],
    ['payment: only an opaque version_token', { type: 'payment', id: 'P1', object: { payment: { id: 'P1', version_token: 'zpCBiO0YgSg5' } } }, null],
    ['negative version', { type: 'invoice', id: 'I1', object: { invoice: { id: 'I1', version: -1 } } }, null],
    ['fractional version', { type: 'invoice', id: 'I1', object: { invoice: { id: 'I1', version: 1.5 } } }, null],
    ['two resources, none named by data.type', { type: 'x', id: 'X1', object: { a: { version: 1 }, b: { version: 2 } } }, null],
    ['no data.object', { type: 'payment', id: 'P1' }, null],
    ['data.object is an array', { type: 'payment', id: 'P1', object: [{ version: 1 }] }, null],
  ])('objectVersion: %s → %s', (_name, data, expected) => {
    const body = Buffer.from(JSON.stringify({ event_id: 'e1', type: 't.updated', created_at: '2024-01-01T00:00:00Z', data }));
    expect(adapter.envelope(body, view([]), { timestamp: null }).objectVersion).toBe(expected);
  });

  it.each([
    ['not JSON', 'not json', 'malformed_payload'],
    ['a JSON array', '[{"event_id":"e1"}]', 'malformed_payload'],
    ['no event_id', '{"type":"payment.updated"}', 'missing_event_id'],
    ['empty event_id', '{"event_id":"","type":"payment.updated"}', 'missing_event_id'],
    ['event_id is an object', '{"event_id":{},"type":"payment.updated"}', 'missing_event_id'],
    ['no type', '{"event_id":"e1"}', 'missing_event_type'],
  ])('%s → %s', (_name, body, reason) => {
    expect(reasonOf(() => adapter.envelope(Buffer.from(body), view([]), { timestamp: null }))).toBe(reason);
  });

  it('missing data.id and created_at are null, not errors', () => {
    expect(adapter.envelope(Buffer.from('{"event_id":"e1","type":"t"}'), view([]), { timestamp: null })).toEqual({
      eventId: 'e1', eventType: 't', objectId: null, objectVersion: null, providerCreatedAtMs: null,
    });
  });

  it('sample() is a signed-verifiable, well-formed event', () => {
    const s = adapter.sample('abc123');
    const sig = adapter.sign(s.body, KEY, s.signOptions)[HEADER]!;
    expect(check(adapter, sig, s.body, keys(['v1', KEY]))).toBe('v1');
    expect(adapter.envelope(s.body, view([]), { timestamp: null })).toMatchObject({ eventType: 'order.updated', objectVersion: '2' });
  });
});

describeEachStore('square over HTTP: the registered URL, not the one the server sees', (kind) => {
  let app: TestApp;
  const SECRET = 'sq-http-key';
  beforeAll(async () => {
    app = await startTestApp(kind, { endpoints: [{ id: 'sq', provider: 'square', secrets: [{ version: 'v1', value: SECRET }], options: { publicUrl: URL_ } }] });
  });
  afterAll(async () => {
    await app?.stop();
  });

  it('signed over the registered publicUrl → 200; signed over the URL this server actually serves → 401, nothing stored', async () => {
    const body = Buffer.from(EVENT.toString('utf8').replace('4b8e5c91', 'aaaaaaaa'));
    const before = await app.store.countRows();
    const served = `${app.url}/webhooks/sq`;
    const wrong = hmac('sha256', Buffer.from(SECRET), [served, body]).toString('base64');
    const bad = await post(served, body, { 'content-type': 'application/json', [HEADER]: wrong });
    expect(bad.status, bad.text).toBe(401);
    expect(bad.json()).toEqual({ error: 'invalid_signature' });
    expect(await app.store.countRows()).toEqual(before);
    const good = await post(served, body, { 'content-type': 'application/json', ...adapter.sign(body, SECRET, {}) });
    expect(good.status, good.text).toBe(200);
    const row = await app.store.getInbox(good.json().inbox_id);
    expect(row).toMatchObject({ provider: 'square', providerEventId: 'aaaaaaaa-9e6d-3a8b-a2b7-a6d1e2d1f4c2', objectId: 'eA3vssLHKJrv9H0IdJCM3gNqfdcZY', objectVersion: '3' });
  });
});
