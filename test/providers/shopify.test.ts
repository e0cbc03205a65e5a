import '@shopify/shopify-api/adapters/node';
import { ApiVersion, LogSeverity, shopifyApi } from '@shopify/shopify-api';
import { createSHA256HMAC, HashFormat } from '@shopify/shopify-api/runtime';
import { createHmac, randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { TrustedKey } from '../../src/crypto/hmac.js';
import { ConfigError } from '../../src/errors.js';
import type { Envelope, ProviderAdapter, RequestView, SignatureMetadata } from '../../src/providers/contract.js';
import { PROVIDERS } from '../../src/providers/registry.js';
import { expectedFirst, reasonOf, thrownBy, trustedKeys, verifyWith, view } from '../helpers/adapter.js';
import { startTestApp, type TestApp } from '../helpers/app.js';
import { post } from '../helpers/http.js';
import { describeEachStore } from '../helpers/stores.js';
import { shopifyCase } from '../http/cases/shopify.js';

const adapter: ProviderAdapter = PROVIDERS.shopify!(undefined, 'endpoints[0].options');
const byDelivery: ProviderAdapter = PROVIDERS.shopify!({ deduplicateBy: 'delivery' }, 'endpoints[0].options');

const SECRET = 'shpss_0123456789abcdef0123456789abcdef';
const keys = (...entries: [string, string, number?][]): TrustedKey[] => trustedKeys(adapter, ...entries);

/** HMAC computed with node:crypto directly, independently of the adapter and src/crypto. */
const independent = (secret: string, body: Buffer | string) => createHmac('sha256', Buffer.from(secret, 'utf8')).update(body).digest('base64');

const check = (pairs: [string, string][], body: Buffer | string, ks: TrustedKey[]) => verifyWith(adapter, pairs, body, ks);

/** The single envelope (this adapter never returns several). */
const one = (e: Envelope | readonly Envelope[]): Envelope => {
  if (Array.isArray(e)) throw new Error('expected one envelope');
  return e as Envelope;
};

/** A realistic orders/create body: multi-byte text, `\u` escape, 1.0, GID and numeric id. */
const ORDER = Buffer.from(
  '{\n  "id": 5223452934372,\n  "admin_graphql_api_id": "gid://shopify/Order/5223452934372",\n  "name": "#1001",\n' +
    '  "note": "caf\\u00e9 ☕ 東京 😀",\n  "total_weight": 1.0,\n  "updated_at": "2024-01-02T03:04:05-05:00"\n}\n',
  'utf8',
);
const EVENT_ID = '98880550-7158-44d4-b7cd-2c97c8a091b5';
/** An Events delivery's body: fixed fields plus what the subscription's query asked for. */
const PRODUCT = Buffer.from('{"topic":"Product","action":"update","handle":"product-prices","admin_graphql_api_id":"gid://shopify/Product/7","updated_at":"2026-05-01T00:00:00Z"}', 'utf8');
const WEBHOOK_ID = 'b54557e4-bdd9-4b37-8a5f-bf7d70bcd043';

function classicHeaders(over: Record<string, string | null> = {}): [string, string][] {
  const base: Record<string, string | null> = {
    'X-Shopify-Topic': 'orders/create',
    'X-Shopify-Shop-Domain': 'shop1.myshopify.com',
    'X-Shopify-API-Version': '2025-07',
    'X-Shopify-Event-Id': EVENT_ID,
    'X-Shopify-Webhook-Id': WEBHOOK_ID,
    'X-Shopify-Triggered-At': '2024-01-02T08:04:06.123456789Z',
    ...over,
  };
  return Object.entries(base).filter((e): e is [string, string] => e[1] !== null);
}

const headers = (over: Record<string, string | null> = {}): RequestView => view(classicHeaders(over));
/** What parseSignature returns for an X-Shopify-* request (the envelope only reads the family). */
const META = { timestamp: null, digest: Buffer.alloc(32), family: 'x-shopify-' } as SignatureMetadata;
const env = (body: Buffer | string, req: RequestView, a: ProviderAdapter = adapter) => one(a.envelope(Buffer.from(body), req, META));

describe('shopify: published and independently computed vectors', () => {
  it('Shopify/shopify-app-js lib/webhooks/__tests__/validate.test.ts: secret "test_secret_key", body {"foo": "bar"}', () => {
    const body = Buffer.from('{"foo": "bar"}');
    const expected = 'B23tXN681gZ0qIWNRrgtzBE9XSDo5yaUu6wfmhu3a7g=';
    expect(adapter.sign(body, 'test_secret_key', {})).toEqual({ 'x-shopify-hmac-sha256': expected });
    expect(check([['X-Shopify-Hmac-Sha256', expected]], body, keys(['v1', 'test_secret_key']))).toBe('v1');
    expect(check([['shopify-hmac-sha256', expected]], body, keys(['v1', 'test_secret_key']))).toBe('v1');
    expect(check([['X-Shopify-Hmac-Sha256', expected]], body, keys(['v1', 'test_key']))).toBeNull();
  });

  it.each([
    ['multi-byte order', ORDER],
    ['empty body', Buffer.alloc(0)],
    ['compact JSON', Buffer.from('{"id":1,"admin_graphql_api_id":"gid://shopify/Product/1"}')],
  ])('node:crypto HMAC (computed outside our code) ≡ ours, and verifies: %s', (_name, body) => {
    const sig = independent(SECRET, body);
    expect(adapter.sign(body, SECRET, {})['x-shopify-hmac-sha256']).toBe(sig);
    expect(check([['x-shopify-hmac-sha256', sig]], body, keys(['v1', SECRET]))).toBe('v1');
  });

  it('the key is the client secret as UTF-8 bytes (not latin1, not hex- or base64-decoded)', () => {
    const secret = 'sécret-東京';
    const sig = independent(secret, ORDER);
    expect(check([['x-shopify-hmac-sha256', sig]], ORDER, keys(['v1', secret]))).toBe('v1');
    const latin1 = createHmac('sha256', Buffer.from(secret, 'latin1')).update(ORDER).digest('base64');
    expect(check([['x-shopify-hmac-sha256', latin1]], ORDER, keys(['v1', secret]))).toBeNull();
    const hexSecret = '0123456789abcdef0123456789abcdef';
    const decoded = createHmac('sha256', Buffer.from(hexSecret, 'hex')).update(ORDER).digest('base64');
    expect(check([['x-shopify-hmac-sha256', decoded]], ORDER, keys(['v1', hexSecret]))).toBeNull();
  });

  it('one changed byte, a re-serialised body, or the wrong secret fails', () => {
    const sig = independent(SECRET, ORDER);
    const tampered = Buffer.from(ORDER);
    tampered[tampered.indexOf('1.0')] = 0x32;
    expect(check([['x-shopify-hmac-sha256', sig]], tampered, keys(['v1', SECRET]))).toBeNull();
    const reserialised = Buffer.from(JSON.stringify(JSON.parse(ORDER.toString('utf8'))));
    expect(check([['x-shopify-hmac-sha256', sig]], reserialised, keys(['v1', SECRET]))).toBeNull();
    expect(check([['x-shopify-hmac-sha256', sig]], ORDER, keys(['v1', `${SECRET}x`]))).toBeNull();
  });
});

describe('shopify: cross-checks with @shopify/shopify-api 13 (webhooks.validate has no signer)', () => {
  const shopify = shopifyApi({
    apiKey: 'test_key', apiSecretKey: SECRET, hostName: 'localhost', apiVersion: ApiVersion.July25, isEmbeddedApp: false,
    logger: { level: LogSeverity.Error, log: async () => {} },
  });
  const validate = (body: Buffer, hdrs: [string, string][]) =>
    shopify.webhooks.validate({ rawBody: body.toString('utf8'), rawRequest: { headers: Object.fromEntries(hdrs), method: 'POST', url: '/webhooks' }, rawResponse: {} });

  it('ours → SDK: our X-Shopify-Hmac-Sha256 passes webhooks.validate and the SDK reads the same ids', async () => {
    const sig = adapter.sign(ORDER, SECRET, {})['x-shopify-hmac-sha256']!;
    const r = await validate(ORDER, [...classicHeaders(), ['X-Shopify-Hmac-Sha256', sig]]);
    expect(r).toMatchObject({ valid: true, webhookType: 'webhooks', eventId: EVENT_ID, webhookId: WEBHOOK_ID, triggeredAt: '2024-01-02T08:04:06.123456789Z' });
    // Our verification of the same request agrees.
    expect(check([...classicHeaders(), ['X-Shopify-Hmac-Sha256', sig]], ORDER, keys(['v1', SECRET]))).toBe('v1');
  });

  it('ours → SDK: the unprefixed shopify-* spelling (Events deliveries) passes too', async () => {
    const sig = adapter.sign(ORDER, SECRET, {})['x-shopify-hmac-sha256']!;
    const h: [string, string][] = [
      ['shopify-topic', 'Order'], ['shopify-shop-domain', 'shop1.myshopify.com'], ['shopify-api-version', 'unstable'],
      ['shopify-webhook-id', WEBHOOK_ID], ['shopify-event-id', EVENT_ID], ['shopify-hmac-sha256', sig],
    ];
    expect(await validate(ORDER, h)).toMatchObject({ valid: true, webhookType: 'events', webhookId: WEBHOOK_ID });
    expect(check(h, ORDER, keys(['v1', SECRET]))).toBe('v1');
  });

  it('SDK and ours both refuse a tampered body and a wrong secret', async () => {
    const sig = adapter.sign(ORDER, SECRET, {})['x-shopify-hmac-sha256']!;
    const tampered = Buffer.from(ORDER);
    tampered[tampered.indexOf('1.0')] = 0x32;
    expect(await validate(tampered, [...classicHeaders(), ['X-Shopify-Hmac-Sha256', sig]])).toMatchObject({ valid: false, reason: 'invalid_hmac' });
    expect(check([['X-Shopify-Hmac-Sha256', sig]], tampered, keys(['v1', SECRET]))).toBeNull();
    const other = adapter.sign(ORDER, 'another-secret', {})['x-shopify-hmac-sha256']!;
    expect(await validate(ORDER, [...classicHeaders(), ['X-Shopify-Hmac-Sha256', other]])).toMatchObject({ valid: false, reason: 'invalid_hmac' });
    expect(check([['X-Shopify-Hmac-Sha256', other]], ORDER, keys(['v1', SECRET]))).toBeNull();
  });

  it.each([
    ['multi-byte order', ORDER],
    ['compact JSON', Buffer.from('{"id":1}')],
  ])('SDK → ours: the SDK\'s own createSHA256HMAC (what validate compares against) verifies with ours: %s', async (_name, body) => {
    const theirs = await createSHA256HMAC(SECRET, body.toString('utf8'), HashFormat.Base64);
    expect(theirs).toBe(independent(SECRET, body));
    expect(check([['X-Shopify-Hmac-Sha256', theirs]], body, keys(['v1', SECRET]))).toBe('v1');
    expect(check([['X-Shopify-Hmac-Sha256', theirs]], Buffer.concat([body, Buffer.from(' ')]), keys(['v1', SECRET]))).toBeNull();
  });
});

describe('shopify: HMAC header parsing', () => {
  const good = independent(SECRET, ORDER);

  it('signs no timestamp: no freshness check, metadata timestamp null', () => {
    expect(adapter.defaultToleranceSeconds).toBeNull();
    expect(adapter.parseSignature(view([['x-shopify-hmac-sha256', good]])).timestamp).toBeNull();
  });

  it.each(expectedFirst<string, [string, string][], string>([
    ['absent header', [], 'missing_signature'],
    ['empty header', [['X-Shopify-Hmac-Sha256', '']], 'missing_signature'],
    ['empty unprefixed header', [['Shopify-Hmac-Sha256', '']], 'missing_signature'],
    ['not base64', [['X-Shopify-Hmac-Sha256', '%%%not-base64%%%']], 'malformed_signature'],
    ['a hex digest instead of base64', [['X-Shopify-Hmac-Sha256', createHmac('sha256', SECRET).update(ORDER).digest('hex')]], 'malformed_signature'],
    ['short digest (31 bytes)', [['X-Shopify-Hmac-Sha256', Buffer.alloc(31).toString('base64')]], 'malformed_signature'],
    ['long digest (48 bytes)', [['X-Shopify-Hmac-Sha256', Buffer.alloc(48).toString('base64')]], 'malformed_signature'],
    ['a "sha256=" prefix', [['X-Shopify-Hmac-Sha256', `sha256=${good}`]], 'malformed_signature'],
    ['X-Shopify-Hmac-Sha256 twice', [['X-Shopify-Hmac-Sha256', good], ['x-shopify-hmac-sha256', good]], 'ambiguous_signature'],
    ['Shopify-Hmac-Sha256 twice', [['Shopify-Hmac-Sha256', good], ['shopify-hmac-sha256', good]], 'ambiguous_signature'],
    ['both spellings, different values', [['X-Shopify-Hmac-Sha256', good], ['Shopify-Hmac-Sha256', good.replace(/^./, (ch) => (ch === 'A' ? 'B' : 'A'))]], 'ambiguous_signature'],
    ['both spellings, one of them empty', [['X-Shopify-Hmac-Sha256', good], ['Shopify-Hmac-Sha256', '']], 'ambiguous_signature'],
  ]))('%s → %s', (_name, reason, pairs) => {
    expect(reasonOf(() => adapter.parseSignature(view(pairs)))).toBe(reason);
  });

  it('a retired secret never verifies; rotation accepts any trusted version', () => {
    const now = Date.now();
    expect(verifyWith(adapter, [['x-shopify-hmac-sha256', good]], ORDER, keys(['v2', 'new-secret'], ['v1', SECRET]), now)).toBe('v1');
    expect(verifyWith(adapter, [['x-shopify-hmac-sha256', good]], ORDER, keys(['v2', 'new-secret'], ['v1', SECRET, now]), now)).toBeNull();
  });

  it('refuses an empty secret', () => {
    expect(() => adapter.prepareSecret('')).toThrow(/empty/);
  });
});

describe('shopify: envelope (verified request → logical event)', () => {
  it('key = event id + topic + resource GID; type = topic; object = GID; version = updated_at (UTC); created = Triggered-At', () => {
    expect(env(ORDER, headers())).toEqual({
      eventId: `${EVENT_ID}:orders/create:gid://shopify/Order/5223452934372`,
      eventType: 'orders/create',
      objectId: 'gid://shopify/Order/5223452934372',
      objectVersion: '2024-01-02T08:04:05.000Z',
      providerCreatedAtMs: Date.parse('2024-01-02T08:04:06.123Z'),
    });
  });

  it('a retry and a duplicate subscription (same event, topic and resource; new webhook id) share the key', () => {
    const first = env(ORDER, headers()).eventId;
    expect(env(ORDER, headers({ 'X-Shopify-Triggered-At': '2024-01-02T09:00:00Z' })).eventId).toBe(first);
    expect(env(ORDER, headers({ 'X-Shopify-Webhook-Id': randomUUID() })).eventId).toBe(first);
  });

  it('one merchant action (one event id) fanning out to other topics or other resources stays distinct', () => {
    const a = env(ORDER, headers()).eventId;
    const paid = env(ORDER, headers({ 'X-Shopify-Topic': 'orders/paid' })).eventId;
    const otherOrder = env(ORDER.toString('utf8').replace('/Order/5223452934372', '/Order/5223452934373'), headers()).eventId;
    expect(new Set([a, paid, otherOrder]).size).toBe(3);
  });

  it('object id falls back to the numeric id, then to none (key without the object part)', () => {
    const numeric = env('{"id": 450789469, "updated_at": "2024-01-02T03:04:05Z"}', headers({ 'X-Shopify-Topic': 'products/update' }));
    expect(numeric).toMatchObject({ objectId: '450789469', eventId: `${EVENT_ID}:products/update:450789469` });
    const none = env('{"shop_id": 954889, "shop_domain": "shop1.myshopify.com"}', headers({ 'X-Shopify-Topic': 'shop/redact' }));
    expect(none).toMatchObject({ objectId: null, objectVersion: null, eventId: `${EVENT_ID}:shop/redact` });
    // An id beyond 2^53 is not trusted as a number (JSON.parse would have rounded it).
    expect(env('{"id": 82098291194615450800}', headers()).objectId).toBeNull();
  });

  it('without X-Shopify-Event-Id the per-delivery X-Shopify-Webhook-Id is the key; with neither → missing_event_id', () => {
    expect(env(ORDER, headers({ 'X-Shopify-Event-Id': null })).eventId).toBe(WEBHOOK_ID);
    expect(env(ORDER, headers({ 'X-Shopify-Event-Id': '' })).eventId).toBe(WEBHOOK_ID);
    expect(reasonOf(() => env(ORDER, headers({ 'X-Shopify-Event-Id': null, 'X-Shopify-Webhook-Id': null })))).toBe('missing_event_id');
  });

  it('an oversized composite key (unsigned headers) is refused, never sent to the unique index', () => {
    expect(reasonOf(() => env(ORDER, headers({ 'X-Shopify-Event-Id': 'é'.repeat(500), 'X-Shopify-Topic': 'x'.repeat(500) })))).toBe('missing_event_id');
  });

  it('deduplicateBy: delivery keys on X-Shopify-Webhook-Id alone (and requires it)', () => {
    expect(env(ORDER, headers(), byDelivery).eventId).toBe(WEBHOOK_ID);
    expect(reasonOf(() => env(ORDER, headers({ 'X-Shopify-Webhook-Id': null }), byDelivery))).toBe('missing_event_id');
  });

  it('the unprefixed family is read from shopify-* headers, never mixed with X-Shopify-*', () => {
    const pairs: [string, string][] = [
      ['shopify-topic', 'Product'], ['shopify-webhook-id', WEBHOOK_ID], ['shopify-triggered-at', '2026-05-01T00:00:00Z'],
      ['shopify-hmac-sha256', independent(SECRET, ORDER)],
    ];
    const meta = adapter.parseSignature(view(pairs));
    expect(one(adapter.envelope(ORDER, view(pairs), meta))).toMatchObject({ eventId: WEBHOOK_ID, eventType: 'Product', providerCreatedAtMs: Date.parse('2026-05-01T00:00:00Z') });
    // X-Shopify-Topic next to an unprefixed signature is not consulted.
    const mixed: [string, string][] = [['x-shopify-topic', 'orders/create'], ['x-shopify-event-id', EVENT_ID], ['shopify-webhook-id', WEBHOOK_ID], ['shopify-hmac-sha256', independent(SECRET, ORDER)]];
    expect(reasonOf(() => one(adapter.envelope(ORDER, view(mixed), adapter.parseSignature(view(mixed)))))).toBe('missing_event_type');
  });

  it('an Events delivery (topic = resource name): the key adds its action and subscription handle', () => {
    const events = (action: string, handle: string, extra: [string, string][] = []): [string, string][] => [
      ['shopify-topic', 'Product'], ['shopify-action', action], ['shopify-handle', handle], ['shopify-event-id', EVENT_ID],
      ['shopify-webhook-id', randomUUID()], ['shopify-hmac-sha256', independent(SECRET, PRODUCT)], ...extra,
    ];
    const key = (pairs: [string, string][]) => one(adapter.envelope(PRODUCT, view(pairs), adapter.parseSignature(view(pairs)))).eventId;
    expect(key(events('update', 'product-prices'))).toBe(`${EVENT_ID}:Product:update:product-prices:gid://shopify/Product/7`);
    // Its retry (a new webhook id) is the same key; another subscription or another action is another event.
    expect(key(events('update', 'product-prices'))).toBe(key(events('update', 'product-prices')));
    expect(new Set([key(events('update', 'product-prices')), key(events('update', 'product-titles')), key(events('create', 'product-prices'))]).size).toBe(3);
    // Events deliveries carry the X-Shopify-* names too: with the same signature they are still read as Events.
    const both = events('update', 'product-titles', [['x-shopify-hmac-sha256', independent(SECRET, PRODUCT)], ['x-shopify-topic', 'products/update'], ['x-shopify-event-id', EVENT_ID]]);
    expect(key(both)).toBe(`${EVENT_ID}:Product:update:product-titles:gid://shopify/Product/7`);
  });

  it('an unparseable Triggered-At or updated_at is no ordering evidence (null), not a rejection', () => {
    const e = env(ORDER.toString('utf8').replace('2024-01-02T03:04:05-05:00', 'yesterday'), headers({ 'X-Shopify-Triggered-At': 'soon' }));
    expect(e).toMatchObject({ objectVersion: null, providerCreatedAtMs: null });
  });

  it.each(expectedFirst<string, [string, Record<string, string | null>], string>([
    ['no topic header', [ORDER.toString('utf8'), { 'X-Shopify-Topic': null }], 'missing_event_type'],
    ['not JSON', ['<order/>', {}], 'malformed_payload'],
    ['a JSON array', ['[{"id":1}]', {}], 'malformed_payload'],
  ]))('%s → %s', (_name, reason, [body, over]) => {
    expect(reasonOf(() => one(adapter.envelope(Buffer.from(body), headers(over), META)))).toBe(reason);
  });

  it('options: deduplicateBy must be event or delivery; unknown keys are refused', () => {
    expect(thrownBy(() => PROVIDERS.shopify!({ deduplicateBy: 'webhook' }, 'endpoints[1].options'), ConfigError).path).toBe('endpoints[1].options.deduplicateBy');
    expect(thrownBy(() => PROVIDERS.shopify!({ tolerance: 1 }, 'endpoints[1].options'), ConfigError).path).toBe('endpoints[1].options.tolerance');
  });

  it('sample() is a valid delivery of this adapter', () => {
    const s = adapter.sample('42');
    const pairs: [string, string][] = [...Object.entries(s.headers), ...Object.entries(adapter.sign(s.body, SECRET, s.signOptions))];
    expect(check(pairs, s.body, keys(['v1', SECRET]))).toBe('v1');
    expect(one(adapter.envelope(s.body, view(pairs), adapter.parseSignature(view(pairs))))).toMatchObject({ eventType: 'orders/create', objectId: expect.stringMatching(/^gid:\/\/shopify\/Order\//) });
  });
});

describeEachStore('shopify over HTTP', (kind) => {
  let app: TestApp;
  const c = shopifyCase;
  const byDeliveryEndpoint = { ...c.config, id: 'shopify-delivery', options: { deduplicateBy: 'delivery' } };
  beforeAll(async () => {
    app = await startTestApp(kind, { endpoints: [c.config, byDeliveryEndpoint] });
  });
  afterAll(async () => {
    await app?.stop();
  });

  const send = (endpoint: string, body: Buffer, h: Record<string, string> | [string, string][]) => post(`${app.url}/webhooks/${endpoint}`, body, h);
  const signed = (m: { body: Buffer; headers: Record<string, string> }) => ({ ...m.headers, ...c.adapter.sign(m.body, c.secrets.v2, {}) });
  const unprefixed = (h: Record<string, string>) => Object.fromEntries(Object.entries(h).map(([k, v]) => [k.replace(/^x-shopify-/, 'shopify-'), v]));

  it('the unprefixed shopify-* header names are accepted (same key rules)', async () => {
    const m = c.make('Zoë 😀');
    const r = await send('shopify', m.body, unprefixed(signed(m)));
    expect(r.status, r.text).toBe(200);
    const row = await app.store.getInbox(r.json().inbox_id);
    expect(row).toMatchObject({ providerEventId: m.key, eventType: m.type, objectId: m.objectId });
  });

  it('both signature spellings with the same value (an Events delivery sends both) → accepted, read from the shopify-* family', async () => {
    const m = c.make();
    const h = signed(m);
    const r = await send('shopify', m.body, { ...h, ...unprefixed(h), 'shopify-topic': 'Order' });
    expect(r.status, r.text).toBe(200);
    expect((await app.store.getInbox(r.json().inbox_id))!.eventType).toBe('Order');
  });

  it('one event delivered to two Events subscriptions (handles), and as create and update → three rows; each retry → duplicate', async () => {
    const m = c.make();
    const eventId = randomUUID();
    // As Shopify sends Events deliveries: shopify-* headers, and the X-Shopify-* ones beside them.
    const delivery = (action: string, handle: string) => {
      const h = signed(m);
      return { ...h, ...unprefixed(h), 'x-shopify-event-id': eventId, 'shopify-event-id': eventId, 'shopify-topic': 'Order', 'shopify-action': action, 'shopify-handle': handle, 'shopify-webhook-id': randomUUID() };
    };
    const sent = [delivery('update', 'order-totals'), delivery('update', 'order-notes'), delivery('create', 'order-totals')];
    const ids: string[] = [];
    for (const h of sent) {
      const r = await send('shopify', m.body, h);
      expect(r.status, r.text).toBe(200);
      expect(r.json().duplicate).toBe(false);
      ids.push(r.json().inbox_id);
    }
    expect(new Set(ids).size).toBe(3);
    for (const [i, h] of sent.entries()) {
      expect((await send('shopify', m.body, { ...h, 'shopify-webhook-id': randomUUID() })).json()).toEqual({ inbox_id: ids[i], duplicate: true });
    }
  });

  it('both signature spellings with different values → 400 ambiguous_signature, nothing stored', async () => {
    const m = c.make();
    const h = signed(m);
    const before = await app.store.countRows();
    const other = signed(c.make())['x-shopify-hmac-sha256']!;
    const r = await send('shopify', m.body, { ...h, 'shopify-hmac-sha256': other });
    expect(r.status, r.text).toBe(400);
    expect(r.json().error).toBe('ambiguous_signature');
    expect(await app.store.countRows()).toEqual(before);
  });

  it('one merchant action (one X-Shopify-Event-Id) delivered for two topics → two rows; its retry → duplicate', async () => {
    const m = c.make('first', 'orders/create');
    const a = await send('shopify', m.body, signed(m));
    const paid = await send('shopify', m.body, { ...signed(m), 'x-shopify-topic': 'orders/paid', 'x-shopify-webhook-id': randomUUID() });
    expect([a.status, paid.status]).toEqual([200, 200]);
    expect(paid.json().inbox_id).not.toBe(a.json().inbox_id);
    const retry = await send('shopify', m.body, signed(m));
    expect(retry.json()).toEqual({ inbox_id: a.json().inbox_id, duplicate: true });
  });

  it('nothing but the body is signed: a captured delivery re-sent under a new event id is a new row', async () => {
    const m = c.make();
    const h = signed(m);
    const first = await send('shopify', m.body, h);
    const replay = await send('shopify', m.body, { ...h, 'x-shopify-event-id': randomUUID() });
    expect([first.status, replay.status]).toEqual([200, 200]);
    expect(replay.json().duplicate).toBe(false);
  });

  it('an Events delivery without an event id is keyed by shopify-webhook-id; its retry is a duplicate', async () => {
    const m = c.make();
    const h = unprefixed(signed(m));
    delete h['shopify-event-id'];
    const first = await send('shopify', m.body, h);
    expect(first.status, first.text).toBe(200);
    expect((await app.store.getInbox(first.json().inbox_id))!.providerEventId).toBe(h['shopify-webhook-id']);
    expect((await send('shopify', m.body, h)).json()).toEqual({ inbox_id: first.json().inbox_id, duplicate: true });
  });

  it('deduplicateBy: delivery → two subscriptions (same event id, two webhook ids) are two rows', async () => {
    const m = c.make();
    const a = await send('shopify-delivery', m.body, signed(m));
    const b = await send('shopify-delivery', m.body, { ...signed(m), 'x-shopify-webhook-id': randomUUID() });
    expect([a.status, b.status]).toEqual([200, 200]);
    expect(b.json().duplicate).toBe(false);
    expect((await app.store.getInbox(a.json().inbox_id))!.providerEventId).toBe(m.headers['x-shopify-webhook-id']);
  });

  it.each(['x-shopify-topic', 'x-shopify-event-id', 'x-shopify-webhook-id', 'x-shopify-triggered-at'])(
    'an unsigned %s sent twice → 400 ambiguous_header (the signature was fine), nothing stored', async (name) => {
      const m = c.make();
      const h = signed(m);
      const before = await app.store.countRows();
      const r = await send('shopify', m.body, [...Object.entries(h), [name, h[name] ?? 'x']]);
      expect(r.status, r.text).toBe(400);
      expect(r.json().error).toBe('ambiguous_header');
      expect(await app.store.countRows()).toEqual(before);
    },
  );

  it('an XML-format subscription is refused with 415 (configure JSON deliveries)', async () => {
    const body = Buffer.from('<?xml version="1.0"?><order><id>1</id></order>');
    const r = await send('shopify', body, { ...signed({ body, headers: c.make().headers }), 'content-type': 'application/xml' });
    expect(r.status, r.text).toBe(415);
  });
});
