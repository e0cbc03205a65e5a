import Razorpay from 'razorpay';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { hmac, type TrustedKey } from '../../src/crypto/hmac.js';
import { ConfigError } from '../../src/errors.js';
import type { ProviderAdapter } from '../../src/providers/contract.js';
import { PROVIDERS } from '../../src/providers/registry.js';
import { expectedFirst, reasonOf, thrownBy, trustedKeys, verifyWith, view } from '../helpers/adapter.js';
import { startTestApp, type TestApp } from '../helpers/app.js';
import { post } from '../helpers/http.js';
import { describeEachStore } from '../helpers/stores.js';

const adapter: ProviderAdapter = PROVIDERS.razorpay!(undefined, 'endpoints[0].options');
const HEADER = 'x-razorpay-signature';
const ID_HEADER = 'x-razorpay-event-id';
const SECRET = 'rzp-webhook-secret-new';
const OLD_SECRET = 'rzp-webhook-secret-old';

const keys = (...entries: [string, string, number?][]): TrustedKey[] => trustedKeys(adapter, ...entries);
const check = (sig: string, body: Buffer | string, ks: TrustedKey[]) => verifyWith(adapter, [[HEADER, sig]], body, ks);
const hex = (secret: string, body: Buffer | string) => hmac('sha256', Buffer.from(secret, 'utf8'), [body]).toString('hex');
const env = (body: Buffer | string, id: string | null = 'IJsDWyBZzLe1kW') =>
  adapter.envelope(Buffer.from(body), view(id === null ? [] : [[ID_HEADER, id]]), { timestamp: null });

/**
 * razorpay/razorpay-python tests/mocks/fake_payment_authorized_webhook.json (971 bytes, trailing newline); the same
 * fixture backs razorpay/razorpay-ruby test/razorpay/test_utility.rb.
 */
const SDK_FIXTURE = `{
  "event": "payment.authorized",
  "entity": "event",
  "contains": [
    "payment"
  ],
  "payload": {
    "payment": {
      "entity": {
        "id": "pay_6koWN7bvxujzxM",
        "entity": "payment",
        "amount": 1000000,
        "currency": "INR",
        "status": "captured",
        "order_id": "order_100000000order",
        "international": false,
        "method": "card",
        "amount_refunded": 0,
        "refund_status": null,
        "captured": true,
        "description": "random description",
        "card_id": "card_6koWNAT6LASUqy",
        "bank": null,
        "wallet": null,
        "vpa": null,
        "email": "a@b.com",
        "contact": "+919999999999",
        "notes": {
          "merchant_order_id": "random order id"
        },
        "fee": 23000,
        "service_tax": 3000,
        "error_code": null,
        "error_description": null,
        "created_at": 1479978483
      }
    }
  },
  "created_at": 1400826760
}
`;

/** payment.captured as in Razorpay's docs, with spacing, `1.0`, a `\u00e9` escape and multi-byte notes. */
const EVENT = Buffer.from('{"entity": "event", "account_id": "acc_BFQ7uQEaa7j2z7", "event": "payment.captured", "contains": ["payment"], "payload": {"payment": {"entity": {"id": "pay_DESlfW9H8K9uqM", "entity": "payment", "amount": 100, "fee_rate": 1.0, "currency": "INR", "status": "captured", "notes": {"note": "caf\\u00e9 ☕ 東京"}, "created_at": 1567674599}}}, "created_at": 1567674606}\n');

describe('razorpay: published vectors', () => {
  it.each([
    // razorpay/razorpay-node test/utils/razorpay-utils.spec.js (also razorpay-java UtilsTest).
    ['razorpay-node razorpay-utils.spec.js', '{"a":1,"b":2,"c":{"d":3}}', '123456', '2fe04e22977002e6c7cb553adab8b460cb9e2a4970d5953cb27a8472752e3bbc'],
    // razorpay/razorpay-python tests/test_client_utility.py test_verify_webhook_signature (client auth secret "key_secret").
    ['razorpay-python test_verify_webhook_signature', SDK_FIXTURE, 'key_secret', 'd60e67fd884556c045e9be7dad57903e33efc7172c17c6e3ef77db42d2b366e9'],
    // razorpay/razorpay-ruby test/razorpay/test_utility.rb test_webhook_signature_verification.
    ['razorpay-ruby test_webhook_signature_verification', SDK_FIXTURE, 'chosen_webhook_secret', 'dda9ca344c56ccbd90167b1be0fd99dfa92fe2b827020f27e2a46024e31c7c99'],
  ])('%s', (_name, body, secret, expected) => {
    expect(adapter.sign(Buffer.from(body), secret, {})).toEqual({ [HEADER]: expected });
    expect(check(expected, body, keys(['v1', secret]))).toBe('v1');
    expect(check(expected.toUpperCase(), body, keys(['v1', secret]))).toBe('v1');
    expect(check(expected, `${body} `, keys(['v1', secret]))).toBeNull();
    expect(check(expected, body, keys(['v1', `${secret}x`]))).toBeNull();
  });

  it('the SDK fixture without its trailing newline is other bytes: the signature covers exactly what was sent', () => {
    expect(check('d60e67fd884556c045e9be7dad57903e33efc7172c17c6e3ef77db42d2b366e9', SDK_FIXTURE.trimEnd(), keys(['v1', 'key_secret']))).toBeNull();
  });

  it('the SDK suites\' wrong signatures ("sdfafds", "_dummy_signature" × 4, "test_signature") are malformed', () => {
    for (const s of ['sdfafds', '_dummy_signature'.repeat(4), 'test_signature']) {
      expect(reasonOf(() => adapter.parseSignature(view([[HEADER, s]])))).toBe('malformed_signature');
    }
  });

  it('the SDK fixture\'s envelope', () => {
    expect(env(SDK_FIXTURE)).toEqual({ eventId: 'IJsDWyBZzLe1kW', eventType: 'payment.authorized', objectId: 'pay_6koWN7bvxujzxM', objectVersion: null, providerCreatedAtMs: 1400826760_000 });
  });
});

describe('razorpay: cross-checks with the official razorpay SDK (Razorpay.validateWebhookSignature; the SDK has no signer)', () => {
  it('ours → SDK: our signature validates (multi-byte body, Buffer and string); tampered body and wrong secret do not', () => {
    const sig = adapter.sign(EVENT, SECRET, {})[HEADER]!;
    expect(Razorpay.validateWebhookSignature(EVENT.toString('utf8'), sig, SECRET)).toBe(true);
    expect(Razorpay.validateWebhookSignature(EVENT as unknown as string, sig, SECRET)).toBe(true);
    expect(Razorpay.validateWebhookSignature(EVENT.toString('utf8').replace('1.0', '2.0'), sig, SECRET)).toBe(false);
    expect(Razorpay.validateWebhookSignature(EVENT.toString('utf8'), sig, OLD_SECRET)).toBe(false);
  });

  it('SDK → ours: every vector the SDK validates verifies here, and a re-serialised body fails both', () => {
    for (const [body, sig, secret] of [
      ['{"a":1,"b":2,"c":{"d":3}}', '2fe04e22977002e6c7cb553adab8b460cb9e2a4970d5953cb27a8472752e3bbc', '123456'],
      [SDK_FIXTURE, 'd60e67fd884556c045e9be7dad57903e33efc7172c17c6e3ef77db42d2b366e9', 'key_secret'],
      [EVENT.toString('utf8'), hex(SECRET, EVENT), SECRET],
    ] as const) {
      expect(Razorpay.validateWebhookSignature(body, sig, secret)).toBe(true);
      expect(check(sig, body, keys(['v1', secret]))).toBe('v1');
    }
    const sig = adapter.sign(EVENT, SECRET, {})[HEADER]!;
    const reserialised = JSON.stringify(JSON.parse(EVENT.toString('utf8')));
    expect(Razorpay.validateWebhookSignature(reserialised, sig, SECRET)).toBe(false);
    expect(check(sig, reserialised, keys(['v1', SECRET]))).toBeNull();
  });
});

describe('razorpay: X-Razorpay-Signature', () => {
  const good = hex(SECRET, EVENT);

  it.each(expectedFirst([
    ['absent header', null, 'missing_signature'],
    ['empty header', '', 'missing_signature'],
    ['sha256= prefix (GitHub style)', `sha256=${good}`, 'malformed_signature'],
    ['base64 instead of hex', Buffer.from(good, 'hex').toString('base64'), 'malformed_signature'],
    ['odd-length hex', good.slice(1), 'malformed_signature'],
    ['short digest', good.slice(2), 'malformed_signature'],
    ['two digests joined', `${good},${good}`, 'malformed_signature'],
  ]))('%s → %s', (_name, reason, header) => {
    const pairs: [string, string][] = header === null ? [] : [[HEADER, header]];
    expect(reasonOf(() => adapter.parseSignature(view(pairs)))).toBe(reason);
  });

  it('the header sent twice is ambiguous, never joined', () => {
    expect(reasonOf(() => adapter.parseSignature(view([[HEADER, good], ['X-Razorpay-Signature', good]])))).toBe('ambiguous_signature');
  });

  it('no timestamp is signed: nothing for a freshness check', () => {
    expect(adapter.defaultToleranceSeconds).toBeNull();
    expect(adapter.parseSignature(view([['X-Razorpay-Signature', good]])).timestamp).toBeNull();
  });

  it('one changed byte, wrong secret, retired secret', () => {
    const mutated = Buffer.from(EVENT);
    mutated.writeUInt8(mutated.readUInt8(10) ^ 0x01, 10);
    expect(check(good, mutated, keys(['v1', SECRET]))).toBeNull();
    expect(check(good, EVENT, keys(['v1', OLD_SECRET]))).toBeNull();
    const now = Date.now();
    expect(verifyWith(adapter, [[HEADER, good]], EVENT, keys(['v1', SECRET, now]), now)).toBeNull();
  });

  it('rotation: a retry of an event created before the secret change is signed with the OLD secret — both versions verify', () => {
    const k = keys(['v2', SECRET], ['v1', OLD_SECRET]);
    expect(check(hex(SECRET, EVENT), EVENT, k)).toBe('v2');
    expect(check(hex(OLD_SECRET, EVENT), EVENT, k)).toBe('v1');
  });

  it('the secret is used as-is (UTF-8); empty is refused; no options are taken', () => {
    expect(adapter.prepareSecret(SECRET).equals(Buffer.from(SECRET))).toBe(true);
    expect(() => adapter.prepareSecret('')).toThrow(/empty/);
    expect(thrownBy(() => PROVIDERS.razorpay!({ idHeader: 'x' }, 'endpoints[1].options'), ConfigError).path).toBe('endpoints[1].options.idHeader');
  });
});

describe('razorpay: envelope', () => {
  it('key = x-razorpay-event-id header, type = event, object = the payment entity, created_at', () => {
    expect(env(EVENT, 'IJsDWyBZzLe1kW')).toEqual({
      eventId: 'IJsDWyBZzLe1kW', eventType: 'payment.captured', objectId: 'pay_DESlfW9H8K9uqM', objectVersion: null, providerCreatedAtMs: 1567674606_000,
    });
  });

  const ev = (event: string, payload: Record<string, unknown>, contains = Object.keys(payload)) =>
    JSON.stringify({ entity: 'event', account_id: 'acc_1', event, contains, payload, created_at: 1 });
  const ent = (id: string) => ({ entity: { id } });

  it.each([
    ['payment.captured', ev('payment.captured', { payment: ent('pay_1') }), 'pay_1'],
    ['refund.processed → the refund, not its payment', ev('refund.processed', { refund: ent('rfnd_1'), payment: ent('pay_1') }), 'rfnd_1'],
    ['order.paid → the order, not the payment', ev('order.paid', { payment: ent('pay_1'), order: ent('order_1') }), 'order_1'],
    ['subscription.charged → the subscription', ev('subscription.charged', { subscription: ent('sub_1'), payment: ent('pay_1') }), 'sub_1'],
    ['invoice.paid → the invoice', ev('invoice.paid', { payment: ent('pay_1'), order: ent('order_1'), invoice: ent('inv_1') }), 'inv_1'],
    ['payment.dispute.created → the dispute', ev('payment.dispute.created', { payment: ent('pay_1'), dispute: ent('disp_1') }), 'disp_1'],
    ['payment.downtime.started → the "payment.downtime" key', ev('payment.downtime.started', { 'payment.downtime': ent('down_1') }), 'down_1'],
    ['fund_account.validation.completed → the "fund_account.validation" key', ev('fund_account.validation.completed', { 'fund_account.validation': ent('fav_1') }), 'fav_1'],
    ['payment_link.paid → the payment link', ev('payment_link.paid', { payment_link: ent('plink_1'), order: ent('order_1'), payment: ent('pay_1') }), 'plink_1'],
    ['qr_code.credited → the QR code', ev('qr_code.credited', { payment: ent('pay_1'), qr_code: ent('qr_1') }), 'qr_1'],
    ['unknown event name, one contained entity', ev('account.instantly_activated', { merchant: ent('acc_X') }), 'acc_X'],
    ['unknown event name, several entities → null', ev('something.happened', { a: ent('a_1'), b: ent('b_1') }), null],
    ['no payload → null', JSON.stringify({ event: 'payment.captured', created_at: 1 }), null],
    ['payload is an array → null', JSON.stringify({ event: 'payment.captured', payload: [ent('pay_1')] }), null],
    ['entity id not a string → null', ev('payment.captured', { payment: { entity: { id: { x: 1 } } } }), null],
  ])('objectId: %s', (_name, body, expected) => {
    expect(env(body).objectId).toBe(expected);
  });

  it.each([
    ['no x-razorpay-event-id header', EVENT.toString('utf8'), null, 'missing_event_id'],
    ['empty x-razorpay-event-id', EVENT.toString('utf8'), '', 'missing_event_id'],
    ['not JSON', 'not json', 'evt1', 'malformed_payload'],
    ['a JSON array', '[{"event":"payment.captured"}]', 'evt1', 'malformed_payload'],
    ['no event', '{"payload":{}}', 'evt1', 'missing_event_type'],
  ])('%s → %s', (_name, body, id, reason) => {
    expect(reasonOf(() => env(body, id))).toBe(reason);
  });

  it('x-razorpay-event-id sent twice is ambiguous', () => {
    expect(reasonOf(() => adapter.envelope(EVENT, view([[ID_HEADER, 'a'], [ID_HEADER, 'b']]), { timestamp: null }))).toBe('ambiguous_header');
  });

  it('sample() verifies and parses', () => {
    const s = adapter.sample('abc');
    const sig = adapter.sign(s.body, SECRET, s.signOptions)[HEADER]!;
    expect(check(sig, s.body, keys(['v1', SECRET]))).toBe('v1');
    expect(adapter.envelope(s.body, view(Object.entries(s.headers)), { timestamp: null })).toMatchObject({ eventId: 'Evtabc', objectId: 'pay_sampleabc' });
  });
});

describeEachStore('razorpay over HTTP: only the body is signed', (kind) => {
  let app: TestApp;
  beforeAll(async () => {
    app = await startTestApp(kind, { endpoints: [{ id: 'rzp', provider: 'razorpay', secrets: [{ version: 'v2', value: SECRET }, { version: 'v1', value: OLD_SECRET }] }] });
  });
  afterAll(async () => {
    await app?.stop();
  });
  const send = (body: Buffer, headers: Record<string, string> | [string, string][]) => post(`${app.url}/webhooks/rzp`, body, headers);
  const body = () => Buffer.from(EVENT.toString('utf8').replace('pay_DESlfW9H8K9uqM', `pay_${Math.random().toString(36).slice(2, 16)}`));

  it('x-razorpay-event-id is NOT signed: the same signed body under a new event id is a new row (handlers must be idempotent on entity ids)', async () => {
    const b = body();
    const h = { 'content-type': 'application/json', ...adapter.sign(b, SECRET, {}) };
    const first = await send(b, { ...h, [ID_HEADER]: 'EvtFirst000001' });
    expect(first.status, first.text).toBe(200);
    const replay = await send(b, { ...h, [ID_HEADER]: 'EvtReplay00001' });
    expect(replay.status, replay.text).toBe(200);
    expect(replay.json().duplicate).toBe(false);
    const a = await app.store.getInbox(first.json().inbox_id);
    const r = await app.store.getInbox(replay.json().inbox_id);
    expect(a!.payloadHash.equals(r!.payloadHash)).toBe(true);
    expect(r).toMatchObject({ providerEventId: 'EvtReplay00001', objectId: a!.objectId });
  });

  it('a retry keeps x-razorpay-event-id → duplicate, even when signed with the old secret', async () => {
    const b = body();
    const first = await send(b, { 'content-type': 'application/json', [ID_HEADER]: 'EvtRetry000001', ...adapter.sign(b, SECRET, {}) });
    const retry = await send(b, { 'content-type': 'application/json', [ID_HEADER]: 'EvtRetry000001', ...adapter.sign(b, OLD_SECRET, {}) });
    expect(retry.status, retry.text).toBe(200);
    expect(retry.json()).toEqual({ inbox_id: first.json().inbox_id, duplicate: true });
  });

  it('missing x-razorpay-event-id → 400 missing_event_id; twice → 400 ambiguous_header; nothing stored', async () => {
    const b = body();
    const h = { 'content-type': 'application/json', ...adapter.sign(b, SECRET, {}) };
    const before = await app.store.countRows();
    const missing = await send(b, h);
    expect(missing.status, missing.text).toBe(400);
    expect(missing.json().error).toBe('missing_event_id');
    const twice = await send(b, [...Object.entries(h), [ID_HEADER, 'EvtA'], ['X-Razorpay-Event-Id', 'EvtB']]);
    expect(twice.status, twice.text).toBe(400);
    expect(twice.json().error).toBe('ambiguous_header');
    expect(await app.store.countRows()).toEqual(before);
  });

  it('a forged event id cannot pass with a wrong signature: 401 before the key is read', async () => {
    const b = body();
    const r = await send(b, { 'content-type': 'application/json', [ID_HEADER]: 'EvtForged00001', [HEADER]: hex('not-the-secret', b) });
    expect(r.status, r.text).toBe(401);
    expect(r.json().error).toBe('invalid_signature');
  });
});
