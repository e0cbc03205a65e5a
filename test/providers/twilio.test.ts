import { createHmac, randomBytes } from 'node:crypto';
import { parse as parseQueryString } from 'node:querystring';
import twilio from 'twilio';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { TrustedKey } from '../../src/crypto/hmac.js';
import { sha256 } from '../../src/crypto/payload-cipher.js';
import { ConfigError } from '../../src/errors.js';
import type { ProviderAdapter, RequestView } from '../../src/providers/contract.js';
import { PROVIDERS } from '../../src/providers/registry.js';
import { formParams, portVariants, sha256Hex, twilioSignature } from '../../src/providers/twilio.js';
import type { InboxRow } from '../../src/store/port.js';
import { startTestApp, type TestApp } from '../helpers/app.js';
import { reasonOf, thrownBy, trustedKeys, view } from '../helpers/adapter.js';
import { post, rawExchange, statusOf } from '../helpers/http.js';
import { describeEachStore } from '../helpers/stores.js';
import { TWILIO_PUBLIC_URL, TWILIO_SECRETS, twilioCase } from '../http/cases/twilio.js';

const FORM = 'application/x-www-form-urlencoded';
const JSON_TYPE = 'application/json';
const make = (options: Record<string, unknown>, path = 'endpoints[0].options'): ProviderAdapter => PROVIDERS.twilio!(options, path);

/** A RequestView with the request target and content type a test needs. */
const req = (pairs: [string, string][], target = '/webhooks/twilio', contentType = FORM): RequestView => view(pairs, { target, contentType });

/** parseSignature + verify, as the pipeline does; the matched version or null. */
function check(adapter: ProviderAdapter, signature: string | null, body: Buffer | string, keys: TrustedKey[], target = '/webhooks/twilio', contentType = FORM, extra: [string, string][] = []): string | null {
  const pairs: [string, string][] = signature === null ? [...extra] : [['X-Twilio-Signature', signature], ...extra];
  const meta = adapter.parseSignature(req(pairs, target, contentType));
  const r = adapter.verify(meta, Buffer.from(body), keys, Date.now());
  if (r instanceof Promise) throw new Error('twilio verifies synchronously');
  return r?.version ?? null;
}

/** Form-encodes like Twilio (spaces as `+`, everything else %XX). */
const encode = (params: [string, string][]) => new URLSearchParams(params).toString();
const asObject = (params: [string, string][]) => {
  const o: Record<string, string | string[]> = {};
  for (const [k, v] of params) o[k] = k in o ? [...[o[k]!].flat(), v] : v;
  return o;
};

// ── published vectors ────────────────────────────────────────────────────────────────────────
// twilio-php tests/Twilio/Unit/RequestValidatorTest.php, twilio-python tests/unit/test_request_validator.py,
// twilio-node spec/validation.spec.js (token "12345", URL https://mycompany.com/myapp.php?foo=1&bar=2),
// Twilio docs "Webhooks security" worked example and TwilioDevEd/api-snippets signature_validation.3.x.js.
const TOKEN = '12345';
const VECTOR_BASE = 'https://mycompany.com/myapp.php';
const VECTOR_TARGET = '/myapp.php?foo=1&bar=2';
const VECTOR_PARAMS: [string, string][] = [['CallSid', 'CA1234567890ABCDE'], ['Caller', '+14158675309'], ['Digits', '1234'], ['From', '+14158675309'], ['To', '+18005551212']];
const withCaller = (n: string): [string, string][] => VECTOR_PARAMS.map(([k, v]) => [k, k === 'Caller' || k === 'From' ? n : v]);
const BODY = '{"property": "value", "boolean": true}';
const BODY_HASH = '0a1ff7634d9ab3b95db5c9a2dfe9416e41502b283a80c7cf19632632f96e6620';
const EMPTY_BODY_HASH = '44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a';

describe('twilio: published vectors, through the adapter (publicUrl + the query of the request target)', () => {
  const adapter = make({ publicUrl: VECTOR_BASE });
  const keys = trustedKeys(adapter, ['v1', TOKEN]);

  it.each([
    ['php/python/node RequestValidator', VECTOR_PARAMS, 'RSOYDt4T1cUTdK1PDd93/VVr8B8='],
    ['Twilio docs "Webhooks security" example', withCaller('+12349013030'), '0/KCTR6DLpKmkAf8muzZqo1nDgQ='],
    ['api-snippets signature_validation.3.x.js', withCaller('+14158675310'), 'GvWf1cFY/Q7PnoempGyD5oXAezc='],
    ['repeated values are de-duplicated and sorted (php/python/node)', [['Sid', 'CA123'], ['SidAccount', 'AC123'], ['Digits', '5678'], ['Digits', '1234'], ['Digits', '1234']], 'IK+Dwps556ElfBT0I3Rgjkr1wJU='],
    ['an array parameter, either order (node)', [['MessagingBinding.Address', '+1415xxxxxxx'], ['MessagingBinding.Address', '+1325xxxxxxx']], '83O6e2vORAoJHUNzJjDWN1jz+BA='],
  ] as [string, [string, string][], string][])('%s → %s', (_name, params, signature) => {
    expect(twilioSignature(TOKEN, `${VECTOR_BASE}?foo=1&bar=2`, formParams(Buffer.from(encode(params))))).toBe(signature);
    // The form body in any parameter order, as bytes on the wire.
    expect(check(adapter, signature, encode(params), keys, VECTOR_TARGET)).toBe('v1');
    expect(check(adapter, signature, encode([...params].reverse()), keys, VECTOR_TARGET)).toBe('v1');
    expect(check(adapter, signature, encode(params), keys, '/myapp.php?foo=1&bar=3')).toBeNull();
  });

  it('JSON body: the URL carries bodySHA256 and the signature covers the URL alone (php/python/node)', () => {
    expect(sha256Hex(Buffer.from(BODY))).toBe(BODY_HASH);
    expect(check(adapter, 'a9nBmqA0ju/hNViExpshrM61xv4=', BODY, keys, `${VECTOR_TARGET}&bodySHA256=${BODY_HASH}`, JSON_TYPE)).toBe('v1');
    // Only the hash in the query (node "with only sha param"), and the empty body {} (node).
    expect(check(adapter, 'y77kIzt2vzLz71DgmJGsen2scGs=', BODY, keys, `/myapp.php?bodySHA256=${BODY_HASH}`, JSON_TYPE)).toBe('v1');
    expect(check(adapter, 'Ldidvp12m26NI7eqEvxnEpkd9Hc=', '{}', keys, `${VECTOR_TARGET}&bodySHA256=${EMPTY_BODY_HASH}`, JSON_TYPE)).toBe('v1');
    // Same URL and signature, another body: the hash no longer matches.
    expect(check(adapter, 'a9nBmqA0ju/hNViExpshrM61xv4=', BODY.replace('value', 'Value'), keys, `${VECTOR_TARGET}&bodySHA256=${BODY_HASH}`, JSON_TYPE)).toBeNull();
  });

  it('ports: signed with :443 / :80 added, or with the configured port removed (php/python/node)', () => {
    const p = encode(VECTOR_PARAMS);
    expect(check(adapter, 'kvajT1Ptam85bY51eRf/AJRuM3w=', p, keys, VECTOR_TARGET)).toBe('v1'); // https://mycompany.com:443/…
    expect(check(make({ publicUrl: 'http://mycompany.com/myapp.php' }), '0ZXoZLH/DfblKGATFgpif+LLRf4=', p, keys, VECTOR_TARGET)).toBe('v1'); // http://…:80/…
    expect(check(make({ publicUrl: 'http://mycompany.com:1234/myapp.php' }), 'Zmvh+3yNM1Phv2jhDCwEM3q5ebU=', p, keys, VECTOR_TARGET)).toBe('v1');
    expect(check(make({ publicUrl: 'https://mycompany.com:1234/myapp.php' }), 'RSOYDt4T1cUTdK1PDd93/VVr8B8=', p, keys, VECTOR_TARGET)).toBe('v1');
    // The port of an http URL is not the https default.
    expect(check(make({ publicUrl: 'http://mycompany.com/myapp.php' }), 'kvajT1Ptam85bY51eRf/AJRuM3w=', p, keys, VECTOR_TARGET)).toBeNull();
  });

  it('the query is signed as received, special characters unescaped (node "urls with special characters")', () => {
    expect(check(adapter, 'dsq4Ehbj6cs+KdTkpF5sSSplOWw=', encode(VECTOR_PARAMS), keys, `${VECTOR_TARGET}&Body=It's+amazing`)).toBe('v1');
    // Sent with ' escaped (%27) and a space as +, while signed raw: no spelling twilio-node tries gives that string back
    // (its Node-querystring one writes the space %20), so neither it nor we accept it (twilio-node #1183, PR #1194).
    const sent = `https://mycompany.com${VECTOR_TARGET}&Body=It%27s+amazing`;
    expect(twilio.validateRequest(TOKEN, 'dsq4Ehbj6cs+KdTkpF5sSSplOWw=', sent, asObject(VECTOR_PARAMS))).toBe(false);
    expect(check(adapter, 'dsq4Ehbj6cs+KdTkpF5sSSplOWw=', encode(VECTOR_PARAMS), keys, `${VECTOR_TARGET}&Body=It%27s+amazing`)).toBeNull();
  });

  // twilio-node spec/unit/webhooks/webhooks.spec.js: token "s3cr3t", no parameters; Twilio's back ends sign the
  // apostrophe raw or escaped, and send it either way (#1059, #1183). Signatures from node:crypto, apart from the adapter.
  it.each([
    ["param'WithQuote", "param'WithQuote", 'GfI7onHX/KQ2k1oVS3cUTVk4IEw='],
    ["param'WithQuote", 'param%27WithQuote', 'GfI7onHX/KQ2k1oVS3cUTVk4IEw='],
    ['param%27WithQuote', "param'WithQuote", 'HkuXLxVQ7zHv9LmGpzlLuGaxhJY='],
    ['param%27WithQuote', 'param%27WithQuote', 'HkuXLxVQ7zHv9LmGpzlLuGaxhJY='],
  ])("signed over ?test=%s, sent as ?test=%s → verifies, as twilio-node's validateRequest", (signedAs, sentAs, signature) => {
    const token = 's3cr3t';
    expect(createHmac('sha1', token).update(`https://example.com/path?test=${signedAs}`).digest('base64')).toBe(signature);
    expect(twilio.validateRequest(token, signature, `https://example.com/path?test=${sentAs}`, {})).toBe(true);
    const a = make({ publicUrl: 'https://example.com/path' });
    const ks = trustedKeys(a, ['v1', token]);
    expect(check(a, signature, '', ks, `/path?test=${sentAs}`)).toBe('v1');
    expect(check(a, signature, '', ks, `/path?test=${sentAs.replace('Quote', 'Quotes')}`)).toBeNull();
  });

  it('URLs with credentials (php/node vectors) are plain strings to the signer; publicUrl refuses them', () => {
    const params = formParams(Buffer.from(encode(VECTOR_PARAMS)));
    expect(twilioSignature(TOKEN, 'https://user:pass@mycompany.com/myapp.php?foo=1&bar=2', params)).toBe('CukzLTc1tT5dXEDIHm/tKBanW10=');
    expect(twilioSignature(TOKEN, 'https://user@mycompany.com/myapp.php?foo=1&bar=2', params)).toBe('2YRLlVAflCqxaNicjMpJcSTgzSs=');
    expect(portVariants('https://user:pass@mycompany.com/myapp.php?foo=1&bar=2')[1]).toBe('https://user:pass@mycompany.com:443/myapp.php?foo=1&bar=2');
    expect(twilioSignature(TOKEN, portVariants('https://user:pass@mycompany.com/myapp.php?foo=1&bar=2')[1]!, params)).toBe('ZQFR1PTIZXF2MXB8ZnKCvnnA+rI=');
    expect(() => make({ publicUrl: 'https://user:pass@mycompany.com/myapp.php' })).toThrow(/credentials/);
  });
});

// ── the official SDK, both directions ────────────────────────────────────────────────────────
const SECRET = '0f1e2d3c4b5a69788796a5b4c3d2e1f0';
const OTHER = 'ffffeeeeddddccccbbbbaaaa99998888';
const adapter = twilioCase.adapter;
const keys = trustedKeys(adapter, ['v1', SECRET]);
const SID = 'SM0123456789abcdef0123456789abcdef';
/** Values with everything that decoding touches: `+`, spaces, `&`, `=`, `%`, multi-byte and astral characters. */
const STATUS: [string, string][] = [
  ['MessageStatus', 'delivered'], ['SmsStatus', 'delivered'], ['To', '+15558675310'], ['Body', 'Zoë 😀 東京 a+b=c & 100% 𝄞'],
  ['MessageSid', SID], ['SmsSid', SID], ['AccountSid', 'AC00000000000000000000000000000000'], ['From', '+15017122661'], ['ApiVersion', '2010-04-01'],
];

describe('twilio: cross-checks with the official twilio SDK', () => {
  it('SDK → ours: getExpectedTwilioSignature over publicUrl + query verifies the form we receive', () => {
    for (const query of ['', '?foo=1&bar=2', "?name=William+O'hara&x=%2B1"]) {
      const signature = twilio.getExpectedTwilioSignature(SECRET, TWILIO_PUBLIC_URL + query, asObject(STATUS));
      expect(check(adapter, signature, encode(STATUS), keys, `/webhooks/twilio${query}`)).toBe('v1');
      expect(check(adapter, signature, encode(STATUS), trustedKeys(adapter, ['v1', OTHER]), `/webhooks/twilio${query}`)).toBeNull();
    }
  });

  it('ours → SDK: adapter.sign passes validateRequest (with the params Express would parse), not with another URL or token', () => {
    const body = Buffer.from(encode(STATUS));
    const signature = adapter.sign(body, SECRET, {})['x-twilio-signature']!;
    const params = { ...parseQueryString(body.toString('utf8')) };
    expect(twilio.validateRequest(SECRET, signature, TWILIO_PUBLIC_URL, params)).toBe(true);
    expect(twilio.validateRequest(SECRET, signature, 'http://127.0.0.1:8080/webhooks/twilio', params)).toBe(false);
    expect(twilio.validateRequest(OTHER, signature, TWILIO_PUBLIC_URL, params)).toBe(false);
    expect(twilio.validateRequest(SECRET, signature, TWILIO_PUBLIC_URL, { ...params, MessageStatus: 'failed' })).toBe(false);
  });

  it('ours ≡ SDK on repeated parameters and raw multi-byte bytes', () => {
    const body = Buffer.from(`Digits=5678&Digits=1234&Digits=1234&Note=caf\u00e9+${encodeURIComponent('東京')}&Plus=%2B1+2`, 'utf8');
    const params = { ...parseQueryString(body.toString('utf8')) };
    const ours = twilioSignature(SECRET, TWILIO_PUBLIC_URL, formParams(body));
    expect(ours).toBe(twilio.getExpectedTwilioSignature(SECRET, TWILIO_PUBLIC_URL, params));
    expect(check(adapter, ours, body, keys)).toBe('v1');
  });

  it('JSON both ways: validateRequestWithBody accepts ours; ours accepts getExpectedTwilioSignature + getExpectedBodyHash', () => {
    const body = `{"MessageSid": "${SID}", "MessageStatus": "delivered", "Price": 1.0, "Note": "caf\\u00e9 東京"}`;
    const hash = twilio.getExpectedBodyHash(body);
    expect(hash).toBe(sha256Hex(Buffer.from(body)));
    const url = `${TWILIO_PUBLIC_URL}?bodySHA256=${hash}`;
    const theirs = twilio.getExpectedTwilioSignature(SECRET, url, null as unknown as Record<string, string>);
    expect(check(adapter, theirs, body, keys, `/webhooks/twilio?bodySHA256=${hash}`, JSON_TYPE)).toBe('v1');
    const ours = twilioSignature(SECRET, url, null);
    expect(ours).toBe(theirs);
    expect(twilio.validateRequestWithBody(SECRET, ours, url, body)).toBe(true);
    expect(twilio.validateRequestWithBody(SECRET, ours, url, body.replace('1.0', '2.0'))).toBe(false);
  });

  it('SharedKey signatures (X-Twilio-Webhooks-Signature-Settings, HMAC_SHA256) both ways', () => {
    const settings: [string, string][] = [['X-Twilio-Webhooks-Signature-Settings', 'key=webhooks_sharedkey_1,algorithm=HMAC_SHA256']];
    const theirs = twilio.getExpectedTwilioSignature(SECRET, TWILIO_PUBLIC_URL, asObject(STATUS), 'HMAC_SHA256');
    expect(check(adapter, theirs, encode(STATUS), keys, '/webhooks/twilio', FORM, settings)).toBe('v1');
    // Without the settings header the same digest is read as SHA-1: the wrong length.
    expect(reasonOf(() => check(adapter, theirs, encode(STATUS), keys))).toBe('malformed_signature');
    const ours = twilioSignature(SECRET, TWILIO_PUBLIC_URL, formParams(Buffer.from(encode(STATUS))), 'sha256');
    expect(twilio.validateRequest(SECRET, ours, TWILIO_PUBLIC_URL, asObject(STATUS), 'HMAC_SHA256')).toBe(true);
    expect(check(adapter, ours, encode(STATUS), keys, '/webhooks/twilio', FORM, [['X-Twilio-Webhooks-Signature-Settings', 'algorithm=hmac_sha256']])).toBe('v1');
  });
});

// ── signature metadata and verification ─────────────────────────────────────────────────────
describe('twilio: X-Twilio-Signature parsing', () => {
  const body = encode(STATUS);
  const good = adapter.sign(Buffer.from(body), SECRET, {})['x-twilio-signature']!;

  it.each([
    ['absent header', null, 'missing_signature'],
    ['empty header', '', 'missing_signature'],
    ['not base64', '!!!notbase64!!!=', 'malformed_signature'],
    ['bad padding', good.slice(0, -1), 'malformed_signature'],
    ['a SHA-256 digest without the settings header', Buffer.alloc(32, 1).toString('base64'), 'malformed_signature'],
    ['hex instead of base64', Buffer.alloc(20, 1).toString('hex'), 'malformed_signature'],
  ] as [string, string | null, string][])('%s → %s', (_name, header, reason) => {
    expect(reasonOf(() => check(adapter, header, body, keys))).toBe(reason);
  });

  it('the header twice is ambiguous, never joined', () => {
    expect(reasonOf(() => adapter.parseSignature(req([['X-Twilio-Signature', good], ['x-twilio-signature', good]])))).toBe('ambiguous_signature');
  });

  it.each([
    ['an unknown algorithm', [['X-Twilio-Webhooks-Signature-Settings', 'algorithm=HMAC_MD5']], '/webhooks/twilio', FORM, 'malformed_signature'],
    ['two algorithms', [['X-Twilio-Webhooks-Signature-Settings', 'algorithm=HMAC_SHA1,algorithm=HMAC_SHA256']], '/webhooks/twilio', FORM, 'ambiguous_signature'],
    ['the settings header twice', [['X-Twilio-Webhooks-Signature-Settings', 'algorithm=HMAC_SHA1'], ['X-Twilio-Webhooks-Signature-Settings', 'algorithm=HMAC_SHA1']], '/webhooks/twilio', FORM, 'ambiguous_signature'],
    ['bodySHA256 twice', [], `/webhooks/twilio?bodySHA256=${BODY_HASH}&bodySHA256=${BODY_HASH}`, JSON_TYPE, 'ambiguous_signature'],
    ['bodySHA256 not hex', [], `/webhooks/twilio?bodySHA256=${'z'.repeat(64)}`, JSON_TYPE, 'malformed_signature'],
    ['bodySHA256 of SHA-1 length', [], `/webhooks/twilio?bodySHA256=${BODY_HASH.slice(0, 40)}`, JSON_TYPE, 'malformed_signature'],
    ['bodySHA256 empty', [], '/webhooks/twilio?bodySHA256=', JSON_TYPE, 'malformed_signature'],
    ['a JSON body without bodySHA256', [], '/webhooks/twilio?foo=1', JSON_TYPE, 'malformed_signature'],
  ] as [string, [string, string][], string, string, string][])('%s → %s', (_name, extra, target, contentType, reason) => {
    expect(reasonOf(() => adapter.parseSignature(req([['X-Twilio-Signature', good], ...extra], target, contentType)))).toBe(reason);
  });

  it('no timestamp is signed: no freshness window', () => {
    expect(adapter.defaultToleranceSeconds).toBeNull();
    expect(adapter.parseSignature(req([['X-Twilio-Signature', good]])).timestamp).toBeNull();
  });
});

describe('twilio: verification', () => {
  const body = Buffer.from(encode(STATUS));
  const signature = adapter.sign(body, SECRET, {})['x-twilio-signature']!;

  it('one changed byte of a value, name or separator fails', () => {
    expect(check(adapter, signature, body, keys)).toBe('v1');
    for (const [from, to] of [['delivered', 'deliveree'], ['MessageSid', 'MessageSix'], ['&To=', '&To ']]) {
      expect(check(adapter, signature, body.toString('utf8').replace(from!, to!), keys)).toBeNull();
    }
    const flipped = Buffer.from(body);
    flipped.writeUInt8(flipped.readUInt8(flipped.length - 1) ^ 0x01, flipped.length - 1);
    expect(check(adapter, signature, flipped, keys)).toBeNull();
  });

  it('the bytes are not signed, the decoded parameters are: order, %XX spelling and `+` vs %20 do not matter', () => {
    const respelled = encode([...STATUS].reverse()).replaceAll('+', '%20').replace('MessageSid', 'Message%53id');
    expect(respelled).not.toBe(body.toString('utf8'));
    expect(check(adapter, signature, respelled, keys)).toBe('v1');
  });

  it('wrong token, retired token, and key order (first trusted key that matches)', () => {
    expect(check(adapter, signature, body, trustedKeys(adapter, ['v1', OTHER]))).toBeNull();
    expect(check(adapter, signature, body, trustedKeys(adapter, ['v2', OTHER], ['v1', SECRET]))).toBe('v1');
    expect(check(adapter, signature, body, trustedKeys(adapter, ['v1', SECRET, Date.now() - 1]))).toBeNull();
  });

  it('the URL is publicUrl, whatever path the server saw; the server URL and another publicUrl path fail', () => {
    expect(check(adapter, signature, body, keys, '/internal/rewritten/path')).toBe('v1');
    const serverUrl = twilioSignature(SECRET, 'http://127.0.0.1:3000/webhooks/twilio', formParams(body));
    expect(check(adapter, serverUrl, body, keys)).toBeNull();
    const otherPath = twilioSignature(SECRET, 'https://hooks.example.com/twilio/other', formParams(body));
    expect(check(adapter, otherPath, body, keys)).toBeNull();
  });

  it('the query is signed: added, removed or changed → fails', () => {
    const withQuery = twilioSignature(SECRET, `${TWILIO_PUBLIC_URL}?tenant=a`, formParams(body));
    expect(check(adapter, withQuery, body, keys, '/webhooks/twilio?tenant=a')).toBe('v1');
    expect(check(adapter, withQuery, body, keys, '/webhooks/twilio?tenant=b')).toBeNull();
    expect(check(adapter, withQuery, body, keys, '/webhooks/twilio')).toBeNull();
    expect(check(adapter, signature, body, keys, '/webhooks/twilio?tenant=a')).toBeNull();
    expect(check(adapter, signature, body, keys, '/webhooks/twilio?')).toBeNull();
  });

  it('a JSON delivery signed for one body does not verify another; a form signature over the URL alone needs an empty form', () => {
    const json = Buffer.from(`{"MessageSid": "${SID}", "MessageStatus": "sent"}`);
    const target = `/webhooks/twilio?bodySHA256=${sha256Hex(json)}`;
    const urlOnly = twilioSignature(SECRET, TWILIO_PUBLIC_URL + target.slice(target.indexOf('?')), null);
    expect(check(adapter, urlOnly, json, keys, target, JSON_TYPE)).toBe('v1');
    expect(check(adapter, urlOnly, Buffer.from(json.toString().replace('sent', 'read')), keys, target, JSON_TYPE)).toBeNull();
    // A form body sent to that URL: bodySHA256 in the URL still binds the body.
    expect(check(adapter, urlOnly, `MessageSid=${SID}&MessageStatus=read`, keys, target, FORM)).toBeNull();
    expect(check(adapter, urlOnly, json, keys, target, FORM)).toBe('v1');
  });
});

// ── the logical event ────────────────────────────────────────────────────────────────────────
const envelopeOf = (a: ProviderAdapter, body: string, contentType = FORM) => a.envelope(Buffer.from(body), req([], '/webhooks/twilio', contentType), { timestamp: null });
const CA = 'CA0123456789abcdef0123456789abcdef';
const RE = 'RE0123456789abcdef0123456789abcdef';
const CF = 'CF0123456789abcdef0123456789abcdef';
const TR = 'TR0123456789abcdef0123456789abcdef';

describe('twilio: envelope (verified body → logical event)', () => {
  it('a message status callback: key SID:status, type message.<status>, object id the SID', () => {
    expect(envelopeOf(adapter, encode(STATUS))).toEqual({ eventId: `${SID}:delivered`, eventType: 'message.delivered', objectId: SID, objectVersion: null, providerCreatedAtMs: null });
  });

  it('an incoming message carries only SmsStatus', () => {
    expect(envelopeOf(adapter, `MessageSid=${SID}&SmsSid=${SID}&SmsStatus=received&Body=hi&From=%2B1555`)).toMatchObject({ eventId: `${SID}:received`, eventType: 'message.received' });
  });

  it('a call status callback: SequenceNumber is the ordering evidence, Timestamp the provider time', () => {
    const e = envelopeOf(adapter, `CallSid=${CA}&CallStatus=in-progress&SequenceNumber=2&Timestamp=Mon%2C+16+Aug+2010+03%3A45%3A01+%2B0000&CallbackSource=call-progress-events`);
    expect(e).toEqual({ eventId: `${CA}:in-progress`, eventType: 'call.in-progress', objectId: CA, objectVersion: '2', providerCreatedAtMs: Date.UTC(2010, 7, 16, 3, 45, 1) });
  });

  it('a completed call that was recorded is still a call event (RecordingSid without RecordingStatus)', () => {
    expect(envelopeOf(adapter, `CallSid=${CA}&CallStatus=completed&RecordingSid=${RE}&RecordingUrl=https%3A%2F%2Fapi.twilio.com%2Fr`)).toMatchObject({ eventId: `${CA}:completed`, eventType: 'call.completed' });
  });

  it('recording, transcription and conference callbacks name their own resource, not the call', () => {
    expect(envelopeOf(adapter, `CallSid=${CA}&RecordingSid=${RE}&RecordingStatus=completed&RecordingDuration=7`)).toMatchObject({ eventId: `${RE}:completed`, eventType: 'recording.completed', objectId: RE });
    expect(envelopeOf(adapter, `TranscriptionSid=${TR}&TranscriptionStatus=completed&RecordingSid=${RE}&CallSid=${CA}&CallStatus=completed`)).toMatchObject({ eventId: `${TR}:completed`, eventType: 'transcription.completed' });
    // Every participant-join of one conference has the same event name: the sequence number tells them apart.
    const join = (seq: number, call: string) => envelopeOf(adapter, `ConferenceSid=${CF}&StatusCallbackEvent=participant-join&SequenceNumber=${seq}&CallSid=${call}`);
    expect(join(3, CA)).toMatchObject({ eventId: `${CF}:participant-join:3`, eventType: 'conference.participant-join', objectId: CF, objectVersion: '3' });
    expect(join(4, CA.replace('CA0', 'CA1')).eventId).toBe(`${CF}:participant-join:4`);
  });

  it('a JSON body (Studio "Make HTTP Request") uses the same fields at the top level', () => {
    expect(envelopeOf(adapter, `{"MessageSid": "${SID}", "MessageStatus": "sent"}`, JSON_TYPE)).toMatchObject({ eventId: `${SID}:sent`, eventType: 'message.sent' });
  });

  it.each([
    ['no known SID', 'AccountSid=AC1&Body=hi', 'missing_event_id'],
    ['a SID without a status', `MessageSid=${SID}&Body=hi`, 'missing_event_id'],
    ['an empty status', `MessageSid=${SID}&MessageStatus=`, 'missing_event_id'],
    ['a conference event without SequenceNumber', `ConferenceSid=${CF}&StatusCallbackEvent=conference-end`, 'missing_event_id'],
    ['a SID of the wrong shape', 'MessageSid=obj_123&MessageStatus=sent', 'malformed_payload'],
    ['a status that is not a lowercase word', `MessageSid=${SID}&MessageStatus=Sent`, 'malformed_payload'],
    ['a SequenceNumber that is not a number', `ConferenceSid=${CF}&StatusCallbackEvent=conference-end&SequenceNumber=x`, 'malformed_payload'],
    ['one key field with two values', `MessageSid=${SID}&MessageStatus=sent&MessageStatus=delivered`, 'malformed_payload'],
    ['a message that also names a call with a status', `MessageSid=${SID}&MessageStatus=sent&CallSid=${CA}&CallStatus=completed`, 'malformed_payload'],
  ])('%s → %s', (_name, body, reason) => {
    expect(reasonOf(() => envelopeOf(adapter, body))).toBe(reason);
  });

  it.each([
    ['not JSON', '{"MessageSid":', 'malformed_payload'],
    ['a JSON array (one callback; an array is an Event Streams batch, read by envelopes)', `[{"MessageSid": "${SID}", "MessageStatus": "sent"}]`, 'malformed_payload'],
    ['a JSON object without the fields', '{"property": "value"}', 'missing_event_id'],
  ])('JSON: %s → %s', (_name, body, reason) => {
    expect(reasonOf(() => envelopeOf(adapter, body, JSON_TYPE))).toBe(reason);
  });

  it.each([
    ['an element without a CloudEvent id', `[{"MessageSid": "${SID}", "MessageStatus": "sent"}]`, 'missing_event_id'],
    ['an element without a type', '[{"id": "EZ1"}]', 'missing_event_type'],
    ['an element that is not an object', '[{"id": "EZ1", "type": "t"}, 42]', 'malformed_payload'],
    ['not JSON', '[{"id": "EZ1", ', 'malformed_payload'],
  ])('Event Streams batch: %s → %s (for the whole delivery)', (_name, body, reason) => {
    expect(reasonOf(() => adapter.envelopes!(Buffer.from(body), req([], '/webhooks/twilio', JSON_TYPE), { timestamp: null }))).toBe(reason);
  });

  it('redelivery window: Event Streams retries an undelivered event (same id) for up to four hours', () => {
    // twilio.com/docs/events/event-delivery-and-duplication: "retries delivering an event for up to four hours".
    expect(adapter.redeliveryWindowSeconds).toBeGreaterThanOrEqual(4 * 60 * 60);
  });

  it('envelopes: a form or a JSON object is the one callback envelope() reads; an empty batch holds no event', () => {
    const one = adapter.envelopes!(Buffer.from(`{"MessageSid": "${SID}", "MessageStatus": "sent"}`), req([], '/webhooks/twilio', JSON_TYPE), { timestamp: null });
    expect(one).toEqual([envelopeOf(adapter, `{"MessageSid": "${SID}", "MessageStatus": "sent"}`, JSON_TYPE)]);
    expect(adapter.envelopes!(Buffer.from(encode(STATUS)), req([]), { timestamp: null })).toEqual([envelopeOf(adapter, encode(STATUS))]);
    expect(adapter.envelopes!(Buffer.from(' [ ] '), req([], '/webhooks/twilio', JSON_TYPE), { timestamp: null })).toEqual([]);
  });

  it('the same value repeated is one value (as the signature de-duplicates it)', () => {
    expect(envelopeOf(adapter, `MessageSid=${SID}&MessageStatus=sent&MessageStatus=sent`).eventId).toBe(`${SID}:sent`);
  });

  describe('a signed body re-split across name/value boundaries (the signature has no delimiters)', () => {
    // Twilio signs …MessageStatussentTo+1555…: `MessageStatus=se&ntTo=+1555` signs the same.
    const genuine: [string, string][] = [['MessageSid', SID], ['MessageStatus', 'sent'], ['To', '+15558675310']];
    const resplit: [string, string][] = [['MessageSid', SID], ['MessageStatus', 'se'], ['ntTo', '+15558675310']];
    const swallowed: [string, string][] = [['MessageSid', SID], ['MessageStatus', 'sentTo+15558675310']];

    it('the SDK accepts the re-split bodies (the weakness is in the scheme), and so does our verify', () => {
      const signature = twilioSignature(SECRET, TWILIO_PUBLIC_URL, formParams(Buffer.from(encode(genuine))));
      for (const params of [resplit, swallowed]) {
        expect(twilio.validateRequest(SECRET, signature, TWILIO_PUBLIC_URL, asObject(params))).toBe(true);
        expect(check(adapter, signature, encode(params), keys)).toBe('v1');
      }
    });

    it('but no re-split yields another key: a truncated or extended status is refused', () => {
      expect(envelopeOf(adapter, encode(genuine)).eventId).toBe(`${SID}:sent`);
      expect(reasonOf(() => envelopeOf(adapter, encode(resplit)))).toBe('malformed_payload');
      expect(reasonOf(() => envelopeOf(adapter, encode(swallowed)))).toBe('malformed_payload');
      // A SID has a fixed shape, so it cannot be shortened or lengthened either.
      expect(reasonOf(() => envelopeOf(adapter, encode([['MessageSid', SID.slice(0, -1)], ['fMessageStatus', 'sent']])))).toBe('missing_event_id');
      // A SID + status smuggled out of a free-text value (an SMS Body) is a second resource: refused.
      const smuggled: [string, string][] = [['Body', 'hi'], ['CallSid', CA], ['CallStatus', 'completed'], ['MessageSid', SID], ['SmsStatus', 'received']];
      expect(reasonOf(() => envelopeOf(adapter, encode(smuggled)))).toBe('malformed_payload');
    });
  });

  describe('options.keyFields', () => {
    const custom = make({ publicUrl: TWILIO_PUBLIC_URL, keyFields: ['ConversationSid', 'EventType', 'MessageIndex'] });

    it('the listed fields, in order, make the key; the first is the object id, the first two the type', () => {
      expect(envelopeOf(custom, 'ConversationSid=CH1&EventType=onMessageAdded&MessageIndex=4&Body=hi')).toEqual({
        eventId: 'CH1:onMessageAdded:4', eventType: 'conversation.onMessageAdded', objectId: 'CH1', objectVersion: null, providerCreatedAtMs: null,
      });
      expect(envelopeOf(make({ publicUrl: TWILIO_PUBLIC_URL, keyFields: ['MessageSid', 'MessageStatus'] }), encode(STATUS)).eventId).toBe(`${SID}:delivered`);
      expect(envelopeOf(make({ publicUrl: TWILIO_PUBLIC_URL, keyFields: ['EventSid'] }), 'EventSid=EV1').eventType).toBe('event');
    });

    it('":" and "%" in values are escaped, so two different field lists never give the same key', () => {
      const two = make({ publicUrl: TWILIO_PUBLIC_URL, keyFields: ['A', 'B'] });
      expect(envelopeOf(two, 'A=x%3Ay&B=z').eventId).toBe('x%3Ay:z');
      expect(envelopeOf(two, 'A=x&B=y%3Az').eventId).toBe('x:y%3Az');
      expect(envelopeOf(two, 'A=100%25&B=z').eventId).toBe('100%25:z');
    });

    it('a missing or empty key field → missing_event_id', () => {
      expect(reasonOf(() => envelopeOf(custom, 'ConversationSid=CH1&EventType=onMessageAdded'))).toBe('missing_event_id');
      expect(reasonOf(() => envelopeOf(custom, 'ConversationSid=CH1&EventType=&MessageIndex=1'))).toBe('missing_event_id');
    });
  });
});

// ── configuration and secrets ────────────────────────────────────────────────────────────────
describe('twilio: endpoint options', () => {
  it.each([
    ['no options', undefined, 'endpoints[0].options.publicUrl', /required/],
    ['publicUrl missing', { keyFields: ['MessageSid'] }, 'endpoints[0].options.publicUrl', /required/],
    ['publicUrl not a string', { publicUrl: 42 }, 'endpoints[0].options.publicUrl', /required/],
    ['a relative URL', { publicUrl: '/webhooks/twilio' }, 'endpoints[0].options.publicUrl', /absolute http\(s\) URL/],
    ['another scheme', { publicUrl: 'ftp://example.com/x' }, 'endpoints[0].options.publicUrl', /absolute http\(s\) URL/],
    ['no "//"', { publicUrl: 'https:example.com/x' }, 'endpoints[0].options.publicUrl', /absolute http\(s\) URL/],
    ['a query', { publicUrl: 'https://example.com/x?tenant=a' }, 'endpoints[0].options.publicUrl', /query/],
    ['a fragment (connection overrides)', { publicUrl: 'https://example.com/x#rc=2' }, 'endpoints[0].options.publicUrl', /fragment/],
    ['credentials', { publicUrl: 'https://u:p@example.com/x' }, 'endpoints[0].options.publicUrl', /credentials/],
    ['whitespace', { publicUrl: 'https://example.com/a b' }, 'endpoints[0].options.publicUrl', /whitespace/],
    ['an unknown option', { publicUrl: 'https://example.com/x', signatureHeader: 'x' }, 'endpoints[0].options.signatureHeader', /unknown key/],
    ['keyFields empty', { publicUrl: 'https://example.com/x', keyFields: [] }, 'endpoints[0].options.keyFields', /1 to 8/],
    ['keyFields not a list', { publicUrl: 'https://example.com/x', keyFields: 'MessageSid' }, 'endpoints[0].options.keyFields', /list/],
    ['keyFields with a non-string', { publicUrl: 'https://example.com/x', keyFields: ['MessageSid', 3] }, 'endpoints[0].options.keyFields[1]', /non-empty string/],
    ['keyFields twice the same', { publicUrl: 'https://example.com/x', keyFields: ['MessageSid', 'MessageSid'] }, 'endpoints[0].options.keyFields[1]', /twice/],
  ] as [string, Record<string, unknown> | undefined, string, RegExp][])('%s → ConfigError at %s', (_name, options, path, message) => {
    const e = thrownBy(() => PROVIDERS.twilio!(options, 'endpoints[0].options'), ConfigError);
    expect(e.path).toBe(path);
    expect(e.message).toMatch(message);
  });

  it('accepts http(s) URLs with a port, an IPv6 host or no path, verbatim', () => {
    for (const publicUrl of ['https://hooks.example.com:8443/twilio', 'http://[::1]:8080/t', 'https://hooks.example.com']) {
      const a = make({ publicUrl });
      const sig = a.sign(Buffer.from(encode(STATUS)), SECRET, {})['x-twilio-signature']!;
      expect(sig).toBe(twilio.getExpectedTwilioSignature(SECRET, publicUrl, asObject(STATUS)));
      expect(check(a, sig, encode(STATUS), keys)).toBe('v1');
    }
  });

  it('port variants: any port removed, the default one added', () => {
    expect(portVariants('https://h.example/x')).toEqual(['https://h.example/x', 'https://h.example:443/x']);
    expect(portVariants('http://h.example/x')).toEqual(['http://h.example/x', 'http://h.example:80/x']);
    expect(portVariants('https://h.example:8443/x')).toEqual(['https://h.example/x', 'https://h.example:8443/x']);
    expect(portVariants('http://[::1]:8080/t')).toEqual(['http://[::1]/t', 'http://[::1]:8080/t']);
  });
});

describe('twilio: secrets', () => {
  it('the auth token is used as UTF-8 key bytes', () => {
    expect(adapter.prepareSecret(SECRET).equals(Buffer.from(SECRET, 'utf8'))).toBe(true);
  });

  it('refuses an empty token, surrounding whitespace, and an Account SID pasted by mistake', () => {
    expect(() => adapter.prepareSecret('')).toThrow(/empty/);
    expect(() => adapter.prepareSecret(` ${SECRET}\n`)).toThrow(/whitespace/);
    expect(() => adapter.prepareSecret('AC0123456789abcdef0123456789abcdef')).toThrow(/Account SID/);
  });
});

describe('twilio: payload, sample', () => {
  it('parsePayload gives the form fields (repeated → list) or the JSON document', () => {
    expect(adapter.parsePayload!(Buffer.from('MessageSid=SM1&Body=caf%C3%A9+%2B1&D=1&D=2'))).toEqual({ MessageSid: 'SM1', Body: 'café +1', D: ['1', '2'] });
    expect(adapter.parsePayload!(Buffer.from(' {"a": 1.0}'))).toEqual({ a: 1 });
    const odd = adapter.parsePayload!(Buffer.from('MessageSid=SM1&__proto__=x&__proto__=y')) as Record<string, unknown>;
    expect(Object.getPrototypeOf(odd)).toBe(Object.prototype);
    expect(Object.getOwnPropertyDescriptor(odd, '__proto__')?.value).toEqual(['x', 'y']);
  });

  it('the sample is a signed message status callback that verifies and has a key', () => {
    const s = adapter.sample('abc');
    const sig = adapter.sign(s.body, SECRET, s.signOptions)['x-twilio-signature']!;
    expect(check(adapter, sig, s.body, keys, '/webhooks/twilio', s.headers['content-type'])).toBe('v1');
    expect(envelopeOf(adapter, s.body.toString())).toMatchObject({ eventType: 'message.delivered', eventId: expect.stringMatching(/^SM[0-9a-f]{32}:delivered$/) });
  });
});

// ── over HTTP: what the shared suite cannot express (the query, JSON, the proxy) ─────────────
describeEachStore('twilio over HTTP', (kind) => {
  let app: TestApp;
  beforeAll(async () => {
    app = await startTestApp(kind, { endpoints: [twilioCase.config] });
  });
  afterAll(async () => {
    await app?.stop();
  });

  const SECRET_V2 = TWILIO_SECRETS.v2;
  const send = (target: string, body: Buffer | string, headers: Record<string, string>) => post(`${app.url}${target}`, body, headers);
  async function rowsFor(providerEventId: string): Promise<InboxRow[]> {
    const rows = await Promise.all((await app.store.listInboxIds()).map((id) => app.store.getInbox(id)));
    return rows.filter((r): r is InboxRow => r !== null && r.endpointId === 'twilio' && r.providerEventId === providerEventId);
  }
  const sid = () => `SM${randomBytes(16).toString('hex')}`;

  it('the query Twilio called is signed: same query → 200, another query → 401, nothing stored', async () => {
    const m = twilioCase.make();
    const signature = twilioSignature(SECRET_V2, `${TWILIO_PUBLIC_URL}?tenant=acme`, formParams(m.body));
    const headers = { ...m.headers, 'x-twilio-signature': signature };
    const before = await app.store.countRows();
    const other = await send('/webhooks/twilio?tenant=evil', m.body, headers);
    expect(other.status, other.text).toBe(401);
    expect(other.json().error).toBe('invalid_signature');
    expect(await app.store.countRows()).toEqual(before);
    const ok = await send('/webhooks/twilio?tenant=acme', m.body, headers);
    expect(ok.status, ok.text).toBe(200);
    expect((await rowsFor(m.key)).map((r) => r.inboxId)).toEqual([ok.json().inbox_id]);
  });

  it("an apostrophe in the query: signed raw and sent as %27, or signed %27 and sent raw → 200 (Twilio's back ends do both)", async () => {
    // Raw bytes: Node's http.request would re-encode the ' of a request target (WHATWG URL), and the test is about its spelling.
    const sendRaw = async (target: string, m: ReturnType<typeof twilioCase.make>, signedAs: string) => {
      const head = [`POST ${target} HTTP/1.1`, `Host: ${new URL(app.url).host}`, `Content-Type: ${m.headers['content-type']}`,
        `X-Twilio-Signature: ${twilioSignature(SECRET_V2, `${TWILIO_PUBLIC_URL}?name=${signedAs}`, formParams(m.body))}`,
        `Content-Length: ${m.body.length}`, 'Connection: close', '', ''].join('\r\n');
      return (await rawExchange(Number(new URL(app.url).port), Buffer.concat([Buffer.from(head, 'latin1'), m.body]), 10_000)).text;
    };
    for (const [signedAs, sentAs] of [["O'Hara", 'O%27Hara'], ['O%27Hara', "O'Hara"]] as const) {
      const m = twilioCase.make();
      const answer = await sendRaw(`/webhooks/twilio?name=${sentAs}`, m, signedAs);
      expect(statusOf(answer), answer).toBe(200);
      expect(await rowsFor(m.key)).toHaveLength(1);
    }
    const m = twilioCase.make();
    const other = await sendRaw('/webhooks/twilio?name=O%27Harb', m, "O'Hara");
    expect(statusOf(other), other).toBe(401);
    expect(await rowsFor(m.key)).toHaveLength(0);
  });

  it('signed over the URL the server itself saw (not publicUrl) → 401', async () => {
    const m = twilioCase.make();
    const signature = twilioSignature(SECRET_V2, `${app.url}/webhooks/twilio`, formParams(m.body));
    const r = await send('/webhooks/twilio', m.body, { ...m.headers, 'x-twilio-signature': signature });
    expect(r.status, r.text).toBe(401);
  });

  it('signed with the default port (:443) in the URL → 200', async () => {
    const m = twilioCase.make();
    const signature = twilioSignature(SECRET_V2, 'https://hooks.example.com:443/twilio/status', formParams(m.body));
    const r = await send('/webhooks/twilio', m.body, { ...m.headers, 'x-twilio-signature': signature });
    expect(r.status, r.text).toBe(200);
  });

  it('a JSON delivery: bodySHA256 in the URL binds the exact bytes; another body → 401; no bodySHA256 → 401 malformed_signature', async () => {
    const s = sid();
    const body = Buffer.from(`{"MessageSid": "${s}", "MessageStatus": "sent", "Price": 1.0, "Note": "caf\\u00e9 😀"}`, 'utf8');
    const target = `/webhooks/twilio?bodySHA256=${sha256Hex(body)}`;
    const signature = twilioSignature(SECRET_V2, TWILIO_PUBLIC_URL + target.slice(target.indexOf('?')), null);
    const headers = { 'content-type': 'application/json', 'x-twilio-signature': signature };
    const tampered = Buffer.from(body.toString('utf8').replace('1.0', '2.0'), 'utf8');
    expect((await send(target, tampered, headers)).status).toBe(401);
    const missing = await send('/webhooks/twilio', body, headers);
    expect(missing.status, missing.text).toBe(401);
    expect(missing.json().error).toBe('malformed_signature');
    const ok = await send(target, body, headers);
    expect(ok.status, ok.text).toBe(200);
    const row = await app.store.getInbox(ok.json().inbox_id);
    expect(row).toMatchObject({ providerEventId: `${s}:sent`, eventType: 'message.sent', objectId: s });
  });

  it('the same parameters spelled differently verify and are the same event → duplicate', async () => {
    const m = twilioCase.make();
    const headers = { ...m.headers, ...twilioCase.adapter.sign(m.body, SECRET_V2, {}) };
    const first = await send('/webhooks/twilio', m.body, headers);
    expect(first.status, first.text).toBe(200);
    const respelled = Buffer.from(m.body.toString('utf8').split('&').reverse().join('&').replace('AccountSid', 'Account%53id'), 'utf8');
    const again = await send('/webhooks/twilio', respelled, headers);
    expect(again.status, again.text).toBe(200);
    expect(again.json()).toEqual({ inbox_id: first.json().inbox_id, duplicate: true });
  });

  it('a re-split of a genuine signed body → 400 malformed_payload, nothing stored', async () => {
    const s = sid();
    const genuine = encode([['MessageSid', s], ['MessageStatus', 'sent'], ['To', '+15558675310']]);
    const signature = twilioSignature(SECRET_V2, TWILIO_PUBLIC_URL, formParams(Buffer.from(genuine)));
    const before = await app.store.countRows();
    const r = await send('/webhooks/twilio', encode([['MessageSid', s], ['MessageStatus', 'se'], ['ntTo', '+15558675310']]), { 'content-type': FORM, 'x-twilio-signature': signature });
    expect(r.status, r.text).toBe(400);
    expect(r.json().error).toBe('malformed_payload');
    expect(await app.store.countRows()).toEqual(before);
  });

  it('an Event Streams delivery (a JSON array of CloudEvents, bodySHA256 in the URL) → one row per event, keyed by its id; a redelivery → duplicates', async () => {
    // The shape Twilio documents for webhook sinks ("the body of each webhook is a JSON array of
    // CloudEvents"; the test event as published in its Event Streams validation guides).
    const ez = `EZ${randomBytes(16).toString('hex')}`;
    const test = `AC${randomBytes(16).toString('hex')}`;
    const body = Buffer.from(`[
  {
    "specversion": "1.0",
    "type": "com.twilio.messaging.message.delivered",
    "source": "/2010-04-01/Accounts/AC00000000000000000000000000000000/Messages/SM00000000000000000000000000000001.json",
    "id": "${ez}",
    "dataschema": "https://events-schemas.twilio.com/Messaging.MessageStatus/4",
    "datacontenttype": "application/json",
    "time": "2026-06-10T06:02:53.000Z",
    "data": {"messageSid": "SM00000000000000000000000000000001", "messageStatus": "DELIVERED", "to": "+15558675310", "note": "caf\\u00e9 😀"}
  },
  {
    "specversion": "1.0",
    "type": "com.twilio.eventstreams.test-event",
    "source": "Sink",
    "id": "${test}",
    "dataschema": "https://events-schemas.twilio.com/EventStreams.TestSink/1.json",
    "datacontenttype": "application/json",
    "time": "2026-06-10T06:02:54.377Z",
    "data": {"test_id": "cae2f9e2-c277-4612-8ad3-93c1a7a3ef88"}
  }
]`, 'utf8');
    const target = `/webhooks/twilio?bodySHA256=${sha256Hex(body)}`;
    const signature = twilioSignature(SECRET_V2, TWILIO_PUBLIC_URL + target.slice(target.indexOf('?')), null);
    const headers = { 'content-type': 'application/json; charset=utf-8', 'x-twilio-signature': signature };
    const r = await send(target, body, headers);
    expect(r.status, r.text).toBe(200);
    const events = r.json().events as { event_id: string; inbox_id: string; duplicate: boolean }[];
    expect(events.map((e) => [e.event_id, e.duplicate])).toEqual([[ez, false], [test, false]]);
    const [delivered, probe] = await Promise.all(events.map((e) => app.store.getInbox(e.inbox_id)));
    expect(delivered).toMatchObject({ providerEventId: ez, eventType: 'com.twilio.messaging.message.delivered', providerCreatedAtMs: Date.parse('2026-06-10T06:02:53.000Z') });
    expect(probe).toMatchObject({ providerEventId: test, eventType: 'com.twilio.eventstreams.test-event' });
    // Each row holds the exact bytes of its own element of the array.
    const text = body.toString('utf8');
    const first = Buffer.from(text.slice(text.indexOf('{'), text.indexOf('}\n  },') + 5), 'utf8');
    expect(delivered!.payloadHash.equals(sha256(first))).toBe(true);
    const again = await send(target, body, headers);
    expect(again.status, again.text).toBe(200);
    expect(again.json().events.map((e: { inbox_id: string; duplicate: boolean }) => [e.inbox_id, e.duplicate])).toEqual(events.map((e) => [e.inbox_id, true]));
    // A batch of one is answered like any single event; its row still holds the element's bytes.
    const single = Buffer.from(`[${first.toString('utf8').replace(ez, `EZ${randomBytes(16).toString('hex')}`)}]`, 'utf8');
    const t1 = `/webhooks/twilio?bodySHA256=${sha256Hex(single)}`;
    const one = await send(t1, single, { ...headers, 'x-twilio-signature': twilioSignature(SECRET_V2, TWILIO_PUBLIC_URL + t1.slice(t1.indexOf('?')), null) });
    expect(one.status, one.text).toBe(200);
    expect(one.json()).toEqual({ inbox_id: expect.any(String), duplicate: false });
    expect((await app.store.getInbox(one.json().inbox_id))!.payloadHash.equals(sha256(single.subarray(1, -1)))).toBe(true);
  });

  it('same SID, two statuses → two rows; the same SID and status again → duplicate', async () => {
    const s = sid();
    const sent = twilioCase.make('a', 'message.sent', s);
    const delivered = twilioCase.make('b', 'message.delivered', s);
    const sign = (b: Buffer) => ({ 'content-type': FORM, ...twilioCase.adapter.sign(b, SECRET_V2, {}) });
    const a = await send('/webhooks/twilio', sent.body, sign(sent.body));
    const b = await send('/webhooks/twilio', delivered.body, sign(delivered.body));
    expect([a.status, b.status]).toEqual([200, 200]);
    expect(a.json().inbox_id).not.toBe(b.json().inbox_id);
    const again = await send('/webhooks/twilio', sent.body, sign(sent.body));
    expect(again.json()).toEqual({ inbox_id: a.json().inbox_id, duplicate: true });
    expect((await rowsFor(`${s}:sent`))).toHaveLength(1);
    expect((await rowsFor(`${s}:delivered`))).toHaveLength(1);
  });
});
