import { createHash, createHmac } from 'node:crypto';
import { hmacValidator as HmacValidator } from '@adyen/api-library';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseConfig } from '../../src/config/schema.js';
import { SecretUnavailableError } from '../../src/config/secrets.js';
import { hmac, type TrustedKey } from '../../src/crypto/hmac.js';
import { ConfigError, IngressError } from '../../src/errors.js';
import { signAdyenItem, signedFields, signedString } from '../../src/providers/adyen.js';
import type { ProviderAdapter, SignatureMetadata } from '../../src/providers/contract.js';
import { JsonSliceError, topLevelArrayElements } from '../../src/providers/json-slices.js';
import { PROVIDERS } from '../../src/providers/registry.js';
import type { InboxRow } from '../../src/store/port.js';
import { reasonOf, thrownBy, trustedKeys, view } from '../helpers/adapter.js';
import { configDoc, startTestApp, storedBytes, type TestApp } from '../helpers/app.js';
import { post } from '../helpers/http.js';
import { describeEachStore } from '../helpers/stores.js';

type Item = Record<string, any>;

const adapter: ProviderAdapter = PROVIDERS.adyen!(undefined, 'endpoints[0].options');
const sdk = new HmacValidator();

// Keys: the Adyen SDK test key, the Python SDK test key, and the key of the real test-environment items.
const NODE_SDK_KEY = 'DFB1EB5485895CFA84146406857104ABB4CBCABDC8AAF103A624C8F6A3EAAB00';
const PY_SDK_KEY = '44782DEF547AAA06C910C43932B1EB0C71FC68D9D0C057550C48EC2ACF6BA056';
const PY_MOCK_KEY = '74F490DD33F7327BAECC88B2947C011FC02D014A473AAA33A8EC93E4DC069174';
const KEY_V2 = 'a'.repeat(16) + '0123456789ABCDEF'.repeat(3);
const KEY_V1 = 'b'.repeat(16) + 'FEDCBA9876543210'.repeat(3);
const KEY_V0 = 'c'.repeat(64);
const NOW = 1_700_000_000_000;

const keys = (...entries: [string, string, number?][]): TrustedKey[] => trustedKeys(adapter, ...entries);
const sha256 = (b: Buffer) => createHash('sha256').update(b).digest();

/** A NotificationRequestItem with Adyen's usual shape; `over` replaces fields (undefined deletes). */
function item(over: Item = {}): Item {
  const base: Item = {
    additionalData: { authCode: '058705', cardSummary: '1111', expiryDate: '03/2030' },
    amount: { currency: 'EUR', value: 1000 },
    eventCode: 'AUTHORISATION',
    eventDate: '2023-01-09T16:27:29+01:00',
    merchantAccountCode: 'TestMerchant',
    merchantReference: 'order-1',
    operations: ['CANCEL', 'CAPTURE', 'REFUND'],
    paymentMethod: 'visa',
    pspReference: 'T7FD4VM4D3RZNN82',
    reason: '058705:1111:03/2030',
    success: 'true',
  };
  const out: Item = { ...base, ...over };
  for (const [k, v] of Object.entries(over)) if (v === undefined) delete out[k];
  return out;
}

/** The item with additionalData.hmacSignature set by the official SDK (independent of our signer). */
function sdkSigned(it: Item, key: string): Item {
  return { ...it, additionalData: { ...(it.additionalData ?? {}), hmacSignature: sdk.calculateHmac(it as any, key) } };
}

/**
 * A delivery as Adyen sends it, pretty-printed; `elements` are the exact texts of the array
 * elements (so a test knows the bytes each row must hold). `edit` may rewrite an element's text.
 */
function delivery(items: Item[], edit: (text: string, i: number) => string = (t) => t): { body: Buffer; elements: string[] } {
  const elements = items.map((it, i) => edit(JSON.stringify({ NotificationRequestItem: it }, null, 2).replaceAll('\n', '\n    '), i));
  const body = `{\n  "live": "false",\n  "notificationItems": [\n    ${elements.join(',\n    ')}\n  ]\n}\n`;
  return { body: Buffer.from(body, 'utf8'), elements };
}

/** parseSignature + verify as the pipeline does; returns the meta too (verify stashes the parse on it). */
function check(body: Buffer, ks: TrustedKey[], headers: [string, string][] = [], a = adapter, nowMs = NOW): { version: string | null; meta: SignatureMetadata } {
  const meta = a.parseSignature(view(headers));
  const r = a.verify(meta, body, ks, nowMs);
  if (r instanceof Promise) throw new Error('adyen verifies synchronously');
  return { version: r?.version ?? null, meta };
}
const versionOf = (body: Buffer, ks: TrustedKey[]) => check(body, ks).version;

describe('adyen: published HMAC vectors', () => {
  it('Adyen/adyen-node-api-library hmacValidator.spec.ts: CAPTURE item (current) and EVENT item (../shared/providers.md)', () => {
    const base = { pspReference: 'pspReference', originalReference: 'originalReference', merchantAccountCode: 'merchantAccount', merchantReference: 'reference', amount: { currency: 'EUR', value: 1000 }, success: 'true' };
    const capture = { ...base, eventCode: 'CAPTURE' };
    expect(signedString(signedFields(capture))).toBe('pspReference:originalReference:merchantAccount:reference:1000:EUR:CAPTURE:true');
    expect(signAdyenItem(capture, NODE_SDK_KEY)).toBe('xhpHvYq2u2Np0rstbZ6QjLGu7JWhvf7Iwaa6EviJSX0=');
    const event = { ...base, eventCode: 'EVENT' };
    expect(signedString(signedFields(event))).toBe('pspReference:originalReference:merchantAccount:reference:1000:EUR:EVENT:true');
    expect(signAdyenItem(event, NODE_SDK_KEY)).toBe('ipnxGCaUZ4l8TUW75a71/ghd2Fe5ffvX0pV4TLTntIc=');
  });

  it('Adyen/adyen-node-api-library: the raw HMAC primitive (hex key, UTF-8 data, base64 digest)', () => {
    const data = 'countryCode:currencyCode:merchantAccount:merchantReference:paymentAmount:sessionValidity:skinCode:NL:EUR:MagentoMerchantTest2:TEST-PAYMENT-2017-02-01-14\\:02\\:05:199:2017-02-02T14\\:02\\:05+01\\:00:PKz2KML1';
    expect(hmac('sha256', adapter.prepareSecret(NODE_SDK_KEY), [data]).toString('base64')).toBe('34oR8T1whkQWTv9P+SzKyp8zhusf9n0dpqrm9nsqSJs=');
  });

  it('Adyen/adyen-python-api-library test/UtilTest.py: AUTHORISATION without originalReference (missing → empty)', () => {
    const it = { pspReference: '7914073381342284', merchantReference: 'TestPayment-1407325143704', merchantAccountCode: 'TestMerchant', amount: { currency: 'EUR', value: 1130 }, eventCode: 'AUTHORISATION', success: 'true', eventDate: '2019-05-06T17:15:34.121+02:00', operations: ['CANCEL', 'CAPTURE', 'REFUND'], paymentMethod: 'visa' };
    expect(signedString(signedFields(it))).toBe('7914073381342284::TestMerchant:TestPayment-1407325143704:1130:EUR:AUTHORISATION:true');
    expect(signAdyenItem(it, PY_SDK_KEY)).toBe('coqCmt/IZ4E3CzPvMY8zTjQVL5hYJUiBRg8UU+iCWo0=');
  });

  // Adyen/adyen-python-api-library test/mocks/util/{backslash,colon,forwardslash}_notification.json: items
  // generated by Adyen's test environment (key 74F490DD…), merchantReference with `\\`, `:` and `//`.
  const REAL: [string, string, string, string][] = [
    ['backslashes', 'T7FD4VM4D3RZNN82', '"\\\\\\\\slashes are fun"', 'nIgT81gaB5oJpn2jPXupDq68iRo2wUlBsuYjtYfwKqo='],
    ['colon', 'M8NB66SBZSGLNK82', '":slashes are fun"', '2EQYm7YJpKO4EtHSPu55SQTyWf8dkW5u2nD1tJFpViA='],
    ['forward slashes', 'X3GWNS6KJ8NKGK82', '"//slashes are fun"', '9Z0xdpG9Xi3zcmXv14t/BvMBut77O/Xq9D4CQXSDUi4='],
  ];
  const realElement = ([, psp, ref, sig]: (typeof REAL)[number]) =>
    `{\n      "NotificationRequestItem": {\n        "additionalData": {\n          "authCode": "076181",\n          "hmacSignature": "${sig}",\n` +
    `          "retry.attempt1.rawResponse": "AUTHORISED"\n        },\n        "amount": {\n          "currency": "EUR",\n          "value": 1000\n        },\n` +
    `        "eventCode": "AUTHORISATION",\n        "eventDate": "2023-01-10T13:40:54+01:00",\n        "merchantAccountCode": "AntoniStroinski",\n` +
    `        "merchantReference": ${ref},\n        "pspReference": "${psp}",\n        "reason": "076181:1111:03/2030",\n        "success": "true"\n      }\n    }`;

  it.each(REAL)('real Adyen test item (%s) verifies on its own', (_n, psp, ref, sig) => {
    const body = Buffer.from(`{"live":"false","notificationItems":[${realElement(['', psp, ref, sig])}]}`);
    expect(versionOf(body, keys(['v1', PY_MOCK_KEY]))).toBe('v1');
    expect(versionOf(body, keys(['v1', PY_SDK_KEY]))).toBeNull();
  });

  it('the three real items in one delivery: all verify, three envelopes, each payload the exact element bytes', () => {
    const elements = REAL.map(realElement);
    const body = Buffer.from(`{\n  "live": "false",\n  "notificationItems": [\n    ${elements.join(',\n    ')}\n  ]\n}`);
    const { version, meta } = check(body, keys(['v1', PY_MOCK_KEY]));
    expect(version).toBe('v1');
    const envs = adapter.envelopes!(body, view([]), meta);
    expect(envs.map((e) => e.eventId)).toEqual(['T7FD4VM4D3RZNN82:AUTHORISATION:true', 'M8NB66SBZSGLNK82:AUTHORISATION:true', 'X3GWNS6KJ8NKGK82:AUTHORISATION:true']);
    envs.forEach((e, i) => expect(e.payload!.toString('utf8')).toBe(elements[i]));
    expect(JSON.parse(envs[0]!.payload!.toString()).NotificationRequestItem.merchantReference).toBe('\\\\slashes are fun');
  });
});

describe('adyen: cross-checks with the official @adyen/api-library HmacValidator', () => {
  const ITEMS: [string, Item][] = [
    ['a plain authorisation', item()],
    ['a refund with originalReference', item({ eventCode: 'REFUND', pspReference: 'QFQTPCQ8HXSKGK82', originalReference: 'T7FD4VM4D3RZNN82', amount: { currency: 'EUR', value: 250 } })],
    ['null originalReference and merchantReference', item({ originalReference: null, merchantReference: null })],
    ['success false', item({ success: 'false', reason: 'Refused' })],
    ['multi-byte merchantReference', item({ merchantReference: 'Zoë 😀 東京 — naïve\u2028𝄞' })],
    ['colons and backslashes in merchantReference', item({ merchantReference: 'a:b\\:c\\\\' })],
    ['amount 0', item({ amount: { currency: 'JPY', value: 0 } })],
  ];

  it.each(ITEMS)('%s: the same signed string as SDK getDataToSign', (_n, it) => {
    expect(signedString(signedFields(it))).toBe(sdk.getDataToSign(it as any));
  });

  it.each(ITEMS)('SDK → ours: %s signed by calculateHmac verifies; wrong key does not', (_n, it) => {
    const { body } = delivery([sdkSigned(it, KEY_V2)]);
    expect(versionOf(body, keys(['v2', KEY_V2]))).toBe('v2');
    expect(versionOf(body, keys(['v1', KEY_V1]))).toBeNull();
  });

  it.each(ITEMS)('ours → SDK: %s signed by signAdyenItem passes validateHMAC; a changed signed field fails both', (_n, it) => {
    const sig = signAdyenItem(it, KEY_V2);
    expect(sig).toBe(sdk.calculateHmac(it as any, KEY_V2));
    const signedItem = { ...it, additionalData: { ...(it.additionalData ?? {}), hmacSignature: sig } };
    expect(sdk.validateHMAC(signedItem as any, KEY_V2)).toBe(true);
    expect(sdk.validateHMAC(signedItem as any, KEY_V1)).toBe(false);
    const changed = { ...signedItem, merchantAccountCode: 'OtherMerchant' };
    expect(sdk.validateHMAC(changed as any, KEY_V2)).toBe(false);
    expect(versionOf(delivery([changed]).body, keys(['v2', KEY_V2]))).toBeNull();
  });
});

describe('adyen: verification (every item, in the body)', () => {
  const k = () => keys(['v2', KEY_V2]);

  it('one delivery of three items verifies only when EVERY item does', () => {
    const good = [item({ pspReference: 'AAAAAAAAAAAAAAA1' }), item({ pspReference: 'AAAAAAAAAAAAAAA2' }), item({ pspReference: 'AAAAAAAAAAAAAAA3' })].map((it) => sdkSigned(it, KEY_V2));
    expect(versionOf(delivery(good).body, k())).toBe('v2');
    for (let bad = 0; bad < 3; bad++) {
      const items = good.map((it, i) => (i === bad ? sdkSigned(it, KEY_V1) : it));
      expect(versionOf(delivery(items).body, k())).toBeNull();
    }
  });

  it('a one-byte change in any signed field fails', () => {
    const it = sdkSigned(item({ originalReference: 'ORIGINAL12345678' }), KEY_V2);
    const { body } = delivery([it]);
    expect(versionOf(body, k())).toBe('v2');
    const flips: [string, string][] = [
      ['"T7FD4VM4D3RZNN82"', '"T7FD4VM4D3RZNN83"'], // pspReference
      ['"ORIGINAL12345678"', '"ORIGINAL12345679"'], // originalReference
      ['"TestMerchant"', '"TestMerchanu"'], // merchantAccountCode
      ['"order-1"', '"order-2"'], // merchantReference
      ['"value": 1000', '"value": 1001'], // amount.value
      ['"EUR"', '"EUS"'], // amount.currency
      ['"AUTHORISATION"', '"AUTHORISATIOM"'], // eventCode
      ['"success": "true"', '"success": "trUe"'], // success
    ];
    for (const [from, to] of flips) {
      expect(body.includes(from), from).toBe(true);
      expect(versionOf(Buffer.from(body.toString().replace(from, to)), k()), from).toBeNull();
    }
  });

  it('ADYEN PROTOCOL: changes OUTSIDE the eight signed fields still verify (additionalData, eventDate, reason, live, spacing)', () => {
    const it = sdkSigned(item(), KEY_V2);
    const { body } = delivery([it]);
    const outside: [string, string][] = [
      ['"authCode": "058705"', '"authCode": "999999"'],
      ['"eventDate": "2023-01-09T16:27:29+01:00"', '"eventDate": "2030-01-01T00:00:00+01:00"'],
      ['"reason": "058705:1111:03/2030"', '"reason": "anything"'],
      ['"paymentMethod": "visa"', '"paymentMethod": "mc"'],
      ['"live": "false"', '"live": "true"'],
      ['"value": 1000', '"value":1000'],
    ];
    for (const [from, to] of outside) {
      expect(body.includes(from), from).toBe(true);
      expect(versionOf(Buffer.from(body.toString().replace(from, to)), k()), from).toBe('v2');
    }
    // Escaping a signed value differently is the same value, so the same signature.
    expect(versionOf(Buffer.from(body.toString().replace('"order-1"', '"\\u006frder-1"')), k())).toBe('v2');
  });

  it('colons cannot move between signed fields: a shifted item with the SAME signed string is refused', () => {
    const original = item({ pspReference: 'PSP0000000000001', originalReference: '', merchantAccountCode: 'Merchant', merchantReference: 'x:y' });
    const it = sdkSigned(original, KEY_V2);
    expect(versionOf(delivery([it]).body, k())).toBe('v2');
    // "PSP0000000000001::Merchant:x:y:…" also reads as pspReference "PSP0000000000001:" + originalReference "Merchant" + …
    const shifted = { ...it, pspReference: 'PSP0000000000001:', originalReference: 'Merchant', merchantAccountCode: 'x', merchantReference: 'y' };
    expect(sdk.getDataToSign(shifted as any)).toBe(sdk.getDataToSign(original as any));
    expect(sdk.validateHMAC(shifted as any, KEY_V2)).toBe(true); // the SDK would accept it…
    expect(reasonOf(() => versionOf(delivery([shifted]).body, k()))).toBe('malformed_payload'); // …we do not
    const intoValue = { ...it, merchantReference: 'x', amount: { currency: 'EUR', value: 'y:1000' } };
    expect(reasonOf(() => versionOf(delivery([intoValue]).body, k()))).toBe('malformed_payload');
  });

  it('secret rotation: each item may match any trusted version; the reported version is the last-listed one needed', () => {
    const a = sdkSigned(item({ pspReference: 'AAAAAAAAAAAAAAA1' }), KEY_V2);
    const b = sdkSigned(item({ pspReference: 'AAAAAAAAAAAAAAA2' }), KEY_V1);
    const rotation = keys(['v2', KEY_V2], ['v1', KEY_V1]);
    expect(versionOf(delivery([a]).body, rotation)).toBe('v2');
    expect(versionOf(delivery([b]).body, rotation)).toBe('v1');
    expect(versionOf(delivery([a, b]).body, rotation)).toBe('v1');
    expect(versionOf(delivery([b, a]).body, rotation)).toBe('v1');
    // …while each item's row records the version that verified that item.
    const mixed = delivery([a, b]).body;
    const { meta } = check(mixed, rotation);
    expect(adapter.envelopes!(mixed, view([]), meta).map((e) => e.secretVersion)).toEqual(['v2', 'v1']);
    expect(versionOf(delivery([a, b]).body, keys(['v2', KEY_V2]))).toBeNull();
    // A retired version never verifies.
    expect(versionOf(delivery([b]).body, keys(['v2', KEY_V2], ['v1', KEY_V1, NOW]))).toBeNull();
    expect(versionOf(delivery([b]).body, keys(['v2', KEY_V2], ['v1', KEY_V1, NOW + 1]))).toBe('v1');
  });

  it.each([
    ['not JSON', 'not json', 'malformed_payload'],
    ['invalid UTF-8', Buffer.from([0x7b, 0x22, 0xff, 0x22, 0x3a, 0x31, 0x7d]), 'malformed_payload'],
    ['a UTF-8 byte-order mark before the object (JSON.parse refuses it, as for every adapter)', Buffer.from('\ufeff{"notificationItems":[{"NotificationRequestItem":{"additionalData":{"hmacSignature":"x"}}}]}'), 'malformed_payload'],
    ['a JSON array', '[]', 'malformed_payload'],
    ['no notificationItems', '{"live":"false"}', 'malformed_payload'],
    ['notificationItems not an array', '{"notificationItems":{}}', 'malformed_payload'],
    ['empty notificationItems', '{"notificationItems":[]}', 'malformed_payload'],
    ['an element without NotificationRequestItem', '{"notificationItems":[{"pspReference":"A"}]}', 'malformed_payload'],
    ['additionalData not an object', '{"notificationItems":[{"NotificationRequestItem":{"additionalData":"x"}}]}', 'malformed_payload'],
    ['no additionalData', '{"notificationItems":[{"NotificationRequestItem":{"pspReference":"A"}}]}', 'missing_signature'],
    ['no hmacSignature', '{"notificationItems":[{"NotificationRequestItem":{"additionalData":{}}}]}', 'missing_signature'],
    ['empty hmacSignature', '{"notificationItems":[{"NotificationRequestItem":{"additionalData":{"hmacSignature":""}}}]}', 'missing_signature'],
    ['null hmacSignature', '{"notificationItems":[{"NotificationRequestItem":{"additionalData":{"hmacSignature":null}}}]}', 'missing_signature'],
    ['numeric hmacSignature', '{"notificationItems":[{"NotificationRequestItem":{"additionalData":{"hmacSignature":1}}}]}', 'malformed_signature'],
    ['hmacSignature not base64', '{"notificationItems":[{"NotificationRequestItem":{"additionalData":{"hmacSignature":"not base64!"}}}]}', 'malformed_signature'],
    ['hmacSignature of 31 bytes', `{"notificationItems":[{"NotificationRequestItem":{"additionalData":{"hmacSignature":"${Buffer.alloc(31).toString('base64')}"}}}]}`, 'malformed_signature'],
  ])('%s → %s', (_n, body, reason) => {
    expect(reasonOf(() => versionOf(Buffer.from(body), keys(['v2', KEY_V2])))).toBe(reason);
  });

  it('one item without a signature rejects the whole delivery (missing_signature), wherever it is', () => {
    const good = sdkSigned(item(), KEY_V2);
    const unsigned = item({ pspReference: 'AAAAAAAAAAAAAAA9' });
    expect(reasonOf(() => versionOf(delivery([good, unsigned]).body, keys(['v2', KEY_V2])))).toBe('missing_signature');
    expect(thrownBy(() => versionOf(delivery([good, unsigned]).body, keys(['v2', KEY_V2])), IngressError).detail).toBe('notificationItems[1] has no additionalData.hmacSignature');
  });

  it.each([
    ['pspReference with ":"', { pspReference: 'A:B' }],
    ['originalReference with ":"', { originalReference: 'A:B' }],
    ['merchantAccountCode with ":"', { merchantAccountCode: 'M:1' }],
    ['eventCode with ":"', { eventCode: 'REFUND:X' }],
    ['success with ":"', { success: 'true:' }],
    ['numeric pspReference', { pspReference: 1234 }],
    ['amount not an object', { amount: 1000 }],
    ['amount.value a string', { amount: { currency: 'EUR', value: '1000' } }],
    ['amount.value a fraction', { amount: { currency: 'EUR', value: 10.5 } }],
    ['amount.value beyond 2^53', { amount: { currency: 'EUR', value: 2 ** 53 } }],
    ['amount.currency with ":"', { amount: { currency: 'E:R', value: 1 } }],
  ])('signed field not in Adyen form: %s → malformed_payload', (_n, over) => {
    const it = { ...item(over), additionalData: { hmacSignature: Buffer.alloc(32).toString('base64') } };
    expect(reasonOf(() => versionOf(delivery([it]).body, keys(['v2', KEY_V2])))).toBe('malformed_payload');
  });

  it('a colon IS allowed in merchantReference (the merchant\'s free text) and a JSON boolean success signs as "true"', () => {
    expect(versionOf(delivery([sdkSigned(item({ merchantReference: 'a:b:c' }), KEY_V2)]).body, keys(['v2', KEY_V2]))).toBe('v2');
    const boolSuccess = { ...item(), success: true };
    const sig = createHmac('sha256', Buffer.from(KEY_V2, 'hex')).update(signedString(signedFields(item()))).digest('base64');
    expect(versionOf(delivery([{ ...boolSuccess, additionalData: { hmacSignature: sig } }]).body, keys(['v2', KEY_V2]))).toBe('v2');
  });
});

describe('adyen: items without an amount', () => {
  it('REPORT_AVAILABLE without amount signs value and currency as empty strings (the SDK cannot: it dereferences amount)', () => {
    const it = item({ eventCode: 'REPORT_AVAILABLE', amount: undefined, pspReference: 'settlement_detail_report_batch_1.csv', merchantReference: '' });
    expect(signedString(signedFields(it))).toBe('settlement_detail_report_batch_1.csv::TestMerchant::::REPORT_AVAILABLE:true');
    expect(() => sdk.getDataToSign(it as any)).toThrow(TypeError);
    const sig = createHmac('sha256', Buffer.from(KEY_V2, 'hex')).update('settlement_detail_report_batch_1.csv::TestMerchant::::REPORT_AVAILABLE:true').digest('base64');
    expect(signAdyenItem(it, KEY_V2)).toBe(sig);
    expect(versionOf(delivery([{ ...it, additionalData: { hmacSignature: sig } }]).body, keys(['v2', KEY_V2]))).toBe('v2');
    expect(versionOf(delivery([{ ...it, amount: null, additionalData: { hmacSignature: sig } }]).body, keys(['v2', KEY_V2]))).toBe('v2');
  });
});

describe('adyen: secrets and headers', () => {
  it('the key is HEX-decoded (not its UTF-8 bytes)', () => {
    expect(adapter.prepareSecret(NODE_SDK_KEY).equals(Buffer.from(NODE_SDK_KEY, 'hex'))).toBe(true);
    expect(adapter.prepareSecret(NODE_SDK_KEY.toLowerCase()).equals(Buffer.from(NODE_SDK_KEY, 'hex'))).toBe(true);
  });

  it.each([
    ['not hex', 'z'.repeat(64)],
    ['odd length', 'a'.repeat(63)],
    ['base64 pasted instead', Buffer.alloc(32, 1).toString('base64')],
    ['too short (15 bytes)', 'ab'.repeat(15)],
    ['empty', ''],
    ['surrounding spaces', ` ${NODE_SDK_KEY} `],
  ])('refuses a secret that is %s', (_n, s) => {
    expect(() => adapter.prepareSecret(s)).toThrow(/hex/);
  });

  it('without Basic auth, no header is needed: parseSignature reads headers only and signs no timestamp', () => {
    expect(adapter.defaultToleranceSeconds).toBeNull();
    expect(adapter.parseSignature(view([]))).toEqual({ timestamp: null, basic: null });
    expect(adapter.sign(Buffer.from('{}'), KEY_V2, {})).toEqual({});
  });

  describe('optional HTTP Basic auth (options.basicAuth), in addition to the HMAC', () => {
    const basic = PROVIDERS.adyen!({ basicAuth: [{ username: 'adyen', password: 'n3w-pässword' }, { username: 'adyen', password: 'old' }] }, 'endpoints[0].options');
    const auth = (user: string, pass: string) => `Basic ${Buffer.from(`${user}:${pass}`, 'utf8').toString('base64')}`;
    const body = delivery([sdkSigned(item(), KEY_V2)]).body;
    const ks = keys(['v2', KEY_V2]);

    it('right credentials (either listed one) + right HMAC verify; sign() sends the first', () => {
      expect(check(body, ks, [['Authorization', auth('adyen', 'n3w-pässword')]], basic).version).toBe('v2');
      expect(check(body, ks, [['authorization', auth('adyen', 'old')]], basic).version).toBe('v2');
      expect(check(body, ks, [['authorization', `bAsIc   ${Buffer.from('adyen:old').toString('base64')}`]], basic).version).toBe('v2');
      expect(basic.sign(body, KEY_V2, {})).toEqual({ authorization: auth('adyen', 'n3w-pässword') });
    });

    it('wrong credentials → not verified even with a right HMAC; right credentials do not rescue a wrong HMAC', () => {
      expect(check(body, ks, [['authorization', auth('adyen', 'wrong')]], basic).version).toBeNull();
      expect(check(body, ks, [['authorization', auth('Adyen', 'old')]], basic).version).toBeNull();
      expect(check(body, keys(['v1', KEY_V1]), [['authorization', auth('adyen', 'old')]], basic).version).toBeNull();
    });

    it('wrong credentials are refused before the body is parsed (no parse error for an unauthenticated caller)', () => {
      expect(check(Buffer.from('not json'), ks, [['authorization', auth('adyen', 'wrong')]], basic).version).toBeNull();
    });

    it.each([
      ['absent', null, 'missing_signature'],
      ['empty', '', 'missing_signature'],
      ['Bearer scheme', 'Bearer abc', 'malformed_signature'],
      ['not base64', 'Basic !!!!', 'malformed_signature'],
      ['no colon in credentials', `Basic ${Buffer.from('adyen').toString('base64')}`, 'malformed_signature'],
    ])('Authorization %s → %s', (_n, header, reason) => {
      expect(reasonOf(() => basic.parseSignature(view(header === null ? [] : [['authorization', header]])))).toBe(reason);
    });

    it('Authorization twice → ambiguous_signature', () => {
      const h = auth('adyen', 'old');
      expect(reasonOf(() => basic.parseSignature(view([['authorization', h], ['Authorization', h]])))).toBe('ambiguous_signature');
    });

    it('the credentials are re-read with the endpoint secrets (optionSecrets.reload): a new password applies at once; a bad value throws naming its path, all or nothing', () => {
      const env: NodeJS.ProcessEnv = { ...process.env, ADYEN_TEST_RELOAD_PASSWORD: 'first' };
      process.env.ADYEN_TEST_RELOAD_PASSWORD = 'first';
      try {
        const reloading = PROVIDERS.adyen!({ basicAuth: { username: 'adyen', password: '${env:ADYEN_TEST_RELOAD_PASSWORD}' } }, 'endpoints[3].options');
        expect(check(body, ks, [['authorization', auth('adyen', 'first')]], reloading).version).toBe('v2');
        reloading.optionSecrets!.reload({ ...env, ADYEN_TEST_RELOAD_PASSWORD: 'second' });
        expect(check(body, ks, [['authorization', auth('adyen', 'second')]], reloading).version).toBe('v2');
        expect(check(body, ks, [['authorization', auth('adyen', 'first')]], reloading).version).toBeNull();
        const gone = thrownBy(() => reloading.optionSecrets!.reload({}), SecretUnavailableError);
        expect(gone.path).toBe('endpoints[3].options.basicAuth.password');
        const withColon = PROVIDERS.adyen!({ basicAuth: { username: '${env:ADYEN_TEST_RELOAD_PASSWORD}', password: 'p' } }, 'endpoints[4].options');
        expect(thrownBy(() => withColon.optionSecrets!.reload({ ADYEN_TEST_RELOAD_PASSWORD: 'a:b' }), SecretUnavailableError).path).toBe('endpoints[4].options.basicAuth.username');
        expect(check(body, ks, [['authorization', auth('first', 'p')]], withColon).version).toBe('v2'); // the last good values stay
      } finally {
        delete process.env.ADYEN_TEST_RELOAD_PASSWORD;
      }
    });

    it('a colon is refused in a username only, by its place in the pair: a password may hold one (HTTP Basic splits at the first)', () => {
      const colonPassword = PROVIDERS.adyen!({ basicAuth: [{ username: 'adyen', password: 'old' }, { username: 'adyen', password: 'a:b:c' }] }, 'endpoints[0].options');
      expect(check(body, ks, [['authorization', auth('adyen', 'a:b:c')]], colonPassword).version).toBe('v2');
      expect(check(body, ks, [['authorization', auth('adyen', 'a:b')]], colonPassword).version).toBeNull();
      const second = thrownBy(() => PROVIDERS.adyen!({ basicAuth: [{ username: 'u', password: 'p:q' }, { username: 'v:w', password: 'p' }] }, 'endpoints[0].options'), ConfigError);
      expect(second.path).toBe('endpoints[0].options.basicAuth[1].username');
    });

    it('config: unknown keys, a colon in the username, an empty list and a missing env reference are config errors', () => {
      const f = PROVIDERS.adyen!;
      expect(thrownBy(() => f({ basicAuth: { username: 'a', password: 'b', realm: 'x' } }, 'endpoints[0].options'), ConfigError).path).toBe('endpoints[0].options.basicAuth.realm');
      expect(thrownBy(() => f({ basicAuth: { username: 'a:b', password: 'c' } }, 'endpoints[0].options'), ConfigError).path).toBe('endpoints[0].options.basicAuth.username');
      expect(thrownBy(() => f({ basicAuth: [] }, 'endpoints[0].options'), ConfigError).path).toBe('endpoints[0].options.basicAuth');
      expect(thrownBy(() => f({ basicAuth: { username: 'a' } }, 'endpoints[0].options'), ConfigError).path).toBe('endpoints[0].options.basicAuth.password');
      expect(thrownBy(() => f({ basicAuth: { username: 'a', password: '${env:ADYEN_TEST_UNSET_PASSWORD}' } }, 'endpoints[0].options'), ConfigError).path).toBe('endpoints[0].options.basicAuth.password');
      expect(thrownBy(() => f({ other: 1 }, 'endpoints[0].options'), ConfigError).path).toBe('endpoints[0].options.other');
    });

    it('the endpoint config accepts provider adyen with hex secrets and basicAuth', () => {
      const cfg = parseConfig(configDoc('sqlite::memory:', {
        endpoints: [{ id: 'adyen', provider: 'adyen', secrets: [{ version: 'v1', value: KEY_V1 }], options: { basicAuth: { username: 'u', password: 'p' } } }],
      }), {});
      expect(cfg.endpoints[0]!.adapter.name).toBe('adyen');
    });
  });
});

describe('adyen: envelopes (verified items → logical events)', () => {
  const payment = 'PAYMENT000000001';
  const items = [
    item({ pspReference: payment, eventCode: 'AUTHORISATION', eventDate: '2024-03-01T10:00:00+01:00' }),
    item({ pspReference: 'REFUND0000000001', originalReference: payment, eventCode: 'REFUND', amount: { currency: 'EUR', value: 300 }, eventDate: '2024-03-02T10:00:00+01:00' }),
    item({ pspReference: 'REFUND0000000002', originalReference: payment, eventCode: 'REFUND', amount: { currency: 'EUR', value: 200 }, success: 'false', eventDate: 'not a date' }),
  ].map((it) => sdkSigned(it, KEY_V2));

  it('one envelope per item: key pspReference:eventCode:success, type eventCode, object = the payment, eventDate as evidence, exact bytes', () => {
    const { body, elements } = delivery(items, (t, i) => (i === 1 ? t.replace('"TestMerchant"', '"Test\\u004derchant"') : t));
    const { version, meta } = check(body, keys(['v2', KEY_V2]));
    expect(version).toBe('v2');
    const envs = adapter.envelopes!(body, view([]), meta);
    expect(envs.map(({ payload, ...e }) => e)).toEqual([
      { eventId: `${payment}:AUTHORISATION:true`, eventType: 'AUTHORISATION', objectId: payment, objectVersion: '2024-03-01T09:00:00.000Z', providerCreatedAtMs: Date.parse('2024-03-01T09:00:00Z'), secretVersion: 'v2' },
      { eventId: 'REFUND0000000001:REFUND:true', eventType: 'REFUND', objectId: payment, objectVersion: '2024-03-02T09:00:00.000Z', providerCreatedAtMs: Date.parse('2024-03-02T09:00:00Z'), secretVersion: 'v2' },
      { eventId: 'REFUND0000000002:REFUND:false', eventType: 'REFUND', objectId: payment, objectVersion: null, providerCreatedAtMs: null, secretVersion: 'v2' },
    ]);
    envs.forEach((e, i) => {
      expect(e.payload!.equals(Buffer.from(elements[i]!, 'utf8'))).toBe(true);
      expect(body.indexOf(e.payload!)).toBeGreaterThan(0);
    });
    expect(adapter.envelope(body, view([]), meta)).toEqual(envs[0]);
  });

  it('envelopes reuses the parse verify stashed on the metadata (same body); a different Buffer is parsed again', () => {
    const { body } = delivery(items);
    const { meta } = check(body, keys(['v2', KEY_V2]));
    const stash = (meta as any).parsed;
    expect(stash.body).toBe(body);
    // Tamper with the stash: envelopes must use it rather than parse the body again.
    (meta as any).parsed = { ...stash, items: stash.items.map((it: any) => ({ ...it, fields: { ...it.fields, eventCode: 'FROM_STASH' } })) };
    expect(adapter.envelopes!(body, view([]), meta).map((e) => e.eventType)).toEqual(['FROM_STASH', 'FROM_STASH', 'FROM_STASH']);
    expect(adapter.envelopes!(Buffer.from(body), view([]), meta).map((e) => e.eventType)).toEqual(['AUTHORISATION', 'REFUND', 'REFUND']);
  });

  it('a verify that fails stashes nothing', () => {
    const { body } = delivery(items);
    const { version, meta } = check(body, keys(['v1', KEY_V1]));
    expect(version).toBeNull();
    expect((meta as any).parsed).toBeUndefined();
  });

  it.each([
    ['no pspReference', { pspReference: undefined }, 'missing_event_id'],
    ['empty pspReference', { pspReference: '' }, 'missing_event_id'],
    ['no eventCode', { eventCode: undefined }, 'missing_event_type'],
  ])('%s (signed that way) → %s, nothing of the delivery is stored', (_n, over, reason) => {
    const { body } = delivery([items[0]!, sdkSigned(item(over), KEY_V2)]);
    const { version, meta } = check(body, keys(['v2', KEY_V2]));
    expect(version).toBe('v2');
    expect(reasonOf(() => adapter.envelopes!(body, view([]), meta))).toBe(reason);
  });

  it('notificationItems twice at the top level → malformed_payload (JSON.parse keeps the last, other parsers the first)', () => {
    const el = delivery([items[0]!]).elements[0]!;
    const body = Buffer.from(`{"notificationItems":[${el}],"live":"false","notificationItems":[${el}]}`);
    const { version, meta } = check(body, keys(['v2', KEY_V2]));
    expect(version).toBe('v2');
    expect(reasonOf(() => adapter.envelopes!(body, view([]), meta))).toBe('malformed_payload');
  });

  // The HMAC covers the fields as JSON.parse reads them (the last of two equal keys), but the slice
  // stored and forwarded keeps both: a first-wins reader saw an unsigned pspReference and amount.
  it('a signed field given twice inside an item (an unsigned copy first) → malformed_payload, nothing of it stored', () => {
    const signedItem = sdkSigned(item({ pspReference: 'REAL0000000000001' }), KEY_V2);
    const forged = '"NotificationRequestItem":{"pspReference":"FORGED99999999","amount":{"currency":"EUR","value":99999999},';
    const el = JSON.stringify({ NotificationRequestItem: signedItem }).replace('"NotificationRequestItem":{', forged);
    const body = Buffer.from(`{"live":"false","notificationItems":[${el}]}`);
    const { version, meta } = check(body, keys(['v2', KEY_V2]));
    expect(version).toBe('v2'); // JSON.parse sees only the signed values
    expect(reasonOf(() => adapter.envelopes!(body, view([]), meta))).toBe('malformed_payload');
    // An escaped spelling of the same name is the same key.
    const escaped = Buffer.from(body.toString().replace('"pspReference":"FORGED', '"psp\\u0052eference":"FORGED'));
    expect(check(escaped, keys(['v2', KEY_V2])).version).toBe('v2');
    expect(reasonOf(() => adapter.envelopes!(escaped, view([]), check(escaped, keys(['v2', KEY_V2])).meta))).toBe('malformed_payload');
    // Equal keys in different objects are fine.
    const ok = delivery([signedItem]).body;
    expect(adapter.envelopes!(ok, view([]), check(ok, keys(['v2', KEY_V2])).meta)).toHaveLength(1);
  });

  it('acceptedReply is text/plain [accepted], whatever the results', () => {
    const r = { status: 200, contentType: 'text/plain', body: '[accepted]' };
    expect(adapter.acceptedReply!([], view([]))).toEqual(r);
    expect(adapter.acceptedReply!([{ inboxId: 'x', duplicate: true, eventId: 'a', ignored: false }, { inboxId: null, duplicate: false, eventId: 'b', ignored: true }], view([]))).toEqual(r);
  });
});

describe('json-slices: topLevelArrayElements (exact byte ranges)', () => {
  const slices = (text: string | Buffer, key = 'notificationItems') => {
    const buf = Buffer.isBuffer(text) ? text : Buffer.from(text, 'utf8');
    const r = topLevelArrayElements(buf, key);
    return r.kind === 'array' ? r.elements.map((e) => buf.subarray(e.start, e.end).toString('utf8')) : r.kind;
  };

  it('elements of every kind, with tricky strings', () => {
    const els = [
      '{"a":"}]{[,:","b":[1,{"c":"\\"]"}]}',
      '"a string with \\\\ and \\" and \\u005d and \\/"',
      '"ends with a backslash \\\\"',
      '-12.5e+3',
      '0',
      'true',
      'false',
      'null',
      '[]',
      '{}',
      '[[[["deep"]]],{"x":{"y":{}}}]',
      '""',
    ];
    expect(slices(`{"notificationItems":[${els.join(',')}]}`)).toEqual(els);
  });

  it('whitespace of every JSON kind around and between elements is not part of a slice', () => {
    const body = '\r\n\t { \t"live" :\n"false" ,\r\n "notificationItems"\t:\r\n[ \n\t{ "a" : 1 }\r\n ,\t2 , "x"\n\n]\t}\r\n ';
    expect(slices(body)).toEqual(['{ "a" : 1 }', '2', '"x"']);
    expect(slices('{"notificationItems":[ ]}')).toEqual([]);
    expect(slices('{"notificationItems":[]}')).toEqual([]);
  });

  it('multi-byte UTF-8 (2, 3, 4 bytes, U+2028) in names and values: byte offsets, not character offsets', () => {
    const els = ['{"é😀":"Zoë 😀 東京 — naïve ü 𝄞"}', '"\u2028\u2029"', '{"東京":["𝄞",{"ü":"]"}]}'];
    const body = Buffer.from(`{"ключ":"значение 😀","notificationItems":[${els.join(' , ')}],"после":"😀"}`, 'utf8');
    const r = topLevelArrayElements(body, 'notificationItems');
    expect(r.kind).toBe('array');
    if (r.kind !== 'array') return;
    r.elements.forEach((e, i) => expect(body.subarray(e.start, e.end).equals(Buffer.from(els[i]!, 'utf8'))).toBe(true));
    expect(r.elements[0]!.start).toBeGreaterThan(body.toString('utf8').indexOf(els[0]!)); // bytes > UTF-16 units
  });

  it('member names are compared after unescaping, exactly as JSON.parse sees them', () => {
    expect(slices('{"notification\\u0049tems":[1]}')).toEqual(['1']);
    expect(slices('{"notificationItems\\u0000":[1]}')).toBe('absent');
    expect(slices('{"NotificationItems":[1]}')).toBe('absent');
    expect(slices('{"x":"notificationItems","y":["notificationItems"]}')).toBe('absent');
    expect(slices('{"x":{"notificationItems":[1]}}')).toBe('absent'); // only the top level counts
    expect(slices('{}')).toBe('absent');
  });

  it('a value that is not an array, and a member given twice (even once escaped)', () => {
    expect(slices('{"notificationItems":{"a":[1]}}')).toBe('not-array');
    expect(slices('{"notificationItems":null}')).toBe('not-array');
    expect(slices('{"notificationItems":[1],"notificationItems":[2]}')).toBe('duplicate');
    expect(slices('{"notificationItems":[1],"notification\\u0049tems":[2]}')).toBe('duplicate');
    expect(slices('{"notificationItems":1,"notificationItems":[2]}')).toBe('duplicate');
  });

  it('never reads past the end: every strict prefix of a document throws JsonSliceError', () => {
    const doc = Buffer.from('{"live":"false","notificationItems":[{"a":"x\\"y\\\\","b":[1,2.5,true,null]},"é😀",{}]}', 'utf8');
    expect(slices(doc)).toEqual(['{"a":"x\\"y\\\\","b":[1,2.5,true,null]}', '"é😀"', '{}']);
    for (let n = 0; n < doc.length; n++) {
      expect(() => topLevelArrayElements(doc.subarray(0, n), 'notificationItems'), `prefix ${n}`).toThrow(JsonSliceError);
    }
  });

  it('refuses what is not one JSON object (it never guesses)', () => {
    for (const bad of ['[1]', '"x"', '{"a":1} {"b":2}', '{"a":1}x', '{"notificationItems":[1 2]}', '{"notificationItems":[1,]x}', '{"a" 1}', '{"a":[}]}', '{"a":{]}}', '']) {
      expect(() => topLevelArrayElements(Buffer.from(bad), 'notificationItems'), bad).toThrow(JsonSliceError);
    }
  });

  it('property: random documents with random spacing and escapes — slices are exactly the emitted element texts and parse to the same values', () => {
    let seed = 12345;
    const rnd = () => ((seed = (seed * 1103515245 + 12345) % 2 ** 31) / 2 ** 31);
    const pick = <T,>(xs: readonly T[]): T => xs[Math.floor(rnd() * xs.length)]!;
    const ws = () => pick(['', '', ' ', '\n', '\t', '\r\n', '  \n\t']);
    const CHARS = ['a', 'Z', ' ', '"', '\\', '/', ']', '[', '{', '}', ',', ':', 'é', '😀', '東', '\u2028', '\u0001', '\t'];
    const str = () => {
      let s = '"';
      const n = Math.floor(rnd() * 6);
      for (let i = 0; i < n; i++) {
        const c = pick(CHARS);
        const code = c.codePointAt(0)!;
        if (c === '"' || c === '\\') s += '\\' + c;
        else if (code < 0x20 || rnd() < 0.15) s += Array.from({ length: c.length }, (_, j) => `\\u${c.charCodeAt(j).toString(16).padStart(4, '0')}`).join(''); // astral → surrogate pair
        else if (rnd() < 0.05) s += pick(['\\n', '\\/', '\\"', '\\\\']);
        else s += c;
      }
      return s + '"';
    };
    const value = (depth: number): string => {
      const r = rnd();
      if (depth > 3 || r < 0.35) return pick([str, () => pick(['0', '-1', '3.25', '1e-7', 'true', 'false', 'null', '1.0'])])();
      if (r < 0.7) {
        const n = Math.floor(rnd() * 4);
        return `{${ws()}${Array.from({ length: n }, () => `${str()}${ws()}:${ws()}${value(depth + 1)}`).join(`${ws()},${ws()}`)}${ws()}}`;
      }
      const n = Math.floor(rnd() * 4);
      return `[${ws()}${Array.from({ length: n }, () => value(depth + 1)).join(`${ws()},${ws()}`)}${ws()}]`;
    };
    for (let round = 0; round < 300; round++) {
      const els = Array.from({ length: Math.floor(rnd() * 5) }, () => value(0));
      const members = [`"notificationItems"${ws()}:${ws()}[${ws()}${els.join(`${ws()},${ws()}`)}${ws()}]`];
      for (let m = Math.floor(rnd() * 3); m > 0; m--) members.splice(Math.floor(rnd() * (members.length + 1)), 0, `"k${m}"${ws()}:${ws()}${value(1)}`);
      const doc = Buffer.from(`${ws()}{${ws()}${members.join(`${ws()},${ws()}`)}${ws()}}${ws()}`, 'utf8');
      const parsed = JSON.parse(doc.toString('utf8')).notificationItems as unknown[];
      const r = topLevelArrayElements(doc, 'notificationItems');
      expect(r.kind).toBe('array');
      if (r.kind !== 'array') return;
      expect(r.elements.map((e) => doc.subarray(e.start, e.end).toString('utf8'))).toEqual(els);
      r.elements.forEach((e, i) => expect(JSON.parse(doc.subarray(e.start, e.end).toString('utf8'))).toEqual(parsed[i]));
    }
  });
});

// ---------------------------------------------------------------------------------------------
// Over HTTP, on both stores. The shared Case suite assumes raw-body signatures, so adyen has its own.

const ENDPOINT = 'adyen';
const BASIC_ENDPOINT = 'adyen-basic';
const RETIRED = '2000-01-01T00:00:00Z';
const SECRETS = [
  { version: 'v2', value: KEY_V2 },
  { version: 'v1', value: KEY_V1 },
  { version: 'v0', value: KEY_V0, retireAt: RETIRED },
];
const BASIC = { username: 'adyen-notifier', password: 'pässw0rd:with-colon' };
const RICH = 'Zoë 😀 東京 — naïve ü 𝄞';

describeEachStore('adyen over HTTP', (kind) => {
  let app: TestApp;
  let seq = 0;
  beforeAll(async () => {
    app = await startTestApp(kind, {
      endpoints: [
        { id: ENDPOINT, provider: 'adyen', secrets: SECRETS },
        { id: BASIC_ENDPOINT, provider: 'adyen', secrets: SECRETS, options: { basicAuth: BASIC } },
      ],
    });
  });
  afterAll(async () => {
    await app?.stop();
  });

  /** A fresh, unique pspReference (16 characters, like Adyen's). */
  const psp = () => `P${kind === 'sqlite' ? 'S' : 'G'}${String(Date.now() % 1e9).padStart(9, '0')}${String(++seq).padStart(5, '0')}`;
  const send = (body: Buffer, headers: Record<string, string> = {}, endpoint = ENDPOINT) =>
    post(`${app.url}/webhooks/${endpoint}`, body, { 'content-type': 'application/json', ...headers });

  async function rowsFor(endpointId: string, key: string): Promise<InboxRow[]> {
    const rows = await Promise.all((await app.store.listInboxIds()).map((id) => app.store.getInbox(id)));
    return rows.filter((r): r is InboxRow => r !== null && r.endpointId === endpointId && r.providerEventId === key);
  }

  async function expectRejected(body: Buffer, status: number, reason: string, headers: Record<string, string> = {}, endpoint = ENDPOINT): Promise<void> {
    const before = await app.store.countRows();
    const r = await send(body, headers, endpoint);
    expect(r.status, r.text).toBe(status);
    expect(r.json().error, r.text).toBe(reason);
    expect(await app.store.countRows()).toEqual(before);
  }

  async function expectAccepted(body: Buffer, added: number, headers: Record<string, string> = {}, endpoint = ENDPOINT): Promise<void> {
    const before = await app.store.countRows();
    const r = await send(body, headers, endpoint);
    expect(r.status, r.text).toBe(200);
    expect(r.text).toBe('[accepted]');
    expect(r.headers['content-type']).toBe('text/plain');
    expect(await app.store.countRows()).toEqual({ inbox: before.inbox + added, outbox: before.outbox + added, payload: before.payload + added });
  }

  /** Three items about one payment (authorisation, capture, refund), signed by the SDK with `version`. */
  function threeItems(version: 'v2' | 'v1' | 'v0' = 'v2') {
    const key = SECRETS.find((s) => s.version === version)!.value;
    const payment = psp();
    const items = [
      item({ pspReference: payment, merchantReference: `order ${RICH}`, eventDate: '2024-05-01T12:00:00+02:00' }),
      item({ pspReference: psp(), originalReference: payment, eventCode: 'CAPTURE', eventDate: '2024-05-01T12:05:00+02:00' }),
      item({ pspReference: psp(), originalReference: payment, eventCode: 'REFUND', amount: { currency: 'EUR', value: 400 }, eventDate: '2024-05-02T08:00:00+02:00' }),
    ].map((it) => sdkSigned(it, key));
    // Escapes and multi-byte text in the raw bytes: a re-serialisation would not give these bytes back.
    const { body, elements } = delivery(items, (t, i) => (i === 0 ? t.replace('"TestMerchant"', '"Test\\u004derchant"') : t));
    const keysOf = items.map((it) => `${it.pspReference}:${it.eventCode}:${it.success}`);
    return { payment, items, body, elements, keys: keysOf };
  }

  it('3 good items → [accepted] (text/plain), 3 rows, each row the exact bytes of its own item', async () => {
    const d = threeItems();
    expect(d.body.length).toBeGreaterThan(d.body.toString('utf8').length);
    await expectAccepted(d.body, 3);
    for (let i = 0; i < 3; i++) {
      const rows = await rowsFor(ENDPOINT, d.keys[i]!);
      expect(rows).toHaveLength(1);
      const row = rows[0]!;
      expect(row).toMatchObject({ provider: 'adyen', eventType: d.items[i]!.eventCode, objectId: d.payment, matchedSecretVersion: 'v2', status: 'PENDING', verification: 'signature' });
      const slice = Buffer.from(d.elements[i]!, 'utf8');
      expect(row.payloadHash.equals(sha256(slice))).toBe(true);
      expect((await storedBytes(app, row)).equals(slice)).toBe(true);
    }
    const first = (await rowsFor(ENDPOINT, d.keys[0]!))[0]!;
    expect(first.objectVersion).toBe('2024-05-01T10:00:00.000Z');
    expect(first.providerCreatedAtMs).toBe(Date.parse('2024-05-01T10:00:00Z'));
    expect(JSON.parse((await storedBytes(app, first)).toString('utf8')).NotificationRequestItem.merchantReference).toBe(`order ${RICH}`);
  });

  it('redelivery of the same 3 items → [accepted], 3 duplicates: no new row, the same inbox ids', async () => {
    const d = threeItems();
    await expectAccepted(d.body, 3);
    const ids = await Promise.all(d.keys.map(async (k) => (await rowsFor(ENDPOINT, k)).map((r) => r.inboxId)));
    await expectAccepted(d.body, 0);
    // Adyen retries later, possibly after a key rotation: same items, signed with another trusted version.
    await expectAccepted(delivery(d.items.map((it) => sdkSigned(it, KEY_V1))).body, 0);
    expect(await Promise.all(d.keys.map(async (k) => (await rowsFor(ENDPOINT, k)).map((r) => r.inboxId)))).toEqual(ids);
    expect(ids.every((x) => x.length === 1)).toBe(true);
  });

  it('3 items with ONE bad signature → 401 invalid_signature, nothing stored (not even the good items)', async () => {
    const d = threeItems();
    const items = d.items.map((it, i) => (i === 1 ? sdkSigned(it, KEY_V0.replace(/c/g, 'd')) : it));
    await expectRejected(delivery(items).body, 401, 'invalid_signature');
    for (const k of d.keys) expect(await rowsFor(ENDPOINT, k)).toEqual([]);
    // The same items, all signed right, are then accepted.
    await expectAccepted(d.body, 3);
  });

  it('a one-byte mutation of a signed field → 401 invalid_signature', async () => {
    const d = threeItems();
    for (const [from, to] of [['"value": 400', '"value": 401'], ['"eventCode": "CAPTURE"', '"eventCode": "CAPTURF"'], [`"${d.payment}"`, `"${d.payment.slice(0, -1)}X"`]] as const) {
      expect(d.body.includes(from), from).toBe(true);
      await expectRejected(Buffer.from(d.body.toString('utf8').replace(from, to)), 401, 'invalid_signature');
    }
  });

  it('ADYEN PROTOCOL: a change outside the signed fields still verifies, and the changed bytes are what is stored', async () => {
    const d = threeItems();
    const changed = Buffer.from(d.body.toString('utf8').replace('"authCode": "058705"', '"authCode": "FORGED"'));
    await expectAccepted(changed, 3);
    const row = (await rowsFor(ENDPOINT, d.keys[0]!))[0]!;
    expect((await storedBytes(app, row)).toString('utf8')).toContain('"authCode": "FORGED"');
  });

  it('wrong key → 401 invalid_signature; a retired version (v0) → 401 invalid_signature', async () => {
    const d = threeItems();
    await expectRejected(delivery(d.items.map((it) => sdkSigned(it, PY_SDK_KEY))).body, 401, 'invalid_signature');
    await expectRejected(threeItems('v0').body, 401, 'invalid_signature');
  });

  it('secret rotation: signed with the previous version (v1) → accepted with matched_secret_version v1', async () => {
    const d = threeItems('v1');
    await expectAccepted(d.body, 3);
    for (const k of d.keys) expect((await rowsFor(ENDPOINT, k))[0]!.matchedSecretVersion).toBe('v1');
  });

  it('secret rotation: one delivery mixing items signed with v2 and v1 → each row records its own item\'s version', async () => {
    const fresh = sdkSigned(item({ pspReference: psp() }), KEY_V2);
    const queued = sdkSigned(item({ pspReference: psp() }), KEY_V1);
    await expectAccepted(delivery([fresh, queued]).body, 2);
    expect((await rowsFor(ENDPOINT, `${fresh.pspReference}:AUTHORISATION:true`))[0]!.matchedSecretVersion).toBe('v2');
    expect((await rowsFor(ENDPOINT, `${queued.pspReference}:AUTHORISATION:true`))[0]!.matchedSecretVersion).toBe('v1');
  });

  it('two partial refunds of one payment (distinct pspReferences, same originalReference) → two rows, same object', async () => {
    const payment = psp();
    const refunds = [psp(), psp()].map((p, i) => sdkSigned(item({ pspReference: p, originalReference: payment, eventCode: 'REFUND', amount: { currency: 'EUR', value: 100 + i } }), KEY_V2));
    await expectAccepted(delivery([refunds[0]!]).body, 1);
    await expectAccepted(delivery([refunds[1]!]).body, 1);
    const rows = await Promise.all(refunds.map(async (r) => (await rowsFor(ENDPOINT, `${r.pspReference}:REFUND:true`))[0]!));
    expect(rows[0]!.inboxId).not.toBe(rows[1]!.inboxId);
    expect(rows.map((r) => r.objectId)).toEqual([payment, payment]);
  });

  it('success false then true for one pspReference + eventCode → two rows', async () => {
    const p = psp();
    await expectAccepted(delivery([sdkSigned(item({ pspReference: p, success: 'false' }), KEY_V2)]).body, 1);
    await expectAccepted(delivery([sdkSigned(item({ pspReference: p, success: 'true' }), KEY_V2)]).body, 1);
    expect(await rowsFor(ENDPOINT, `${p}:AUTHORISATION:false`)).toHaveLength(1);
    expect(await rowsFor(ENDPOINT, `${p}:AUTHORISATION:true`)).toHaveLength(1);
  });

  it('the same item twice in one delivery → one row, [accepted]', async () => {
    const it = sdkSigned(item({ pspReference: psp() }), KEY_V2);
    await expectAccepted(delivery([it, it]).body, 1);
  });

  it('missing hmacSignature (on one item) → 401 missing_signature, nothing stored', async () => {
    const d = threeItems();
    const items = d.items.map((it, i) => (i === 2 ? { ...it, additionalData: { authCode: '1' } } : it));
    await expectRejected(delivery(items).body, 401, 'missing_signature');
  });

  it('not JSON → 400 malformed_payload; another content type → 415', async () => {
    await expectRejected(Buffer.from('pspReference=X'), 400, 'malformed_payload');
    await expectRejected(threeItems().body, 415, 'unsupported_media_type', { 'content-type': 'application/x-www-form-urlencoded' });
  });

  describe('endpoint with basicAuth', () => {
    const basic = (user: string, pass: string) => ({ authorization: `Basic ${Buffer.from(`${user}:${pass}`, 'utf8').toString('base64')}` });

    it('right credentials + right HMACs → accepted', async () => {
      const d = threeItems();
      await expectAccepted(d.body, 3, basic(BASIC.username, BASIC.password), BASIC_ENDPOINT);
      expect(await rowsFor(BASIC_ENDPOINT, d.keys[0]!)).toHaveLength(1);
    });

    it('wrong password → 401 invalid_signature; no Authorization → 401 missing_signature; Bearer → 401 malformed_signature', async () => {
      const d = threeItems();
      await expectRejected(d.body, 401, 'invalid_signature', basic(BASIC.username, 'wrong'), BASIC_ENDPOINT);
      await expectRejected(d.body, 401, 'missing_signature', {}, BASIC_ENDPOINT);
      await expectRejected(d.body, 401, 'malformed_signature', { authorization: 'Bearer x' }, BASIC_ENDPOINT);
    });

    it('right credentials do not replace the HMAC: a bad item is still 401', async () => {
      const d = threeItems();
      await expectRejected(delivery(d.items.map((it) => sdkSigned(it, PY_SDK_KEY))).body, 401, 'invalid_signature', basic(BASIC.username, BASIC.password), BASIC_ENDPOINT);
    });
  });
});

describe('adyen platform webhooks (options.webhooks: platform): HmacSignature over the raw body', () => {
  const platform: ProviderAdapter = PROVIDERS.adyen!({ webhooks: 'platform' }, 'endpoints[0].options');
  const KEY = '44782DEF547AAA06C910C43932B1EB0C71FC68D9D0C057550C48EC2ACF6BA056';
  // Adyen/adyen-python-api-library test/UtilTest.py test_is_valid_hmac_payload: the payload is the
  // triple-quoted string byte for byte, leading newline and indentation included.
  const VECTOR_BODY = Buffer.from(`
        {
            "type": "merchant.created",
            "environment": "test",
            "createdAt": "01-01-2024",
            "data": {
                "capabilities": {
                    "sendToTransferInstrument": {
                        "requested": true,
                        "requestedLevel": "notApplicable"
                    }
                },
                "companyId": "YOUR_COMPANY_ID",
                "merchantId": "YOUR_MERCHANT_ACCOUNT",
                "status": "PreActive"
            }
        }
        `, 'utf8');
  const VECTOR_SIG = 'fX74xUdztFmaXAn3IusMFFUBUSkLmDQUK0tm8xL6ZTU=';
  const keys = trustedKeys(platform, ['v1', KEY]);
  const check = (sig: string, body: Buffer, ks = keys) => {
    const r = platform.verify(platform.parseSignature(view([['HmacSignature', sig]])), body, ks, Date.now());
    if (r instanceof Promise) throw new Error('sync expected');
    return r?.version ?? null;
  };

  it('the published vector verifies, and our signer reproduces it', () => {
    expect(check(VECTOR_SIG, VECTOR_BODY)).toBe('v1');
    expect(platform.sign(VECTOR_BODY, KEY, {})).toEqual({ hmacsignature: VECTOR_SIG });
  });

  it('SDK ↔ ours: our signature passes HmacValidator.validateHMACSignature; a changed byte or another key fails both', () => {
    const body = Buffer.from('{"type":"balancePlatform.accountHolder.created","environment":"test","data":{"accountHolder":{"id":"AH1","description":"café ☕"}}}');
    const ours = platform.sign(body, KEY, {}).hmacsignature!;
    expect(sdk.validateHMACSignature(KEY, ours, body.toString('utf8'))).toBe(true);
    const tampered = Buffer.from(body);
    tampered.writeUInt8(tampered.readUInt8(20) ^ 1, 20);
    expect(check(ours, tampered)).toBeNull();
    expect(sdk.validateHMACSignature(KEY, ours, tampered.toString('utf8'))).toBe(false);
    const other = 'A'.repeat(64);
    expect(check(ours, body, trustedKeys(platform, ['v1', other]))).toBeNull();
  });

  it('headers: missing → missing_signature, twice → ambiguous_signature, not a base64 SHA-256 → malformed_signature', () => {
    expect(reasonOf(() => platform.parseSignature(view([])))).toBe('missing_signature');
    expect(reasonOf(() => platform.parseSignature(view([['HmacSignature', VECTOR_SIG], ['hmacsignature', VECTOR_SIG]])))).toBe('ambiguous_signature');
    expect(reasonOf(() => platform.parseSignature(view([['HmacSignature', 'abc']])))).toBe('malformed_signature');
  });

  it('envelope: no event id, so the key is the body\'s SHA-256 (a redelivery resends the same bytes); type, object id, time', () => {
    const e = platform.envelope(VECTOR_BODY, view([]), { timestamp: null });
    expect(e.eventId).toBe(`sha256:${createHash('sha256').update(VECTOR_BODY).digest('hex')}`);
    expect(e.eventType).toBe('merchant.created');
    const holder = Buffer.from('{"type":"balancePlatform.accountHolder.created","timestamp":"2024-12-15T15:42:03+01:00","data":{"balancePlatform":"BP","accountHolder":{"id":"AH00000000000000000000001"}}}');
    expect(platform.envelope(holder, view([]), { timestamp: null })).toMatchObject({ objectId: 'AH00000000000000000000001', providerCreatedAtMs: Date.parse('2024-12-15T14:42:03Z') });
    expect(reasonOf(() => platform.envelope(Buffer.from('{"data":{}}'), view([]), { timestamp: null }))).toBe('missing_event_type');
  });

  it('an unknown webhooks kind names its config path', () => {
    expect(() => PROVIDERS.adyen!({ webhooks: 'classic' }, 'endpoints[2].options')).toThrow(/endpoints\[2\]\.options\.webhooks/);
  });
});
