import { createHmac } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { TrustedKey } from '../../src/crypto/hmac.js';
import { ConfigError } from '../../src/errors.js';
import type { Envelope, ProviderAdapter } from '../../src/providers/contract.js';
import { PROVIDERS } from '../../src/providers/registry.js';
import { expectedFirst, reasonOf, thrownBy, trustedKeys, verifyWith, view } from '../helpers/adapter.js';
import { startTestApp, type TestApp } from '../helpers/app.js';
import { post } from '../helpers/http.js';
import { describeEachStore } from '../helpers/stores.js';
import { checkoutCase } from '../http/cases/checkout.js';

/**
 * Checkout.com publishes no test vector and no official SDK verifies `Cko-Signature`
 * (checkout/checkout-sdk-node manages webhooks/workflows and parses payloads, but has no signer or
 * verifier). The vectors below are computed with node:crypto directly, independently of the
 * adapter and of src/crypto, and the literal digests pin them.
 */
const adapter: ProviderAdapter = PROVIDERS.checkout!(undefined, 'endpoints[0].options');
const SECRET = 'cko-webhook-test';
const keys = (...entries: [string, string, number?][]): TrustedKey[] => trustedKeys(adapter, ...entries);
const check = (sig: string, body: Buffer | string, ks: TrustedKey[], a: ProviderAdapter = adapter, extra: [string, string][] = []) =>
  verifyWith(a, [['Cko-Signature', sig], ...extra], body, ks);
const independent = (secret: string, body: Buffer | string) => createHmac('sha256', Buffer.from(secret, 'utf8')).update(body).digest('hex');

const one = (e: Envelope | readonly Envelope[]): Envelope => {
  if (Array.isArray(e)) throw new Error('expected one envelope');
  return e as Envelope;
};

/** Shape of Checkout.com's documented payment_paid example (docs: webhook-event-types/payment_paid), compacted. */
const PAID = '{"id":"evt_hbnxegj3dqyu5fsd4p2b4bxvpa","type":"payment_paid","version":"1.0.43","created_on":"2024-11-12T17:56:40.889Z","data":{"id":"pay_g2fmfh6hwj4eho5lm7jrxu4pne","reference":"Payouts - US Testing","amount":10,"currency":"USD"}}';
const MULTI = '{"note":"©®™ é 😀"}';

describe('checkout: independently computed vectors (node:crypto, hex HMAC-SHA256 of the raw body)', () => {
  it.each([
    ['payment_paid example', SECRET, PAID, '7cef4ae77b90ff6ec3f2b6027426f19da751c3cb49a715884367d4c9882784c6'],
    ['empty body', SECRET, '', 'cc0c130fd9a6c15b38006962a45a694e422291712058337e75780fc41d4ec1bd'],
    // Checkout.com warns that re-serialising changes ©, ® and ™: sign the bytes.
    ['©®™ and astral characters', 'sk_sbox_3ih4ybzs5b6slkrfwmc2mvjhcun', MULTI, '927911b292ae9a8952977ed1bb6582232695df0f6bc1e70166c4cd909e7f4fec'],
  ])('%s', (_name, secret, payload, expected) => {
    const body = Buffer.from(payload, 'utf8');
    expect(independent(secret, body)).toBe(expected);
    expect(adapter.sign(body, secret, {})).toEqual({ 'cko-signature': expected });
    expect(check(expected, body, keys(['v1', secret]))).toBe('v1');
    expect(check(expected.toUpperCase(), body, keys(['v1', secret]))).toBe('v1');
    expect(check(expected, body, keys(['v1', `${secret}!`]))).toBeNull();
  });

  it('one changed byte, re-serialised JSON (\\u escapes, spacing) or a base64 digest fails', () => {
    const body = Buffer.from('{"id": "evt_1", "type": "payment_captured", "data": {"id": "pay_1", "amount": 1.0, "note": "caf\\u00e9"}}');
    const sig = independent(SECRET, body);
    const tampered = Buffer.from(body);
    tampered[tampered.indexOf('1.0')] = 0x32;
    expect(check(sig, tampered, keys(['v1', SECRET]))).toBeNull();
    expect(check(sig, JSON.stringify(JSON.parse(body.toString('utf8'))), keys(['v1', SECRET]))).toBeNull();
    const b64 = createHmac('sha256', SECRET).update(body).digest('base64');
    expect(reasonOf(() => check(b64, body, keys(['v1', SECRET])))).toBe('malformed_signature');
  });
});

describe('checkout: Cko-Signature parsing', () => {
  const good = independent(SECRET, PAID);

  it('signs no timestamp: no freshness check, metadata timestamp null', () => {
    expect(adapter.defaultToleranceSeconds).toBeNull();
    expect(adapter.parseSignature(view([['cko-signature', good]])).timestamp).toBeNull();
  });

  it.each(expectedFirst<string, [string, string][], string>([
    ['absent header', [], 'missing_signature'],
    ['empty header', [['Cko-Signature', '']], 'missing_signature'],
    ['malformed hex', [['Cko-Signature', 'z'.repeat(64)]], 'malformed_signature'],
    ['odd-length hex', [['Cko-Signature', 'a'.repeat(63)]], 'malformed_signature'],
    ['short digest', [['Cko-Signature', 'a'.repeat(62)]], 'malformed_signature'],
    ['long digest', [['Cko-Signature', 'a'.repeat(66)]], 'malformed_signature'],
    ['a "sha256=" prefix', [['Cko-Signature', `sha256=${'a'.repeat(64)}`]], 'malformed_signature'],
    ['header twice', [['Cko-Signature', good], ['cko-signature', good]], 'ambiguous_signature'],
  ]))('%s → %s', (_name, reason, pairs) => {
    expect(reasonOf(() => adapter.parseSignature(view(pairs)))).toBe(reason);
  });

  it('without options.authorization an Authorization header is ignored (present, absent or wrong)', () => {
    expect(check(good, PAID, keys(['v1', SECRET]), adapter, [['Authorization', 'anything']])).toBe('v1');
    expect(check(good, PAID, keys(['v1', SECRET]))).toBe('v1');
  });

  it('a retired secret never verifies; rotation accepts any trusted version', () => {
    const now = Date.now();
    expect(verifyWith(adapter, [['cko-signature', good]], PAID, keys(['v2', 'new-key'], ['v1', SECRET]), now)).toBe('v1');
    expect(verifyWith(adapter, [['cko-signature', good]], PAID, keys(['v2', 'new-key'], ['v1', SECRET, now]), now)).toBeNull();
  });

  it('refuses an empty secret', () => {
    expect(() => adapter.prepareSecret('')).toThrow(/empty/);
  });
});

describe('checkout: options.authorization (the optional Authorization header key)', () => {
  const withAuth = PROVIDERS.checkout!({ authorization: 'Bearer cko-auth-current' }, 'endpoints[0].options');
  const twoAuth = PROVIDERS.checkout!({ authorization: ['cko-auth-new', 'cko-auth-old'] }, 'endpoints[0].options');
  const good = independent(SECRET, PAID);
  const k = trustedKeys(withAuth, ['v1', SECRET]);

  it('required in addition to the HMAC: both must match', () => {
    expect(check(good, PAID, k, withAuth, [['Authorization', 'Bearer cko-auth-current']])).toBe('v1');
    expect(check(good, PAID, k, withAuth, [['Authorization', 'Bearer cko-auth-wrong']])).toBeNull();
    expect(check(good, PAID, k, withAuth, [['Authorization', 'bearer cko-auth-current']])).toBeNull();
    expect(check(independent('wrong', PAID), PAID, k, withAuth, [['Authorization', 'Bearer cko-auth-current']])).toBeNull();
  });

  it('absent → missing_signature; repeated → ambiguous_signature', () => {
    expect(reasonOf(() => check(good, PAID, k, withAuth))).toBe('missing_signature');
    expect(reasonOf(() => check(good, PAID, k, withAuth, [['Authorization', '']]))).toBe('missing_signature');
    expect(reasonOf(() => check(good, PAID, k, withAuth, [['Authorization', 'Bearer cko-auth-current'], ['authorization', 'Bearer cko-auth-current']]))).toBe('ambiguous_signature');
  });

  it('a non-ASCII key matches the UTF-8 bytes a sender puts in the header (which Node reads as latin1)', () => {
    const accented = PROVIDERS.checkout!({ authorization: 'Bearer clé-ü' }, 'endpoints[0].options');
    const ka = trustedKeys(accented, ['v1', SECRET]);
    const asNodeReadsIt = Buffer.from('Bearer clé-ü', 'utf8').toString('latin1');
    expect(check(good, PAID, ka, accented, [['Authorization', asNodeReadsIt]])).toBe('v1');
    expect(check(good, PAID, ka, accented, [['Authorization', 'Bearer cle-u']])).toBeNull();
  });

  it('a list accepts any of its values (rotating the Authorization key)', () => {
    const k2 = trustedKeys(twoAuth, ['v1', SECRET]);
    expect(check(good, PAID, k2, twoAuth, [['Authorization', 'cko-auth-new']])).toBe('v1');
    expect(check(good, PAID, k2, twoAuth, [['Authorization', 'cko-auth-old']])).toBe('v1');
    expect(check(good, PAID, k2, twoAuth, [['Authorization', 'cko-auth-older']])).toBeNull();
  });

  it('values are secret references (${env:…}, ${file:…}); one that cannot be read is a config error naming the path, not the value', () => {
    process.env.WI_TEST_CKO_AUTH = 'from-env';
    try {
      const a = PROVIDERS.checkout!({ authorization: '${env:WI_TEST_CKO_AUTH}' }, 'p');
      expect(check(good, PAID, trustedKeys(a, ['v1', SECRET]), a, [['Authorization', 'from-env']])).toBe('v1');
    } finally {
      delete process.env.WI_TEST_CKO_AUTH;
    }
    const err = thrownBy(() => PROVIDERS.checkout!({ authorization: ['x', '${env:WI_TEST_CKO_UNSET}'] }, 'endpoints[2].options'), ConfigError);
    expect(err.path).toBe('endpoints[2].options.authorization[1]');
    expect(err.message).toMatch(/WI_TEST_CKO_UNSET is not set/);
    expect(thrownBy(() => PROVIDERS.checkout!({ authorization: [] }, 'p'), ConfigError).path).toBe('p.authorization');
    expect(thrownBy(() => PROVIDERS.checkout!({ authorization: 42 }, 'p'), ConfigError).path).toBe('p.authorization');
    expect(thrownBy(() => PROVIDERS.checkout!({ signatureHeader: 'x' }, 'p'), ConfigError).path).toBe('p.signatureHeader');
  });

  it('sign() adds the first Authorization value (send-sample)', () => {
    expect(withAuth.sign(Buffer.from(PAID), SECRET, {})).toEqual({ 'cko-signature': good, authorization: 'Bearer cko-auth-current' });
  });
});

describe('checkout: redelivery window', () => {
  it('covers a Dashboard/API resend (same evt_ id) of an event up to 90 days old, not only the ~30 h of automatic retries', () => {
    expect(adapter.redeliveryWindowSeconds).toBe(90 * 24 * 60 * 60);
  });
});

describe('checkout: envelope', () => {
  const meta = { timestamp: null };

  it('key = body id (evt_…); type = type; object = data.id; created = created_on', () => {
    expect(one(adapter.envelope(Buffer.from(PAID), view([]), meta))).toEqual({
      eventId: 'evt_hbnxegj3dqyu5fsd4p2b4bxvpa',
      eventType: 'payment_paid',
      objectId: 'pay_g2fmfh6hwj4eho5lm7jrxu4pne',
      objectVersion: null,
      providerCreatedAtMs: Date.parse('2024-11-12T17:56:40.889Z'),
    });
  });

  it('older gateway events carry `timestamp` instead of `created_on`; 7-digit fractions parse', () => {
    const gateway = '{"id":"evt_ppo35tnn7u2edoiexaelcjk5me","source":"gateway","type":"payment_canceled","timestamp":"2021-06-11T11:59:50.071+00:00","data":{"id":"pay_wtdnbqr2oarebnxeudvehbnrki"}}';
    expect(one(adapter.envelope(Buffer.from(gateway), view([]), meta)).providerCreatedAtMs).toBe(Date.parse('2021-06-11T11:59:50.071Z'));
    const fine = '{"id":"evt_1","type":"payment_paid","created_on":"2024-11-12T17:56:40.4885594Z","data":{}}';
    expect(one(adapter.envelope(Buffer.from(fine), view([]), meta))).toMatchObject({ objectId: null, providerCreatedAtMs: Date.parse('2024-11-12T17:56:40.488Z') });
  });

  it.each(expectedFirst<string, string, string>([
    ['not JSON', 'not json', 'malformed_payload'],
    ['a JSON array', '[{"id":"evt_1"}]', 'malformed_payload'],
    ['no id', '{"type":"payment_paid","data":{"id":"pay_1"}}', 'missing_event_id'],
    ['empty id', '{"id":"","type":"payment_paid"}', 'missing_event_id'],
    ['no type', '{"id":"evt_1","data":{"id":"pay_1"}}', 'missing_event_type'],
  ]))('%s → %s', (_name, reason, body) => {
    expect(reasonOf(() => adapter.envelope(Buffer.from(body), view([]), meta))).toBe(reason);
  });

  it('sample() is a valid delivery of this adapter', () => {
    const s = adapter.sample('7');
    const sig = adapter.sign(s.body, SECRET, s.signOptions)['cko-signature']!;
    expect(check(sig, s.body, keys(['v1', SECRET]))).toBe('v1');
    expect(one(adapter.envelope(s.body, view([]), meta))).toMatchObject({ eventId: 'evt_sample_7', eventType: 'payment_approved', objectId: 'pay_sample_7' });
  });
});

describeEachStore('checkout over HTTP: options.authorization', (kind) => {
  let app: TestApp;
  const c = checkoutCase;
  const endpoint = { ...c.config, id: 'checkout-auth', options: { authorization: 'cko-auth-header-key' } };
  beforeAll(async () => {
    app = await startTestApp(kind, { endpoints: [endpoint] });
  });
  afterAll(async () => {
    await app?.stop();
  });

  const send = (h: Record<string, string>, body: Buffer) => post(`${app.url}/webhooks/checkout-auth`, body, h);

  it('right HMAC + right Authorization → accepted; a retry → duplicate', async () => {
    const m = c.make('Zoë ©®™');
    const h = { ...m.headers, ...c.adapter.sign(m.body, c.secrets.v2, {}), authorization: 'cko-auth-header-key' };
    const r = await send(h, m.body);
    expect(r.status, r.text).toBe(200);
    expect((await app.store.getInbox(r.json().inbox_id))).toMatchObject({ providerEventId: m.key, objectId: m.objectId, matchedSecretVersion: 'v2' });
    expect((await send(h, m.body)).json()).toEqual({ inbox_id: r.json().inbox_id, duplicate: true });
  });

  it('right HMAC, wrong or missing Authorization → 401, nothing stored', async () => {
    const m = c.make();
    const h = { ...m.headers, ...c.adapter.sign(m.body, c.secrets.v2, {}) };
    const before = await app.store.countRows();
    const wrong = await send({ ...h, authorization: 'cko-auth-header-kez' }, m.body);
    expect([wrong.status, wrong.json().error]).toEqual([401, 'invalid_signature']);
    const missing = await send(h, m.body);
    expect([missing.status, missing.json().error]).toEqual([401, 'missing_signature']);
    expect(await app.store.countRows()).toEqual(before);
  });
});
