import { createHash, createSign, createVerify, randomUUID, X509Certificate } from 'node:crypto';
import { crc32 as zlibCrc32 } from 'node:zlib';
import { Agent } from 'undici';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import type { TrustedKey } from '../../src/crypto/hmac.js';
import { ConfigError, IngressError } from '../../src/errors.js';
import type { ProviderAdapter } from '../../src/providers/contract.js';
import {
  CERT_FAILURE_TTL_MS, CERT_FETCH_TIMEOUT_MS, CERT_TTL_MS, checkCertUrl, createCertFetcher, DEFAULT_CERT_HOSTS, MAX_CERT_BYTES,
  parseSigningCert, parseTransmissionTime, type CertFetcher,
} from '../../src/providers/paypal.js';
import { PROVIDERS } from '../../src/providers/registry.js';
import { expectedFirst, reasonOf, thrownBy, trustedKeys, verifyWithAsync, view } from '../helpers/adapter.js';
import { configDoc, startTestApp, type TestApp } from '../helpers/app.js';
import { startApp } from '../../src/app.js';
import { parseConfig } from '../../src/config/schema.js';
import pino from 'pino';
import { post } from '../helpers/http.js';
import {
  certId, forgeSameCrc, isoSeconds, LIVE_SIGNING_CN, makeCert, paypalHeaders, paypalSign, startFakePaypal, type FakePaypal,
} from '../helpers/paypal.js';
import { describeEachStore } from '../helpers/stores.js';

/*
 * PayPal signs `${transmissionId}|${transmissionTime}|${webhookId}|${crc32(body)}` with RSA-SHA256
 * and names the certificate by URL. PayPal's SDKs verify either online (verify-webhook-signature
 * API) or offline by the same recipe (PayPal-node-SDK `webhookEvent.verify`, PayPal-Java-SDK
 * `Event.validateReceivedEvent`, PayPal-Python-SDK `WebhookEvent.verify`); none can sign, and PayPal's
 * private key is PayPal's. So deliveries here are signed by a throwaway key whose self-signed
 * certificate a local HTTPS server serves under PayPal's host names; the signer (helpers/paypal.ts)
 * is written apart from the adapter (zlib's CRC-32, a template string, createSign).
 */

/** The path of a test certificate: its label as an id in PayPal's form (helpers/paypal.ts certId). */
const path = (name: string) => `/v1/notifications/certs/${certId(name)}`;
const certUrl = (name: string, host = 'api.sandbox.paypal.com') => `https://${host}${path(name)}`;

const SIGNING = makeCert();
const LIVE = makeCert({ cn: LIVE_SIGNING_CN });
const OTHER = makeCert();
const WRONG_CN = makeCert({ cn: 'webhooks.example.com' });
const LOOKALIKE_CN = makeCert({ cn: 'messageverificationcerts.paypal.com.evil.example' });
const RSA1024 = makeCert({ newkey: 'rsa:1024' });
const EC = makeCert({ newkey: 'ec' });
const SIGNING_X509 = new X509Certificate(SIGNING.certPem);
// "Now" for the unit tests: just after the certificates were made (their notBefore is whole seconds).
const NOW_MS = Date.now() + 2_000;

const WEBHOOK_ID = '4JH86294D6297924G';
const DAY_MS = 24 * 3600 * 1000;
const NEW_WEBHOOK_ID = '8PT597110X687430L';

/** PayPal's own sandbox signing certificate of 2014, as served by api.sandbox.paypal.com (PayPal-node-SDK test/mocks/notification.js, CERT-360caa42-35c2ed1e-21e9a5d6). */
const PAYPAL_2014_CERT = '-----BEGIN CERTIFICATE-----\r\nMIIDhjCCAm6gAwIBAgIEU3E1kDANBgkqhkiG9w0BAQUFADCBhDELMAkGA1UEBhMC\r\nVVMxCzAJBgNVBAgTAkNBMREwDwYDVQQHEwhTYW4gSm9zZTEUMBIGA1UEChMLUGF5\r\nUGFsIEluYy4xFjAUBgNVBAsMDXNhbmRib3hfY2VydHMxJzAlBgNVBAMMHnBheXBh\r\nbF9icmFpbnRyZWVfc2lnbmluZ19BX2tleTAeFw0xNDA1MTIyMDU2NDhaFw0xNjA3\r\nMjAyMDU2NDhaMIGEMQswCQYDVQQGEwJVUzELMAkGA1UECBMCQ0ExETAPBgNVBAcT\r\nCFNhbiBKb3NlMRQwEgYDVQQKEwtQYXlQYWwgSW5jLjEWMBQGA1UECwwNc2FuZGJv\r\neF9jZXJ0czEnMCUGA1UEAwwecGF5cGFsX2JyYWludHJlZV9zaWduaW5nX0Ffa2V5\r\nMIIBIjANBgkqhkiG9w0BAQEFAAOCAQ8AMIIBCgKCAQEAmryYx9SzJcGcD/1c7y5r\r\nPIKzjgn/zCYcger5fhNk0NsW3swsraqQKHt0MHZ0mllCsvM4V+FdWqxfM6mEZbo+\r\nFLX9Rv8lZX+MjiBgV8r3hKcGr/X8TJFQYrWKaMkVVtx6ZhO9vsCVqnw3wGJOmDd9\r\nbsereC8GklJDIc6SAZ7uavO4CC/oZ2rVSA42OVaHsnLqxp06osLM8quZhMDSySCT\r\nbRll8zeY3/YgTS1cIKDmWvhOXwxyeCXAzvexAJqpLMV72fzPL4LGCW4hj5CvNoX5\r\nHJXGUppd9nXmIGu/y+7jrSWcu7Vt9vuajfVQTKnkPSZBHMJNggyPl+8u8LaE7G19\r\nYQIDAQABMA0GCSqGSIb3DQEBBQUAA4IBAQCCccuImJnWHGSqW8OuSO1cSDAgQaWR\r\nIOFIvvfqcTnv3mTiT97KRvMCUdLHDaz2miyCREBYmrphYsfsiRgDPDTkmaMdAvpa\r\neHgzbKecvHDoB8uRe+erkW/JZmcnp3i9ynwHfuBGS7+OnqrBrfR6mCAAhNX75szZ\r\nzy6HqAcz2y1Vx9aOVQQVTZhXlDVrhiRRapDOhjOV6O7OVal2mJvnWt7edacVMZFp\r\nSKEMp7p3bT9qQuCVT8NFhASpcnvA/c/yOTcDzxuxK6rq/d8u+nuvAfzHAowXgYd4\r\nhPuN6HEhi93SMQKMyLqMOZK7Fa38mrARYGuCQc5s62AO2Vv3LsVvDvKc\r\n-----END CERTIFICATE-----';

let fake: FakePaypal;
beforeAll(async () => {
  fake = await startFakePaypal();
  const serve: [string, Buffer | string][] = [
    ['CERT-sandbox', SIGNING.certPem], ['CERT-live', LIVE.certPem], ['CERT-wrong-cn', WRONG_CN.certPem], ['CERT-lookalike-cn', LOOKALIKE_CN.certPem],
    ['CERT-rsa1024', RSA1024.certPem], ['CERT-ec', EC.certPem], ['CERT-not-pem', 'hello, I am not a certificate\n'],
    ['CERT-bad-pem', '-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n'], ['CERT-huge', Buffer.alloc(MAX_CERT_BYTES + 1, 0x41)],
    ['CERT-redirect-target', SIGNING.certPem], ['CERT-chain', Buffer.concat([SIGNING.certPem, LIVE.certPem])],
    ['CERT-paypal-2014', PAYPAL_2014_CERT],
  ];
  for (const [name, pem] of serve) fake.routes.set(path(name), { pem });
  fake.routes.set(path('CERT-500'), { status: 500, body: '{"name":"INTERNAL_SERVICE_ERROR"}' });
  fake.routes.set(path('CERT-redirect'), { status: 302, headers: { location: certUrl('CERT-redirect-target') } });
  fake.routes.set(path('CERT-hang'), { hang: true });
  fake.routes.set(path('CERT-huge-chunked'), { status: 200, body: 'A'.repeat(MAX_CERT_BYTES * 2), headers: { 'transfer-encoding': 'chunked' } });
});
afterAll(async () => {
  await fake?.close();
});

/** The fake host's production fetcher, looked up when called (describe bodies run before beforeAll). */
const viaFake: CertFetcher = (url) => fake.fetcher(url);
const adapterWith = (certFetcher: CertFetcher = viaFake, more: Record<string, unknown> = {}): ProviderAdapter =>
  PROVIDERS.paypal!({ certFetcher, ...more }, 'endpoints[0].options');

interface Delivery {
  readonly body: Buffer;
  readonly headers: Record<string, string>;
}

const eventBody = (id = `WH-${randomUUID().slice(0, 8).toUpperCase()}`, resource = '5O190127TN364715T', extra = '') =>
  Buffer.from(`{"id":"${id}","event_version":"1.0","create_time":"2024-05-01T10:00:00.123Z","resource_type":"capture","resource_version":"2.0",`
    + `"event_type":"PAYMENT.CAPTURE.COMPLETED","summary":"Payment completed for $ 1.0 USD","resource":{"id":"${resource}","status":"COMPLETED",`
    + `"amount":{"currency_code":"USD","value":"1.00"},"update_time":"2024-05-01T09:59:58Z"${extra}}}`, 'utf8');

/** A transmission as PayPal makes it, by the independent signer. */
function deliver(o: { body?: Buffer; webhookId?: string; cert?: string; key?: typeof SIGNING; timeMs?: number; transmissionId?: string } = {}): Delivery {
  const body = o.body ?? eventBody();
  const headers = paypalHeaders((o.key ?? SIGNING).privateKey, o.cert ?? certUrl('CERT-sandbox'), {
    transmissionId: o.transmissionId ?? randomUUID(), time: isoSeconds(o.timeMs ?? NOW_MS), webhookId: o.webhookId ?? WEBHOOK_ID, body,
  });
  return { body, headers };
}

const keys = (a: ProviderAdapter, ...entries: [string, string, number?][]): TrustedKey[] => trustedKeys(a, ...entries);
const check = (a: ProviderAdapter, d: Delivery, ks: TrustedKey[] = keys(a, ['v1', WEBHOOK_ID]), nowMs = NOW_MS) =>
  verifyWithAsync(a, Object.entries(d.headers), d.body, ks, nowMs);

/** The IngressError an async step rejects with. */
async function rejection(p: Promise<unknown>): Promise<IngressError> {
  try {
    await p;
  } catch (e) {
    if (e instanceof IngressError) return e;
    throw e;
  }
  throw new Error('expected an IngressError');
}

/** A fetcher that counts and delegates. */
function counting(inner: CertFetcher = viaFake): CertFetcher & { calls: string[] } {
  const calls: string[] = [];
  return Object.assign((url: URL) => {
    calls.push(url.href);
    return inner(url);
  }, { calls });
}

/** A counting fetcher whose downloads fail (ECONNRESET) until `recover()` is called. */
function failingUntilRecovered(): { f: CertFetcher & { calls: string[] }; recover(): void } {
  let failing = true;
  const f = counting(async (url) => {
    if (failing) throw new Error('ECONNRESET');
    return fake.fetcher(url);
  });
  return { f, recover: () => { failing = false; } };
}

describe('paypal: the signed string, cross-checked', () => {
  it('independent signer → adapter: `${id}|${time}|${webhookId}|${crc32}` verifies (PayPal-node-SDK / Java / Python recipe)', async () => {
    expect(await check(adapterWith(), deliver())).toBe('v1');
  });

  it('adapter.sign() → independent verifier: createVerify(RSA-SHA256) over the template string with zlib CRC-32', () => {
    const a = adapterWith(viaFake, { signer: { privateKey: SIGNING.privateKeyPem, certUrl: certUrl('CERT-sandbox') } });
    const body = eventBody();
    const h = a.sign(body, WEBHOOK_ID, { timestamp: Math.floor(NOW_MS / 1000), id: 'dfb3be50-fd74-11e4-8bf3-77339302725b' });
    expect(h).toMatchObject({
      'paypal-transmission-id': 'dfb3be50-fd74-11e4-8bf3-77339302725b',
      'paypal-transmission-time': isoSeconds(Math.floor(NOW_MS / 1000) * 1000),
      'paypal-cert-url': certUrl('CERT-sandbox'),
      'paypal-auth-algo': 'SHA256withRSA',
    });
    expect(h['paypal-transmission-time']).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$/);
    const message = `${h['paypal-transmission-id']}|${h['paypal-transmission-time']}|${WEBHOOK_ID}|${zlibCrc32(body)}`;
    expect(createVerify('RSA-SHA256').update(message).verify(SIGNING_X509.publicKey, h['paypal-transmission-sig']!, 'base64')).toBe(true);
    // …and byte-identical to the independent signer (PKCS#1 v1.5 is deterministic).
    expect(h['paypal-transmission-sig']).toBe(paypalSign(SIGNING.privateKey, { transmissionId: h['paypal-transmission-id']!, time: h['paypal-transmission-time']!, webhookId: WEBHOOK_ID, body }));
  });

  it('the CRC is the UNSIGNED decimal (buffer-crc32 .unsigned, Python & 0xffffffff, Java getValue), not a signed int32', async () => {
    let body = eventBody();
    while (zlibCrc32(body) < 2 ** 31) body = eventBody(); // a body whose CRC has the top bit set
    const a = adapterWith();
    const d = deliver({ body });
    expect(await check(a, d)).toBe('v1');
    const signedInt = zlibCrc32(body) | 0;
    expect(signedInt).toBeLessThan(0);
    const wrong = { ...d.headers, 'paypal-transmission-sig': signRaw(`${d.headers['paypal-transmission-id']}|${d.headers['paypal-transmission-time']}|${WEBHOOK_ID}|${signedInt}`) };
    expect(await check(a, { body, headers: wrong })).toBeNull();
  });

  it('CRC over the received bytes: a multi-byte body verifies; the same text re-encoded does not', async () => {
    const a = adapterWith();
    const body = eventBody(undefined, undefined, ',"note":"café ☕ 東京 😀","n":1.0');
    const d = deliver({ body });
    expect(await check(a, d)).toBe('v1');
    expect(await check(a, { body: Buffer.from(body.toString('utf8'), 'latin1'), headers: d.headers })).toBeNull();
    const reserialised = Buffer.from(JSON.stringify(JSON.parse(body.toString('utf8'))));
    expect(reserialised.equals(body)).toBe(false);
    expect(await check(a, { body: reserialised, headers: d.headers })).toBeNull();
  });
});

/** A well-formed signature by the test key over an arbitrary message. */
function signRaw(message: string): string {
  return createSign('RSA-SHA256').update(message).sign(SIGNING.privateKey, 'base64');
}

describe('paypal: published PayPal header values', () => {
  // PayPal-node-SDK test/notification.js ("verify webhook event success").
  const NODE_SDK = {
    'paypal-transmission-id': 'dfb3be50-fd74-11e4-8bf3-77339302725b',
    'paypal-transmission-time': '2015-05-18T15:45:13Z',
    'paypal-cert-url': 'https://api.sandbox.paypal.com/v1/notifications/certs/CERT-360caa42-fca2a594-a5cafa77',
    'paypal-auth-algo': 'SHA256withRSA',
    'paypal-transmission-sig': 'thy4/U002quzxFavHPwbfJGcc46E8rc5jzgyeafWm5mICTBdY/8rl7WJpn8JA0GKA+oDTPsSruqusw+XXg5RLAP7ip53Euh9Xu3UbUhQFX7UgwzE2FeYoY6lyRMiiiQLzy9BvHfIzNIVhPad4KnC339dr6y2l+mN8ALgI4GCdIh3/SoJO5wE64Bh/ueWtt8EVuvsvXfda2Le5a2TrOI9vLEzsm9GS79hAR/5oLexNz8UiZr045Mr5ObroH4w4oNfmkTaDk9Rj0G19uvISs5QzgmBpauKr7Nw++JI0pr/v5mFctQkoWJSGfBGzPRXawrvIIVHQ9Wer48GR2g9ZiApWg==',
  };
  // PayPal-NET-SDK Source/SDK.Tests/WebhookEventTest.cs (WebhookEventValidateReceivedEvent*).
  const NET_SDK = {
    'paypal-cert-url': 'https://api.sandbox.paypal.com/v1/notifications/certs/CERT-360caa42-fca2a594-a5cafa77',
    'paypal-auth-version': 'v2',
    'paypal-transmission-sig': 'vSOIQFIZQHv8G2vpbOpD/4fSC4/MYhdHyv+AmgJyeJQq6q5avWyHIe/zL6qO5hle192HSqKbYveLoFXGJun2od2zXN3Q45VBXwdX3woXYGaNq532flAtiYin+tQ/0pNwRDsVIufCxa3a8HskaXy+YEfXNnwCSL287esD3HgOHmuAs0mYKQdbR4e8Evk8XOOQaZzGeV7GNXXz19gzzvyHbsbHmDz5VoRl9so5OoHqvnc5RtgjZfG8KA9lXh2MTPSbtdTLQb9ikKYnOGM+FasFMxk5stJisgmxaefpO9Q1qm3rCjaJ29aAOyDNr3Q7WkeN3w4bSXtFMwyRBOF28pJg9g==',
    'paypal-transmission-id': 'b2384410-f8d2-11e4-8bf3-77339302725b',
    'paypal-auth-algo': 'SHA256withRSA',
    'paypal-transmission-time': '2015-05-12T18:14:14Z',
  };
  const a = adapterWith();

  it('PayPal-node-SDK sample: parses; the transmission time is the signed timestamp', () => {
    const meta = a.parseSignature(view(Object.entries(NODE_SDK)));
    expect(meta.timestamp).toBe(Date.UTC(2015, 4, 18, 15, 45, 13) / 1000);
  });

  it('PayPal-NET-SDK sample: parses (header names in any case); its SHA1withRSA variant is refused', () => {
    const pairs = Object.entries(NET_SDK).map(([k, v]): [string, string] => [k.replace(/(^|-)[a-z]/g, (c) => c.toUpperCase()), v]);
    expect(a.parseSignature(view(pairs)).timestamp).toBe(Date.UTC(2015, 4, 12, 18, 14, 14) / 1000);
    expect(reasonOf(() => a.parseSignature(view(Object.entries({ ...NET_SDK, 'paypal-auth-algo': 'SHA1withRSA' }))))).toBe('malformed_signature');
  });

  it('PayPal\'s 2014 sandbox signing certificate (CRLF PEM) parses: RSA-2048, 2014-05-12…2016-07-20, but its CN is not the signing service', () => {
    const c = parseSigningCert(Buffer.from(PAYPAL_2014_CERT));
    expect(c.key.asymmetricKeyDetails?.modulusLength).toBe(2048);
    expect(c.notBeforeMs).toBe(Date.UTC(2014, 4, 12, 20, 56, 48));
    expect(c.notAfterMs).toBe(Date.UTC(2016, 6, 20, 20, 56, 48));
    expect(c.problem).toMatch(/subject/);
  });

  it('a sample with those headers is refused offline (a signature by another key) without accepting anything', async () => {
    // The published signature cannot be checked here (its certificate is no longer served), but a
    // certificate URL we serve with another key must not make it pass.
    const h = { ...NODE_SDK, 'paypal-cert-url': certUrl('CERT-sandbox'), 'paypal-transmission-time': isoSeconds(NOW_MS) };
    expect(await verifyWithAsync(a, Object.entries(h), eventBody(), keys(a, ['v1', '4JH86294D6297924G']), NOW_MS)).toBeNull();
  });
});

describe('paypal: verification', () => {
  it('one changed body byte → null', async () => {
    const a = adapterWith();
    const d = deliver();
    const body = Buffer.from(d.body);
    body[body.indexOf('1.00')] = 0x32;
    expect(await check(a, { body, headers: d.headers })).toBeNull();
    expect(await check(a, d)).toBe('v1');
  });

  it('signed for another webhook id → null (the webhook id is in the signed string)', async () => {
    const a = adapterWith();
    expect(await check(a, deliver({ webhookId: 'WEBHOOKOFSOMEONEELSE' }))).toBeNull();
  });

  it('every signed header matters: another transmission id or time with the same signature → null', async () => {
    const a = adapterWith();
    const d = deliver();
    expect(await check(a, { body: d.body, headers: { ...d.headers, 'paypal-transmission-id': randomUUID() } })).toBeNull();
    expect(await check(a, { body: d.body, headers: { ...d.headers, 'paypal-transmission-time': isoSeconds(NOW_MS + 1000) } })).toBeNull();
  });

  it('signed by another key than the certificate\'s → null', async () => {
    expect(await check(adapterWith(), deliver({ key: OTHER }))).toBeNull();
  });

  it('rotation: two webhook ids trusted, each verifies as its own version; a retired one never does', async () => {
    const a = adapterWith();
    const ks = keys(a, ['v2', NEW_WEBHOOK_ID], ['v1', WEBHOOK_ID]);
    expect(await check(a, deliver({ webhookId: NEW_WEBHOOK_ID }), ks)).toBe('v2');
    expect(await check(a, deliver({ webhookId: WEBHOOK_ID }), ks)).toBe('v1');
    const retired = keys(a, ['v2', NEW_WEBHOOK_ID], ['v1', WEBHOOK_ID, NOW_MS]);
    expect(await check(a, deliver({ webhookId: WEBHOOK_ID }), retired)).toBeNull();
    expect(await check(a, deliver({ webhookId: WEBHOOK_ID }), retired, NOW_MS - 1)).toBe('v1');
  });

  it('no trusted (non-retired) webhook id → null without downloading anything', async () => {
    const f = counting();
    const a = adapterWith(f);
    expect(await check(a, deliver(), keys(a, ['v1', WEBHOOK_ID, NOW_MS - 1]))).toBeNull();
    expect(f.calls).toEqual([]);
  });

  it('the live signing name (messageverificationcerts.paypal.com) is as good as the sandbox one', async () => {
    expect(await check(adapterWith(), deliver({ key: LIVE, cert: certUrl('CERT-live', 'api.paypal.com') }))).toBe('v1');
  });

  it('a PEM holding several certificates: the first (the leaf) is the signing certificate', async () => {
    const a = adapterWith();
    expect(await check(a, deliver({ cert: certUrl('CERT-chain') }))).toBe('v1');
    expect(await check(a, deliver({ key: LIVE, cert: certUrl('CERT-chain') }))).toBeNull();
  });
});

describe('paypal: header parsing (headers only, no I/O)', () => {
  const a = adapterWith();
  const good = deliver().headers;
  const without = (name: string) => Object.entries(good).filter(([k]) => k !== name);
  const withValue = (name: string, v: string) => Object.entries({ ...good, [name]: v });

  it.each(expectedFirst([
    ['no PAYPAL-TRANSMISSION-SIG', without('paypal-transmission-sig'), 'missing_signature'],
    ['empty PAYPAL-TRANSMISSION-SIG', withValue('paypal-transmission-sig', ''), 'missing_signature'],
    ['no PAYPAL-TRANSMISSION-ID', without('paypal-transmission-id'), 'malformed_signature'],
    ['no PAYPAL-TRANSMISSION-TIME', without('paypal-transmission-time'), 'malformed_signature'],
    ['no PAYPAL-CERT-URL', without('paypal-cert-url'), 'malformed_signature'],
    ['no PAYPAL-AUTH-ALGO', without('paypal-auth-algo'), 'malformed_signature'],
    ['PAYPAL-AUTH-ALGO SHA1withRSA (downgrade)', withValue('paypal-auth-algo', 'SHA1withRSA'), 'malformed_signature'],
    ['PAYPAL-AUTH-ALGO SHA512withRSA', withValue('paypal-auth-algo', 'SHA512withRSA'), 'malformed_signature'],
    ['signature not base64', withValue('paypal-transmission-sig', '!!!not-base64!!!'), 'malformed_signature'],
    ['signature too short (16 bytes)', withValue('paypal-transmission-sig', Buffer.alloc(16, 1).toString('base64')), 'malformed_signature'],
    ['transmission id with "|" (would shift the signed fields)', withValue('paypal-transmission-id', 'a|2015-05-18T15:45:13Z'), 'malformed_signature'],
    ['transmission id with a space', withValue('paypal-transmission-id', 'a b'), 'malformed_signature'],
    ['cert URL not a URL', withValue('paypal-cert-url', 'not a url'), 'malformed_signature'],
  ]))('%s → %s', (_name, reason, pairs) => {
    expect(reasonOf(() => a.parseSignature(view(pairs)))).toBe(reason);
  });

  it.each(['paypal-transmission-sig', 'paypal-transmission-id', 'paypal-transmission-time', 'paypal-cert-url', 'paypal-auth-algo'])(
    '%s sent twice → ambiguous_signature, never joined', (name) => {
      const pairs: [string, string][] = [...Object.entries(good), [name.toUpperCase(), good[name]!]];
      expect(reasonOf(() => a.parseSignature(view(pairs)))).toBe('ambiguous_signature');
    });

  it.each([
    ['2015-05-18T15:45:13Z', Date.UTC(2015, 4, 18, 15, 45, 13)],
    ['2015-05-18T15:45:13.5Z', Date.UTC(2015, 4, 18, 15, 45, 13)],
    ['2015-05-18T17:45:13+02:00', Date.UTC(2015, 4, 18, 15, 45, 13)],
    ['2015-05-18T10:45:13-05:00', Date.UTC(2015, 4, 18, 15, 45, 13)],
  ])('transmission time %s → %i', (text, ms) => {
    expect(Math.floor(parseTransmissionTime(text)! / 1000)).toBe(ms / 1000);
    expect(a.parseSignature(view(withValue('paypal-transmission-time', text))).timestamp).toBe(ms / 1000);
  });

  it.each(['2015-05-18 15:45:13Z', '2015-05-18T15:45Z', '2015-05-18T15:45:13', '1431964000', 'Mon, 18 May 2015 15:45:13 GMT', '2015-13-18T15:45:13Z', '2015-02-30T00:00:00Z', '2015-05-18T24:00:00Z', '2015-05-18T15:45:13+25:00', ' 2015-05-18T15:45:13Z'])(
    'transmission time %j → malformed_signature', (text) => {
      expect(parseTransmissionTime(text)).toBeNull();
      expect(reasonOf(() => a.parseSignature(view(withValue('paypal-transmission-time', text))))).toBe('malformed_signature');
    });

  it('exposes the signed transmission time for the freshness check; default window ±4 days (PayPal retries for 3 with the first time)', () => {
    expect(a.defaultToleranceSeconds).toBe(4 * 24 * 3600);
    expect(a.parseSignature(view(Object.entries(good))).timestamp).toBe(Math.floor(NOW_MS / 1000));
  });
});

describe('paypal: PAYPAL-CERT-URL allowlist — refused before any download', () => {
  it.each(expectedFirst([
    ['http, not https', `http://api.paypal.com${path('CERT-sandbox')}`, 'invalid_signature'],
    ['another host', `https://evil.example${path('CERT-sandbox')}`, 'invalid_signature'],
    ['lookalike host api.paypal.com.evil.com', `https://api.paypal.com.evil.com${path('CERT-sandbox')}`, 'invalid_signature'],
    ['PayPal host in the path', `https://evil.com/api.paypal.com${path('CERT-sandbox')}`, 'invalid_signature'],
    ['userinfo before another host', `https://api.paypal.com@evil.com${path('CERT-sandbox')}`, 'invalid_signature'],
    ['userinfo on the right host', `https://user:pw@api.paypal.com${path('CERT-sandbox')}`, 'invalid_signature'],
    ['trailing-dot host', `https://api.paypal.com.${path('CERT-sandbox')}`, 'invalid_signature'],
    ['another PayPal host (www)', `https://www.paypal.com${path('CERT-sandbox')}`, 'invalid_signature'],
    ['sub-domain of an allowed host', `https://x.api.paypal.com${path('CERT-sandbox')}`, 'invalid_signature'],
    ['non-default port', `https://api.paypal.com:8443${path('CERT-sandbox')}`, 'invalid_signature'],
    ['another path on the host', 'https://api.paypal.com/v1/oauth2/token', 'invalid_signature'],
    ['path traversal', 'https://api.paypal.com/v1/notifications/certs/../../oauth2/token', 'invalid_signature'],
    ['encoded slash in the id', 'https://api.paypal.com/v1/notifications/certs/a%2F..%2Fb', 'invalid_signature'],
    ['query string', `https://api.paypal.com${path('CERT-sandbox')}?x=1`, 'invalid_signature'],
    ['empty query', `https://api.paypal.com${path('CERT-sandbox')}?`, 'invalid_signature'],
    ['fragment', `https://api.paypal.com${path('CERT-sandbox')}#x`, 'invalid_signature'],
    ['file URL', 'file:///etc/passwd', 'invalid_signature'],
    ['made-up certificate id', 'https://api.paypal.com/v1/notifications/certs/made-up-1', 'invalid_signature'],
    ['id with two groups', 'https://api.paypal.com/v1/notifications/certs/CERT-360caa42-fca2a594', 'invalid_signature'],
    ['id with a non-hex digit', 'https://api.paypal.com/v1/notifications/certs/CERT-360caa42-fca2a594-a5cafa7g', 'invalid_signature'],
    ['id with a suffix', 'https://api.paypal.com/v1/notifications/certs/CERT-360caa42-fca2a594-a5cafa77.pem', 'invalid_signature'],
    ['id without the CERT- prefix', 'https://api.paypal.com/v1/notifications/certs/360caa42-fca2a594-a5cafa77', 'invalid_signature'],
    ['backslash', `https://api.paypal.com\\@evil.com${path('CERT-sandbox')}`, 'malformed_signature'],
    ['relative', path('CERT-sandbox'), 'malformed_signature'],
  ]))('%s → %s, nothing fetched', async (_name, reason, url) => {
    const f = counting();
    const a = adapterWith(f);
    const d = deliver({ cert: url });
    expect(reasonOf(() => a.parseSignature(view(Object.entries(d.headers))))).toBe(reason);
    expect(f.calls).toEqual([]);
    const hitsBefore = [...fake.hits.values()].reduce((x, y) => x + y, 0);
    expect(reasonOf(() => checkCertUrl(url))).toBe(reason);
    expect([...fake.hits.values()].reduce((x, y) => x + y, 0)).toBe(hitsBefore);
  });

  it('a made-up certificate id says so: the id is not in PayPal\'s form CERT-xxxxxxxx-xxxxxxxx-xxxxxxxx', () => {
    expect(thrownBy(() => checkCertUrl('https://api.paypal.com/v1/notifications/certs/made-up-1'), IngressError).detail).toMatch(/CERT-xxxxxxxx-xxxxxxxx-xxxxxxxx/);
  });

  it.each([
    ...DEFAULT_CERT_HOSTS.map((h) => `https://${h}${path('CERT-360caa42-fca2a594-a5cafa77')}`),
    `https://api.sandbox.paypal.com${path('CERT-360caa42-35c2ed1e-21e9a5d6')}`, // PayPal's 2014 sandbox certificate
    `https://API.SANDBOX.PAYPAL.COM${path('CERT-x')}`,
    `https://api.paypal.com:443${path('CERT-x')}`,
  ])('accepted: %s', (url) => {
    expect(checkCertUrl(url).hostname).toMatch(/paypal\.com$/);
  });

  it('options.certHosts narrows (or changes) the list; entries must be host names under paypal.com', async () => {
    const liveOnly = adapterWith(viaFake, { certHosts: ['api.paypal.com'] });
    expect(reasonOf(() => liveOnly.parseSignature(view(Object.entries(deliver().headers))))).toBe('invalid_signature');
    expect(await check(liveOnly, deliver({ key: LIVE, cert: certUrl('CERT-live', 'api.paypal.com') }))).toBe('v1');
    for (const bad of [[], ['evil.com'], ['api.paypal.com.evil.com'], ['API.PAYPAL.COM'], ['api.paypal.com:443'], ['https://api.paypal.com'], ['*.paypal.com'], 'api.paypal.com']) {
      expect(() => adapterWith(viaFake, { certHosts: bad }), JSON.stringify(bad)).toThrow(ConfigError);
    }
  });
});

describe('paypal: certificate download, cache and failures', () => {
  it('cache: one download for many deliveries, sequential and concurrent (single flight)', async () => {
    const f = counting();
    const a = adapterWith(f);
    const concurrent = await Promise.all(Array.from({ length: 12 }, () => check(a, deliver())));
    expect(concurrent.every((v) => v === 'v1')).toBe(true);
    for (let i = 0; i < 20; i++) expect(await check(a, deliver())).toBe('v1');
    expect(f.calls).toEqual([certUrl('CERT-sandbox')]);
    // Another URL is another entry.
    expect(await check(a, deliver({ key: LIVE, cert: certUrl('CERT-live', 'api.paypal.com') }))).toBe('v1');
    expect(f.calls).toHaveLength(2);
  });

  it('the production fetcher really went over TLS to the PayPal host name (SNI + certificate check)', async () => {
    const before = fake.hits.get(path('CERT-live')) ?? 0;
    const pem = await fake.fetcher(new URL(certUrl('CERT-live', 'api.paypal.com')));
    expect(pem.equals(LIVE.certPem)).toBe(true);
    expect(fake.hits.get(path('CERT-live'))).toBe(before + 1);
  });

  it(`a cached certificate is downloaded again after ${CERT_TTL_MS / 3_600_000} h`, async () => {
    const f = counting();
    const a = adapterWith(f);
    // The cache's TTLs are timed by the monotonic clock.
    vi.useFakeTimers({ toFake: ['performance'] });
    try {
      expect(await check(a, deliver(), undefined, NOW_MS)).toBe('v1');
      vi.advanceTimersByTime(CERT_TTL_MS - 1);
      expect(await check(a, deliver({ timeMs: NOW_MS + CERT_TTL_MS - 1 }), undefined, NOW_MS + CERT_TTL_MS - 1)).toBe('v1');
      expect(f.calls).toHaveLength(1);
      vi.advanceTimersByTime(1);
      expect(await check(a, deliver({ timeMs: NOW_MS + CERT_TTL_MS }), undefined, NOW_MS + CERT_TTL_MS)).toBe('v1');
      expect(f.calls).toHaveLength(2);
    } finally {
      vi.useRealTimers();
    }
  });

  it.each([
    ['404 (unknown certificate id)', 'CERT-missing'],
    ['500', 'CERT-500'],
    ['302 redirect (never followed)', 'CERT-redirect'],
    ['larger than 64 KiB (Content-Length)', 'CERT-huge'],
    ['larger than 64 KiB (chunked, no Content-Length)', 'CERT-huge-chunked'],
    ['not PEM', 'CERT-not-pem'],
    ['PEM that is not a certificate', 'CERT-bad-pem'],
  ])('%s → 503 verification_unavailable (Retry-After 30), fail closed', async (_name, name) => {
    const targetHits = fake.hits.get(path('CERT-redirect-target')) ?? 0;
    const e = await rejection(check(adapterWith(), deliver({ cert: certUrl(name) })));
    expect(e.reason).toBe('verification_unavailable');
    expect(e.status).toBe(503);
    expect(e.retryAfter).toBe(30);
    expect(e.detail).not.toContain('http');
    expect(fake.hits.get(path('CERT-redirect-target')) ?? 0).toBe(targetHits);
  });

  it('timeout: a host that never answers → 503 within the fetcher\'s time limit', async () => {
    const a = adapterWith(fake.fetcherWith({ timeoutMs: 300 }));
    const started = Date.now();
    expect((await rejection(check(a, deliver({ cert: certUrl('CERT-hang') })))).reason).toBe('verification_unavailable');
    expect(Date.now() - started).toBeLessThan(5_000);
  });

  it('a TLS certificate outside Node\'s CA store is refused by the default fetcher (no trust-on-first-use)', async () => {
    const lookupLocal = (_h: string, o: { all?: boolean }, cb: (...a: unknown[]) => void) => (o.all ? cb(null, [{ address: '127.0.0.1', family: 4 }]) : cb(null, '127.0.0.1', 4));
    const agent = new Agent({ connect: { lookup: lookupLocal as never } });
    try {
      const strict = createCertFetcher({ dispatcher: agent, timeoutMs: 2_000 });
      // Refused for its certificate (self-signed here), not for any other reason a download can fail.
      await expect(strict(new URL(`https://api.sandbox.paypal.com:${fake.port}${path('CERT-sandbox')}`))).rejects.toMatchObject({ code: 'DEPTH_ZERO_SELF_SIGNED_CERT' });
    } finally {
      await agent.destroy();
    }
  });

  it('connection refused → 503', async () => {
    const refused: CertFetcher = (url) => createCertFetcher({ timeoutMs: 2_000 })(new URL(url.pathname, 'https://127.0.0.1:1'));
    expect((await rejection(check(adapterWith(refused), deliver()))).reason).toBe('verification_unavailable');
  });

  it('a custom fetcher that returns no bytes, too many bytes, or never settles → 503', async () => {
    for (const f of [async () => 'text' as unknown as Buffer, async () => Buffer.alloc(MAX_CERT_BYTES + 1, 0x2d)]) {
      expect((await rejection(check(adapterWith(f as CertFetcher), deliver()))).reason).toBe('verification_unavailable');
    }
    vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout'] });
    try {
      const pending = rejection(check(adapterWith(() => new Promise<Buffer>(() => undefined)), deliver()));
      await vi.advanceTimersByTimeAsync(CERT_FETCH_TIMEOUT_MS + 1_000);
      expect((await pending).reason).toBe('verification_unavailable');
    } finally {
      vi.useRealTimers();
    }
  });

  it(`a failure is remembered for ${CERT_FAILURE_TTL_MS / 1000} s (no re-download per retry), then tried again`, async () => {
    const { f, recover } = failingUntilRecovered();
    const a = adapterWith(f);
    vi.useFakeTimers({ toFake: ['performance'] });
    try {
      expect((await rejection(check(a, deliver()))).reason).toBe('verification_unavailable');
      recover();
      vi.advanceTimersByTime(CERT_FAILURE_TTL_MS - 1);
      expect((await rejection(check(a, deliver({ timeMs: NOW_MS + CERT_FAILURE_TTL_MS - 1 }), undefined, NOW_MS + CERT_FAILURE_TTL_MS - 1))).reason).toBe('verification_unavailable');
      expect(f.calls).toHaveLength(1);
      vi.advanceTimersByTime(1);
      expect(await check(a, deliver({ timeMs: NOW_MS + CERT_FAILURE_TTL_MS }), undefined, NOW_MS + CERT_FAILURE_TTL_MS)).toBe('v1');
      expect(f.calls).toHaveLength(2);
    } finally {
      vi.useRealTimers();
    }
  });

  it(`a failure is remembered ${CERT_FAILURE_TTL_MS / 1000} s by the monotonic clock: a wall clock stepped back meanwhile does not make it longer`, async () => {
    const { f, recover } = failingUntilRecovered();
    const a = adapterWith(f);
    vi.useFakeTimers({ toFake: ['performance'] });
    try {
      // The wall clock 10 minutes ahead (after the certificate's notBefore either way)...
      const ahead = NOW_MS + 10 * 60_000;
      expect((await rejection(check(a, deliver({ timeMs: ahead }), undefined, ahead))).reason).toBe('verification_unavailable');
      recover();
      // ...and 10 s later set back those 10 minutes by chrony (or an operator).
      vi.advanceTimersByTime(CERT_FAILURE_TTL_MS);
      const stepped = NOW_MS + CERT_FAILURE_TTL_MS;
      expect(await check(a, deliver({ timeMs: stepped }), undefined, stepped)).toBe('v1');
      expect(f.calls).toHaveLength(2);
    } finally {
      vi.useRealTimers();
    }
  });

  it('at most 4 downloads at once for URLs that have not verified a delivery: a flood of unknown certificate URLs cannot fan out', async () => {
    const waiting: ((b: Buffer) => void)[] = [];
    const f = counting(() => new Promise<Buffer>((resolve) => waiting.push(resolve)));
    const a = adapterWith(f);
    const pending = [1, 2, 3, 4].map((i) => check(a, deliver({ cert: certUrl(`CERT-slow-${i}`) })));
    const fifth = await rejection(check(a, deliver({ cert: certUrl('CERT-slow-5') })));
    expect(fifth.reason).toBe('verification_unavailable');
    expect(fifth.detail).toMatch(/too many/);
    expect(f.calls).toHaveLength(4);
    for (const w of waiting) w(SIGNING.certPem);
    expect(await Promise.all(pending)).toEqual(['v1', 'v1', 'v1', 'v1']);
  });
  it('only a URL whose certificate verified a delivery skips that limit; one downloaded but never verified with does not', async () => {
    const waiting: ((b: Buffer) => void)[] = [];
    const slow = new Set([1, 2, 3, 4].map((i) => certUrl(`CERT-slow-${i}`)));
    const f = counting((url) => (slow.has(url.href) ? new Promise<Buffer>((resolve) => waiting.push(resolve)) : viaFake(url)));
    const a = adapterWith(f);
    vi.useFakeTimers({ toFake: ['performance'] });
    try {
      expect(await check(a, deliver())).toBe('v1'); // CERT-sandbox verified a delivery
      expect(await check(a, deliver({ cert: certUrl('CERT-live') }))).toBeNull(); // CERT-live was downloaded but verified nothing
      vi.advanceTimersByTime(CERT_TTL_MS); // both past the cache's day: each needs a download again
      const later = NOW_MS + CERT_TTL_MS;
      const at = (o: Parameters<typeof deliver>[0] = {}) => check(a, deliver({ timeMs: later, ...o }), undefined, later);
      const pending = [...slow].map((cert) => at({ cert }));
      expect(waiting).toHaveLength(4);
      expect((await rejection(at({ cert: certUrl('CERT-live') }))).detail).toMatch(/too many/);
      expect(await at()).toBe('v1');
      expect(f.calls.filter((u) => u === certUrl('CERT-sandbox'))).toHaveLength(2);
      for (const w of waiting) w(SIGNING.certPem);
      expect(await Promise.all(pending)).toEqual(['v1', 'v1', 'v1', 'v1']);
    } finally {
      vi.useRealTimers();
    }
  });
});

describe('paypal: certificate checks (after download, before any signature)', () => {
  it('expired (now after notAfter) → invalid_signature; not yet valid → invalid_signature', async () => {
    const notAfter = Date.parse(SIGNING_X509.validTo);
    const notBefore = Date.parse(SIGNING_X509.validFrom);
    const a = adapterWith();
    const expired = await rejection(check(a, deliver({ timeMs: notAfter + 1000 }), undefined, notAfter + 1000));
    expect(expired.reason).toBe('invalid_signature');
    expect(expired.detail).toMatch(/expired/);
    expect(await check(a, deliver({ timeMs: notAfter }), undefined, notAfter)).toBe('v1');
    expect((await rejection(check(a, deliver({ timeMs: notBefore - 1000 }), undefined, notBefore - 1000))).reason).toBe('invalid_signature');
  });

  it.each([
    ['CN of another service', 'CERT-wrong-cn', WRONG_CN, /subject/],
    ['lookalike CN messageverificationcerts.paypal.com.evil.example', 'CERT-lookalike-cn', LOOKALIKE_CN, /subject/],
    ['RSA-1024 key', 'CERT-rsa1024', RSA1024, /2048/],
    ['EC key', 'CERT-ec', EC, /RSA/],
  ])('%s → invalid_signature even when the signature matches its key', async (_name, name, cert, detail) => {
    const d = cert === EC ? deliver({ cert: certUrl(name) }) : deliver({ key: cert, cert: certUrl(name) });
    const e = await rejection(check(adapterWith(), d));
    expect(e.reason).toBe('invalid_signature');
    expect(e.detail).toMatch(detail);
  });
});

describe('paypal: CRC-32 is not a hash — one transmission verifies one body', () => {
  const original = eventBody('WH-ORIGINAL1', 'CAPTURE1');
  const forged = forgeSameCrc(zlibCrc32(original), '{"id":"WH-FORGED","event_version":"1.0","event_type":"PAYMENT.CAPTURE.COMPLETED","resource":{"id":"CAPTURE9","amount":{"currency_code":"USD","value":"9999.00"}},"pad":"', '"}');

  it('the forgery is valid JSON, another event, and has the same CRC-32', () => {
    expect(zlibCrc32(forged)).toBe(zlibCrc32(original));
    expect(forged.equals(original)).toBe(false);
    expect(JSON.parse(forged.toString('utf8'))).toMatchObject({ id: 'WH-FORGED', resource: { id: 'CAPTURE9' } });
  });

  it('so the signature alone accepts it: a fresh adapter (that never saw the original transmission) verifies the forgery', async () => {
    const d = deliver({ body: original });
    expect(await check(adapterWith(), { body: forged, headers: d.headers })).toBe('v1');
  });

  it('so the adapter names the transmission in its metadata (the store binds it to one body: see "over HTTP" below)', () => {
    const d = deliver({ body: original, transmissionId: 'b9f2a0c0-6e0e-11ee-8c1f-0123456789ab' });
    expect(adapterWith().parseSignature(view(Object.entries(d.headers)))).toMatchObject({ transmissionId: 'b9f2a0c0-6e0e-11ee-8c1f-0123456789ab' });
  });
});

describe('paypal: envelope (verified body → logical event)', () => {
  const a = adapterWith();

  it('key = id (WH-…), type = event_type, object = resource.id, version = resource.update_time, created = create_time', () => {
    const body = eventBody('WH-2W7266712B616591M-36507203HX6402335', '7DW85331GX749735N');
    expect(a.envelope(body, view([]), { timestamp: 0 })).toEqual({
      eventId: 'WH-2W7266712B616591M-36507203HX6402335',
      eventType: 'PAYMENT.CAPTURE.COMPLETED',
      objectId: '7DW85331GX749735N',
      objectVersion: '2024-05-01T09:59:58Z',
      providerCreatedAtMs: Date.UTC(2024, 4, 1, 10, 0, 0, 123),
    });
  });

  it('a v1 sample from PayPal\'s SDK docs (PayPal-PHP-SDK ValidateWebhookEvent.php)', () => {
    const body = '{"id":"WH-36G56432PK518391U-9HW18392D95289106","create_time":"2015-06-01T20:21:13Z","resource_type":"sale","event_type":"PAYMENT.SALE.COMPLETED","summary":"Payment completed for $ 20.0 USD","resource":{"id":"2FY57107YS3937627","create_time":"2015-06-01T20:20:28Z","update_time":"2015-06-01T20:20:46Z","amount":{"total":"20.00","currency":"USD"},"state":"completed"}}';
    expect(a.envelope(Buffer.from(body), view([]), { timestamp: 0 })).toEqual({
      eventId: 'WH-36G56432PK518391U-9HW18392D95289106', eventType: 'PAYMENT.SALE.COMPLETED', objectId: '2FY57107YS3937627',
      objectVersion: '2015-06-01T20:20:46Z', providerCreatedAtMs: Date.UTC(2015, 5, 1, 20, 21, 13),
    });
  });

  it('no resource → object id and version null', () => {
    expect(a.envelope(Buffer.from('{"id":"WH-1","event_type":"X.Y"}'), view([]), { timestamp: 0 })).toMatchObject({ objectId: null, objectVersion: null, providerCreatedAtMs: null });
  });

  it.each([
    ['not JSON', 'not json', 'malformed_payload'],
    ['a JSON array', '[{"id":"WH-1"}]', 'malformed_payload'],
    ['no id', '{"event_type":"X.Y"}', 'missing_event_id'],
    ['empty id', '{"id":"","event_type":"X.Y"}', 'missing_event_id'],
    ['no event_type', '{"id":"WH-1"}', 'missing_event_type'],
    ['type under "type" (not PayPal\'s name)', '{"id":"WH-1","type":"X.Y"}', 'missing_event_type'],
  ])('%s → %s', (_name, body, reason) => {
    expect(reasonOf(() => a.envelope(Buffer.from(body), view([]), { timestamp: 0 }))).toBe(reason);
  });

  it('sample() is a PayPal event the envelope understands', () => {
    const s = a.sample('abc123');
    expect(a.envelope(s.body, view([]), { timestamp: 0 })).toMatchObject({ eventId: 'WH-SAMPLE-abc123', eventType: 'PAYMENT.CAPTURE.COMPLETED' });
  });
});

describe('paypal: redelivery window', () => {
  it('covers "Resend" of an event of the last 30 days (Webhooks Events dashboard, same WH- id), not only the 3 days of automatic retries', () => {
    expect(adapterWith().redeliveryWindowSeconds).toBe(30 * 24 * 60 * 60);
  });
});

describe('paypal: secrets (webhook ids) and options', () => {
  const a = adapterWith();

  it('a secret is a webhook id, used as its UTF-8 bytes', () => {
    expect(a.prepareSecret(WEBHOOK_ID).equals(Buffer.from(WEBHOOK_ID))).toBe(true);
    expect(a.prepareSecret('WEBHOOK_ID').toString()).toBe('WEBHOOK_ID'); // the simulator's literal id
  });

  it.each([
    ['empty', ''],
    ['a WH- event id', 'WH-2W7266712B616591M-36507203HX6402335'],
    ['a client secret (80 characters)', 'E'.repeat(80)],
    ['with "|"', 'ABC|DEF'],
    ['with a space', 'ABC DEF'],
  ])('refuses %s', (_name, value) => {
    expect(() => a.prepareSecret(value)).toThrow(/webhook id/);
  });

  it('options: unknown keys, a non-function certFetcher, bad signer → ConfigError naming the path', () => {
    expect(thrownBy(() => PROVIDERS.paypal!({ certUrl: 'x' }, 'endpoints[3].options'), ConfigError).path).toBe('endpoints[3].options.certUrl');
    expect(thrownBy(() => PROVIDERS.paypal!({ certFetcher: 'https://x' }, 'e.options'), ConfigError).message).toMatch(/JavaScript/);
    expect(thrownBy(() => PROVIDERS.paypal!({ signer: { privateKey: 'nope', certUrl: certUrl('x') } }, 'e.options'), ConfigError).path).toBe('e.options.signer.privateKey');
    expect(thrownBy(() => PROVIDERS.paypal!({ signer: { privateKey: SIGNING.privateKeyPem, certUrl: 'https://evil.com/x' } }, 'e.options'), ConfigError).path).toBe('e.options.signer.certUrl');
    expect(() => PROVIDERS.paypal!(undefined, 'e.options')).not.toThrow();
  });

  it('sign() without a signer explains that only PayPal can sign', () => {
    expect(() => a.sign(Buffer.from('{}'), WEBHOOK_ID, {})).toThrow(/simulator/);
  });
});

describeEachStore('paypal over HTTP (certificate host on local TLS)', (kind) => {
  let app: TestApp;
  let fetchesAtStart = 0;
  beforeAll(async () => {
    fetchesAtStart = fake.fetches.length;
    app = await startTestApp(kind, { endpoints: endpoints() });
  });
  afterAll(async () => {
    await app?.stop();
  });
  // The second endpoint trusts the same webhook id (an endpoint moved to a new id, say) and takes captures only.
  const endpoints = () => [
    { id: 'paypal', provider: 'paypal', secrets: [{ version: 'v2', value: NEW_WEBHOOK_ID }, { version: 'v1', value: WEBHOOK_ID }], options: { certFetcher: fake.fetcher } },
    { id: 'paypal-captures', provider: 'paypal', secrets: [{ version: 'v1', value: WEBHOOK_ID }], events: ['PAYMENT.CAPTURE.*'], options: { certFetcher: fake.fetcher } },
  ];

  const nowDelivery = (o: Parameters<typeof deliver>[0] = {}) => deliver({ timeMs: Date.now(), ...o });
  const send = (d: Delivery) => post(`${app.url}/webhooks/paypal`, d.body, d.headers);
  const sha256 = (b: Buffer) => createHash('sha256').update(b).digest();

  async function expectRejected(d: Delivery, status: number, reason: string) {
    const before = await app.store.countRows();
    const r = await send(d);
    expect(r.status, r.text).toBe(status);
    expect(r.json().error, r.text).toBe(reason);
    expect(await app.store.countRows()).toEqual(before);
    return r;
  }

  it('accepted: the row carries WH- id, event_type, resource id and version, the matched webhook id version, the exact bytes', async () => {
    const d = nowDelivery({ body: eventBody(undefined, 'CAPTUREHTTP1', ',"note":"café ☕ 1.0"') });
    const r = await send(d);
    expect(r.status, r.text).toBe(200);
    expect(r.json()).toEqual({ inbox_id: expect.any(String), duplicate: false });
    const row = await app.store.getInbox(r.json().inbox_id);
    expect(row).toMatchObject({ provider: 'paypal', endpointId: 'paypal', eventType: 'PAYMENT.CAPTURE.COMPLETED', objectId: 'CAPTUREHTTP1', objectVersion: '2024-05-01T09:59:58Z', matchedSecretVersion: 'v1', status: 'PENDING' });
    expect(row!.providerEventId).toMatch(/^WH-/);
    expect(row!.payloadHash.equals(sha256(d.body))).toBe(true);
  });

  it('another transmission of the same event (new id, time, signature: a Resend) → 200 duplicate, one row', async () => {
    const body = eventBody();
    const first = await send(nowDelivery({ body, timeMs: Date.now() - 120_000 }));
    expect(first.status, first.text).toBe(200);
    const before = await app.store.countRows();
    const retry = await send(nowDelivery({ body, webhookId: WEBHOOK_ID }));
    expect(retry.status, retry.text).toBe(200);
    expect(retry.json()).toEqual({ inbox_id: first.json().inbox_id, duplicate: true });
    expect(await app.store.countRows()).toEqual(before);
  });

  it('two events about one resource (capture completed, then refunded) → two rows', async () => {
    const a = await send(nowDelivery({ body: eventBody(undefined, 'CAPTURESAME') }));
    const b = await send(nowDelivery({ body: eventBody(undefined, 'CAPTURESAME'), webhookId: NEW_WEBHOOK_ID }));
    expect([a.status, b.status]).toEqual([200, 200]);
    expect(a.json().inbox_id).not.toBe(b.json().inbox_id);
    expect((await app.store.getInbox(b.json().inbox_id))!.matchedSecretVersion).toBe('v2');
  });

  it('bad signature (one changed byte) → 401 invalid_signature, nothing stored', async () => {
    const d = nowDelivery();
    const body = Buffer.from(d.body);
    body[body.indexOf('1.00')] = 0x32;
    const r = await expectRejected({ body, headers: d.headers }, 401, 'invalid_signature');
    expect(r.json()).toEqual({ error: 'invalid_signature' });
    await expectRejected(nowDelivery({ webhookId: 'SOMEOTHERWEBHOOK' }), 401, 'invalid_signature');
  });

  it('certificate unreachable → 503 verification_unavailable with Retry-After, nothing stored', async () => {
    const r = await expectRejected(nowDelivery({ cert: certUrl('CERT-gone-404') }), 503, 'verification_unavailable');
    expect(r.headers['retry-after']).toBe('30');
  });

  it('a certificate URL off the allowlist → 401 before any download', async () => {
    const fetches = fake.fetches.length;
    await expectRejected(nowDelivery({ cert: `https://api.paypal.com.evil.com${path('CERT-sandbox')}` }), 401, 'invalid_signature');
    expect(fake.fetches.length).toBe(fetches);
  });

  it('a PayPal retry days later repeats the first transmission (same id, time and signature) → 200, then duplicate', async () => {
    // The first attempt 2 days ago never got a 2xx (our outage); PayPal retries with the same headers and bytes.
    const d = nowDelivery({ body: eventBody(undefined, 'CAPTURELATE'), timeMs: Date.now() - 2 * DAY_MS });
    const retry = await send(d);
    expect(retry.status, retry.text).toBe(200);
    expect(retry.json()).toEqual({ inbox_id: expect.any(String), duplicate: false });
    const again = await send(d);
    expect(again.json()).toEqual({ inbox_id: retry.json().inbox_id, duplicate: true });
  });

  it('stale transmission time (outside ±4 days) → 401 stale_timestamp even though the signature is right', async () => {
    await expectRejected(nowDelivery({ timeMs: Date.now() - 4 * DAY_MS - 60_000 }), 401, 'stale_timestamp');
    await expectRejected(nowDelivery({ timeMs: Date.now() + 4 * DAY_MS + 60_000 }), 401, 'stale_timestamp');
  });

  it('a captured transmission replayed with CRC-forged bytes (another, valid event) → 401, nothing stored', async () => {
    const original = eventBody(undefined, 'CAPTUREORIG');
    const d = nowDelivery({ body: original });
    expect((await send(d)).status).toBe(200);
    const forged = forgeSameCrc(zlibCrc32(original), `{"id":"WH-FORGED-${randomUUID()}","event_type":"PAYMENT.CAPTURE.COMPLETED","resource":{"id":"CAPTUREEVIL"},"pad":"`, '"}');
    await expectRejected({ body: forged, headers: d.headers }, 401, 'invalid_signature');
  });

  it('all of the above downloaded the signing certificate once', () => {
    expect(fake.fetches.slice(fetchesAtStart).filter((u) => u === certUrl('CERT-sandbox'))).toHaveLength(1);
  });

  const forgeryOf = (original: Buffer, type = 'PAYMENT.CAPTURE.COMPLETED') =>
    forgeSameCrc(zlibCrc32(original), `{"id":"WH-FORGED-${randomUUID()}","event_type":"${type}","resource":{"id":"CAPTUREEVIL"},"pad":"`, '"}');

  it('a request whose signature fails binds nothing: the genuine transmission is accepted after it', async () => {
    const original = eventBody(undefined, 'CAPTUREAFTERBAD');
    const d = nowDelivery({ body: original });
    const tampered = Buffer.from(original);
    tampered[tampered.indexOf('1.00')] = 0x32;
    await expectRejected({ body: tampered, headers: d.headers }, 401, 'invalid_signature');
    const r = await send(d);
    expect(r.status, r.text).toBe(200);
    expect(r.json().duplicate).toBe(false);
  });

  it('after a restart, or at another server on the same database, the captured transmission with CRC-forged bytes → 401; its own bytes → duplicate', async () => {
    const original = eventBody(undefined, 'CAPTURERESTART');
    const d = nowDelivery({ body: original });
    const first = await send(d);
    expect(first.status, first.text).toBe(200);
    // A fresh process: nothing of the first one's memory, only the database.
    const other = await startApp(parseConfig(configDoc(app.db.url, { endpoints: endpoints() }), {}), { logger: pino({ level: 'silent' }), env: {}, shutdownGraceMs: 500, workers: false });
    try {
      const before = await app.store.countRows();
      const forged = await post(`${other.url}/webhooks/paypal`, forgeryOf(original), d.headers);
      expect(forged.status, forged.text).toBe(401);
      expect(forged.json().error).toBe('invalid_signature');
      // Nor at the endpoint that trusts the same webhook id: transmission ids are PayPal's, not an endpoint's.
      const elsewhere = await post(`${other.url}/webhooks/paypal-captures`, forgeryOf(original), d.headers);
      expect(elsewhere.status, elsewhere.text).toBe(401);
      expect(await app.store.countRows()).toEqual(before);
      const again = await post(`${other.url}/webhooks/paypal`, d.body, d.headers);
      expect(again.json()).toEqual({ inbox_id: first.json().inbox_id, duplicate: true });
    } finally {
      await other.close();
    }
  });

  it('a transmission of an event the endpoint ignores is bound too: forged into a type it takes → 401, nothing stored', async () => {
    const original = eventBody(undefined, 'CAPTUREIGNORED').toString('utf8').replace('PAYMENT.CAPTURE.COMPLETED', 'CUSTOMER.DISPUTE.CREATED');
    const d = nowDelivery({ body: Buffer.from(original) });
    const ignored = await post(`${app.url}/webhooks/paypal-captures`, d.body, d.headers);
    expect(ignored.status, ignored.text).toBe(200);
    expect(ignored.json()).toMatchObject({ inbox_id: null, ignored: 'unsupported_event_type' });
    const before = await app.store.countRows();
    const forged = await post(`${app.url}/webhooks/paypal-captures`, forgeryOf(d.body), d.headers);
    expect(forged.status, forged.text).toBe(401);
    expect(await app.store.countRows()).toEqual(before);
  });

  it('a Resend (a new transmission of a stored event) binds its own transmission: that one forged → 401', async () => {
    const body = eventBody(undefined, 'CAPTURERESEND');
    expect((await send(nowDelivery({ body }))).status).toBe(200);
    const resend = nowDelivery({ body });
    const dup = await send(resend);
    expect(dup.json().duplicate, dup.text).toBe(true);
    await expectRejected({ body: forgeryOf(body), headers: resend.headers }, 401, 'invalid_signature');
  });

});

/** Polls `done` until it holds (generous bound: a loaded 2-core box). */
async function until(done: () => boolean, what: string, ms = 20_000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!done()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

describeEachStore('paypal over HTTP: made-up certificate URLs cannot starve a genuine one', (kind) => {
  let app: TestApp;
  beforeAll(async () => {
    app = await startTestApp(kind, {
      // Short download timeout: the made-up URLs below hang until it.
      endpoints: [{ id: 'paypal', provider: 'paypal', secrets: [{ version: 'v1', value: WEBHOOK_ID }], options: { certFetcher: fake.fetcherWith({ timeoutMs: 4_000 }) } }],
    });
  });
  afterAll(async () => {
    await app?.stop();
  });

  const send = (d: Delivery) => post(`${app.url}/webhooks/paypal`, d.body, d.headers);
  const sendAll = (ds: Delivery[]) => {
    let answered = 0;
    const all = Promise.all(ds.map(async (d) => {
      const r = await send(d);
      answered++;
      return r;
    }));
    return { all, answered: () => answered };
  };
  const hitsOn = (paths: string[]) => paths.reduce((n, p) => n + (fake.hits.get(p) ?? 0), 0);

  it('many made-up certificate ids in flight, then a genuine delivery whose certificate is not cached yet → 200; the made-up ones → 401, none downloaded', async () => {
    const madeUp = Array.from({ length: 16 }, (_, i) => `/v1/notifications/certs/made-up-${kind}-${i}`);
    for (const p of madeUp) fake.routes.set(p, { hang: true }); // were they downloaded, they would hold a download slot
    const flood = sendAll(madeUp.map((p) => deliver({ timeMs: Date.now(), cert: `https://api.paypal.com${p}` })));
    // In flight: answered (refused), or holding every download slot there is.
    await until(() => flood.answered() === madeUp.length || hitsOn(madeUp) >= 4, 'the made-up requests to be answered or downloading');

    const genuinePath = path(`genuine-${kind}`);
    fake.routes.set(genuinePath, { pem: SIGNING.certPem });
    const r = await send(deliver({ timeMs: Date.now(), cert: certUrl(`genuine-${kind}`) }));
    expect(r.status, r.text).toBe(200);
    expect(fake.hits.get(genuinePath)).toBe(1);

    for (const refused of await flood.all) {
      expect(refused.status, refused.text).toBe(401);
      expect(refused.json()).toEqual({ error: 'invalid_signature', detail: expect.stringMatching(/CERT-xxxxxxxx-xxxxxxxx-xxxxxxxx/) });
    }
    expect(hitsOn(madeUp)).toBe(0);
  });

  it('a certificate URL that verified a delivery is downloaded again (cache expired or evicted) even while made-up PayPal-form ids fill every other download slot', async () => {
    const provenPath = path(`proven-${kind}`);
    fake.routes.set(provenPath, { pem: SIGNING.certPem });
    expect((await send(deliver({ timeMs: Date.now(), cert: certUrl(`proven-${kind}`) }))).status).toBe(200);

    // 32 other certificates that download fine but verify nothing (another key) push it out of the cache.
    for (let i = 0; i < 32; i++) {
      fake.routes.set(path(`other-${kind}-${i}`), { pem: OTHER.certPem });
      const r = await send(deliver({ timeMs: Date.now(), cert: certUrl(`other-${kind}-${i}`) }));
      expect(r.status, r.text).toBe(401);
    }

    // Made-up ids in PayPal's form: nothing tells them apart before the download, and they hang.
    const stalled = Array.from({ length: 4 }, (_, i) => path(`stalled-${kind}-${i}`));
    for (const p of stalled) fake.routes.set(p, { hang: true });
    const flood = sendAll(stalled.map((p) => deliver({ timeMs: Date.now(), cert: `https://api.paypal.com${p}` })));
    await until(() => hitsOn(stalled) === stalled.length, 'the made-up downloads to start');
    const fifth = await send(deliver({ timeMs: Date.now(), cert: certUrl(`stalled-${kind}-5`) }));
    expect(fifth.status, fifth.text).toBe(503); // the download slots for unproven URLs are full

    const r = await send(deliver({ timeMs: Date.now(), cert: certUrl(`proven-${kind}`) }));
    expect(r.status, r.text).toBe(200);
    expect(fake.hits.get(provenPath)).toBe(2);

    for (const failed of await flood.all) expect(failed.status, failed.text).toBe(503);
  });
});
