import { createPublicKey, verify as edVerify } from 'node:crypto';
import { Webhook } from 'standardwebhooks';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { hmac, type TrustedKey } from '../../src/crypto/hmac.js';
import type { ProviderAdapter } from '../../src/providers/contract.js';
import { PROVIDERS } from '../../src/providers/registry.js';
import { decodeStandardSecret, isEd25519Key, MAX_V1A_SIGNATURES, standardPublicKeyOf, UNTYPED_EVENT } from '../../src/providers/standard-webhooks.js';
import { expectedFirst, reasonOf, trustedKeys, verifyWith, view } from '../helpers/adapter.js';
import { startTestApp, type TestApp } from '../helpers/app.js';
import { post } from '../helpers/http.js';
import { describeEachStore } from '../helpers/stores.js';

const adapter: ProviderAdapter = PROVIDERS['standard-webhooks']!(undefined, 'endpoints[0].options');

// standard-webhooks/standard-webhooks libraries/javascript/src/webhook.test.ts ("sign function works")
const V_SECRET = 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw';
const V_ID = 'msg_p5jXN8AQM9LWM0D4loKWxJek';
const V_TS = 1614265330;
const V_PAYLOAD = '{"test": 2432232314}';
const V_SIG = 'v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=';

const OTHER_SECRET = 'whsec_' + Buffer.alloc(24, 9).toString('base64');

const keys = (...entries: [string, string, number?][]): TrustedKey[] => trustedKeys(adapter, ...entries);

function headers(id: string, ts: number | string, sig: string, prefix = 'webhook-'): [string, string][] {
  return [[`${prefix}id`, id], [`${prefix}timestamp`, String(ts)], [`${prefix}signature`, sig]];
}

const check = (pairs: [string, string][], body: Buffer | string, ks: TrustedKey[], nowMs = Date.now()) => verifyWith(adapter, pairs, body, ks, nowMs);

describe('standard-webhooks: published vector', () => {
  it('sign reproduces v1,g0hM9Ss… and verify accepts it', () => {
    const h = adapter.sign(Buffer.from(V_PAYLOAD), V_SECRET, { id: V_ID, timestamp: V_TS });
    expect(h).toEqual({ 'webhook-id': V_ID, 'webhook-timestamp': String(V_TS), 'webhook-signature': V_SIG });
    expect(check(headers(V_ID, V_TS, V_SIG), V_PAYLOAD, keys(['v1', V_SECRET]))).toBe('v1');
  });

  it('the key is base64 of the secret minus "whsec_": the bare base64 secret is the same key', () => {
    expect(adapter.prepareSecret(V_SECRET).equals(adapter.prepareSecret('MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw'))).toBe(true);
    expect(check(headers(V_ID, V_TS, V_SIG), V_PAYLOAD, keys(['bare', 'MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw']))).toBe('bare');
    // The whole string as UTF-8 (Stripe's convention) is a different key.
    const utf8Key: TrustedKey = { version: 'utf8', key: Buffer.from(V_SECRET, 'utf8') };
    expect(check(headers(V_ID, V_TS, V_SIG), V_PAYLOAD, [utf8Key])).toBeNull();
  });

  it('a secret written without its base64 padding (or as base64url without it) is the same key, as the official library reads the unpadded one', () => {
    // 32 key bytes: padded base64 ends in "=", which producers that emit base64url often drop.
    const raw = Buffer.from(Array.from({ length: 32 }, (_, i) => (i * 37 + 251) % 256));
    const paddedSecret = 'whsec_' + raw.toString('base64');
    expect(paddedSecret.endsWith('=')).toBe(true);
    const body = '{"type":"invoice.paid","id":"evt_pad"}';
    const ts = new Date(1731705121_000);
    const signature = new Webhook(paddedSecret).sign('msg_pad', ts, body);
    for (const written of [paddedSecret.replace(/=+$/, ''), 'whsec_' + raw.toString('base64url'), raw.toString('base64url')]) {
      expect(adapter.prepareSecret(written).equals(raw), written).toBe(true);
      expect(check(headers('msg_pad', 1731705121, signature), body, keys(['v1', written]), 1731705121_000)).toBe('v1');
    }
    // The official library takes the unpadded standard form as the same key (it refuses the base64url alphabet).
    expect(new Webhook(paddedSecret.replace(/=+$/, '')).sign('msg_pad', ts, body)).toBe(signature);
    // A length no base64 can have (one character past a whole group) is still refused.
    expect(() => adapter.prepareSecret('whsec_' + raw.toString('base64url') + 'AB')).toThrow(/base64/);
  });

  it('id, timestamp and body are all signed', () => {
    const k = keys(['v1', V_SECRET]);
    expect(check(headers('msg_p5jXN8AQM9LWM0D4loKWxJeK', V_TS, V_SIG), V_PAYLOAD, k)).toBeNull();
    expect(check(headers(V_ID, V_TS + 1, V_SIG), V_PAYLOAD, k)).toBeNull();
    expect(check(headers(V_ID, V_TS, V_SIG), '{"test":2432232314}', k)).toBeNull();
  });
});

describe('standard-webhooks: cross-checks with the official standardwebhooks SDK', () => {
  const bodies = ['{"type":"invoice.paid","data":{"id":"inv_1"}}', '{"type":"user.created","data":{"name":"Zoë 🦄 東京","note":"caf\\u00e9"}}'];

  it.each(bodies)('SDK Webhook.sign → ours verifies: %j', (payload) => {
    const ts = Math.floor(Date.now() / 1000);
    const sig = new Webhook(V_SECRET).sign('msg_sdk_1', new Date(ts * 1000), payload);
    expect(check(headers('msg_sdk_1', ts, sig), payload, keys(['v1', V_SECRET]))).toBe('v1');
    expect(check(headers('msg_sdk_1', ts, sig), payload, keys(['v1', OTHER_SECRET]))).toBeNull();
  });

  it.each(bodies)('ours → SDK Webhook.verify accepts: %j', (payload) => {
    const h = adapter.sign(Buffer.from(payload, 'utf8'), V_SECRET, { id: 'msg_ours_1' });
    expect(new Webhook(V_SECRET).verify(payload, h)).toEqual(JSON.parse(payload));
    expect(() => new Webhook(OTHER_SECRET).verify(payload, h)).toThrow(/No matching signature/);
  });

  it('the SDK’s multi-signature case (v1, v2, valid, v1) verifies; v2 entries are skipped', () => {
    const ts = Math.floor(Date.now() / 1000);
    const valid = new Webhook(V_SECRET).sign(V_ID, new Date(ts * 1000), V_PAYLOAD);
    const sig = ['v1,Ceo5qEr07ixe2NLpvHk3FH9bwy/WavXrAFQ/9tdO6mc=', 'v2,Ceo5qEr07ixe2NLpvHk3FH9bwy/WavXrAFQ/9tdO6mc=', valid, 'v1,Ceo5qEr07ixe2NLpvHk3FH9bwy/WavXrAFQ/9tdO6mc='].join(' ');
    expect(check(headers(V_ID, ts, sig), V_PAYLOAD, keys(['v1', V_SECRET]))).toBe('v1');
    expect(() => new Webhook(V_SECRET).verify(V_PAYLOAD, Object.fromEntries(headers(V_ID, ts, sig)))).not.toThrow();
  });
});

describe('standard-webhooks: header parsing', () => {
  const body = Buffer.from(V_PAYLOAD);
  const k = keys(['v2', V_SECRET], ['v1', OTHER_SECRET]);
  const sigWith = (secret: string) => 'v1,' + hmac('sha256', adapter.prepareSecret(secret), [`${V_ID}.${V_TS}.`, body]).toString('base64');

  it('several space-separated v1 entries (rotation): any match verifies, in any order', () => {
    expect(check(headers(V_ID, V_TS, `${sigWith(OTHER_SECRET)} ${sigWith(V_SECRET)}`), body, k)).toBe('v2');
    expect(check(headers(V_ID, V_TS, `${sigWith(OTHER_SECRET)}  ${V_SIG.replace('g0h', 'h0g')}`), body, k)).toBe('v1');
    expect(check(headers(V_ID, V_TS, `${V_SIG.replace('g0h', 'h0g')} v1,Ceo5qEr07ixe2NLpvHk3FH9bwy/WavXrAFQ/9tdO6mc=`), body, k)).toBeNull();
  });

  it('v1a (ed25519) entries are never treated as HMAC: with only whsec_ keys they cannot verify', () => {
    const ed = 'v1a,' + Buffer.alloc(64, 1).toString('base64');
    expect(check(headers(V_ID, V_TS, `${ed} ${V_SIG}`), body, keys(['v1', V_SECRET]))).toBe('v1');
    // A v1a-only header parses (it is a signature) but no HMAC key checks it → invalid_signature upstream.
    expect(check(headers(V_ID, V_TS, ed), body, keys(['v1', V_SECRET]))).toBeNull();
  });

  it('accepts svix-* header names (Svix-branded deliveries)', () => {
    expect(check(headers(V_ID, V_TS, V_SIG, 'svix-'), body, keys(['v1', V_SECRET]))).toBe('v1');
    expect(check(headers(V_ID, V_TS, V_SIG, 'Svix-'), body, keys(['v1', V_SECRET]))).toBe('v1');
    expect(adapter.parseSignature(view(headers(V_ID, V_TS, V_SIG, 'svix-'))).timestamp).toBe(V_TS);
  });

  it('both webhook-* and svix-* signature headers present → ambiguous (different readers could disagree)', () => {
    const both = [...headers(V_ID, V_TS, V_SIG), ...headers('msg_other', V_TS, V_SIG, 'svix-')];
    expect(reasonOf(() => adapter.parseSignature(view(both)))).toBe('ambiguous_signature');
    const sameValues = [...headers(V_ID, V_TS, V_SIG), ...headers(V_ID, V_TS, V_SIG, 'svix-')];
    expect(reasonOf(() => adapter.parseSignature(view(sameValues)))).toBe('ambiguous_signature');
  });

  it('families are never mixed: webhook-signature with only svix-id/svix-timestamp has no webhook-id', () => {
    const mixed: [string, string][] = [['svix-id', V_ID], ['svix-timestamp', String(V_TS)], ['webhook-signature', V_SIG]];
    expect(reasonOf(() => adapter.parseSignature(view(mixed)))).toBe('malformed_signature');
  });

  it.each(expectedFirst([
    ['no signature header', [['webhook-id', V_ID], ['webhook-timestamp', String(V_TS)]], 'missing_signature'],
    ['empty signature header', headers(V_ID, V_TS, ''), 'missing_signature'],
    ['missing timestamp', [['webhook-id', V_ID], ['webhook-signature', V_SIG]], 'malformed_signature'],
    ['non-numeric timestamp ("hello", SDK test)', headers(V_ID, 'hello', V_SIG), 'malformed_signature'],
    ['fractional timestamp', headers(V_ID, '1614265330.5', V_SIG), 'malformed_signature'],
    ['missing id', [['webhook-timestamp', String(V_TS)], ['webhook-signature', V_SIG]], 'malformed_signature'],
    ['empty id', headers('', V_TS, V_SIG), 'malformed_signature'],
    ['entry without a comma', headers(V_ID, V_TS, 'v1' + V_SIG.slice(3)), 'malformed_signature'],
    ['entry with an empty version', headers(V_ID, V_TS, ',' + V_SIG.slice(3)), 'malformed_signature'],
    ['partial signature (SDK test: first 8 chars)', headers(V_ID, V_TS, V_SIG.slice(0, 8)), 'malformed_signature'],
    ['"v1," with nothing after', headers(V_ID, V_TS, 'v1,'), 'malformed_signature'],
    ['invalid base64 (SDK test)', headers(V_ID, V_TS, 'v1,dawfeoifkpqwoekfpqoekf'), 'malformed_signature'],
    ['malformed base64 characters', headers(V_ID, V_TS, 'v1,' + '*'.repeat(44)), 'malformed_signature'],
    ['wrong digest length (31 bytes)', headers(V_ID, V_TS, 'v1,' + Buffer.alloc(31, 1).toString('base64')), 'malformed_signature'],
    ['wrong digest length (64 bytes)', headers(V_ID, V_TS, 'v1,' + Buffer.alloc(64, 1).toString('base64')), 'malformed_signature'],
    ['one good and one malformed v1', headers(V_ID, V_TS, `${V_SIG} v1,abc`), 'malformed_signature'],
    ['signature header twice', [...headers(V_ID, V_TS, V_SIG), ['Webhook-Signature', V_SIG]], 'ambiguous_signature'],
    ['id header twice', [...headers(V_ID, V_TS, V_SIG), ['webhook-id', 'msg_2']], 'ambiguous_signature'],
    ['timestamp header twice', [...headers(V_ID, V_TS, V_SIG), ['webhook-timestamp', String(V_TS + 1)]], 'ambiguous_signature'],
  ] as [string, [string, string][], string][]))('%s → %s', (_name, reason, pairs) => {
    expect(reasonOf(() => adapter.parseSignature(view(pairs)))).toBe(reason);
  });

  it('a retired secret never verifies', () => {
    const now = Date.now();
    expect(check(headers(V_ID, V_TS, V_SIG), body, keys(['v1', V_SECRET, now]), now)).toBeNull();
    expect(check(headers(V_ID, V_TS, V_SIG), body, keys(['v1', V_SECRET, now + 1]), now)).toBe('v1');
  });

  it('refuses a secret that is not base64 after "whsec_"', () => {
    expect(() => adapter.prepareSecret('whsec_not*base64!')).toThrow(/base64/);
    expect(() => adapter.prepareSecret('whsec_')).toThrow(/base64/);
    expect(adapter.defaultToleranceSeconds).toBe(300);
  });
});

describe('standard-webhooks: envelope', () => {
  it('key = webhook-id (signed, stable across retries); type, data.id and timestamp from the body', () => {
    const body = Buffer.from('{"type":"invoice.paid","timestamp":"2022-11-03T20:26:10.344522Z","data":{"id":"inv_1"}}');
    const meta = adapter.parseSignature(view(headers(V_ID, V_TS, V_SIG)));
    expect(adapter.envelope(body, view([]), meta)).toEqual({
      eventId: V_ID,
      eventType: 'invoice.paid',
      objectId: 'inv_1',
      objectVersion: null,
      providerCreatedAtMs: Date.parse('2022-11-03T20:26:10.344Z'),
    });
  });

  it.each([
    ['not JSON', '{', 'malformed_payload'],
    ['a JSON array', '[{"type":"invoice.paid"}]', 'malformed_payload'],
  ])('%s → %s', (_name, body, reason) => {
    const meta = adapter.parseSignature(view(headers(V_ID, V_TS, V_SIG)));
    expect(reasonOf(() => adapter.envelope(Buffer.from(body), view([]), meta))).toBe(reason);
  });

  it.each([
    ['no type', '{"data":{}}'],
    ['a null type', '{"type":null,"data":{}}'],
  ])('%s: the spec does not require one, so the event is kept with type "untyped" (not refused)', (_name, body) => {
    const meta = adapter.parseSignature(view(headers(V_ID, V_TS, V_SIG)));
    expect(adapter.envelope(Buffer.from(body), view([]), meta)).toMatchObject({ eventId: V_ID, eventType: UNTYPED_EVENT });
  });

  it.each([
    ['an empty type', '{"type":"","data":{}}'],
    ['a type that is an object', '{"type":{"name":"x"},"data":{}}'],
  ])('%s: a type that is there but unusable is still refused (400 missing_event_type)', (_name, body) => {
    const meta = adapter.parseSignature(view(headers(V_ID, V_TS, V_SIG)));
    expect(() => adapter.envelope(Buffer.from(body), view([]), meta)).toThrow(expect.objectContaining({ reason: 'missing_event_type' }));
  });

  it('Svix\'s published manual-verification example (payload {"event_type":"ping",…}, no type) verifies and is an event', () => {
    // svix/svix-docs content/receiving/verifying-payloads/how-manual.mdx, "Example signatures".
    const body = Buffer.from('{"event_type":"ping","data":{"success":true}}');
    const pairs = headers('msg_loFOjxBNrRLzqYUf', 1731705121, 'v1,rAvfW3dJ/X/qxhsaXPOyyCGmRKsaKWcsNccKXlIktD0=', 'svix-');
    expect(check(pairs, body, keys(['v1', 'whsec_plJ3nmyCDGBKInavdOK15jsl']), 1731705121_000)).toBe('v1');
    expect(adapter.envelope(body, view([]), adapter.parseSignature(view(pairs)))).toEqual({
      eventId: 'msg_loFOjxBNrRLzqYUf', eventType: UNTYPED_EVENT, objectId: null, objectVersion: null, providerCreatedAtMs: null,
    });
  });
});

describeEachStore('standard-webhooks over HTTP: a payload without `type`', (kind) => {
  const SVIX_SECRET = 'whsec_plJ3nmyCDGBKInavdOK15jsl';
  let app: TestApp;
  beforeAll(async () => {
    app = await startTestApp(kind, { endpoints: [{ id: 'svix', provider: 'standard-webhooks', secrets: [{ version: 'v1', value: SVIX_SECRET }] }] });
  });
  afterAll(async () => {
    await app?.stop();
  });

  it('signed and fresh → 200 and stored once under type "untyped" (a 400 would be retried for a day, then disable the endpoint)', async () => {
    const id = `msg_untyped_${Math.random().toString(36).slice(2, 12)}`;
    const body = Buffer.from('{"event_type":"ping","data":{"success":true}}');
    const send = () => post(`${app.url}/webhooks/svix`, body, { 'content-type': 'application/json', ...adapter.sign(body, SVIX_SECRET, { id }) });
    const first = await send();
    expect(first.status, first.text).toBe(200);
    expect(first.json().duplicate).toBe(false);
    const row = await app.store.getInbox(first.json().inbox_id);
    expect(row).toMatchObject({ providerEventId: id, eventType: UNTYPED_EVENT });
    const retry = await send();
    expect(retry.json()).toEqual({ inbox_id: first.json().inbox_id, duplicate: true });
  });
});

// ---------------------------------------------------------------------------------------------
// v1a: asymmetric ed25519 signatures (whsk_ signs, whpk_ verifies)
// ---------------------------------------------------------------------------------------------

// standard-webhooks/standard-webhooks libraries/go/webhook_asymmetric_test.go (TestAsymmetricWebhookSign):
// seed "TESTSIGNINGKEYDONOTUSETHISFORANY", same id/timestamp/payload as the v1 vector.
const A_SIGNING = 'whsk_VEVTVFNJR05JTkdLRVlET05PVFVTRVRISVNGT1JBTlk=';
const A_SIG = 'v1a,tQ9V2XOqn7jL/DQenEFpqIugdBVtiMmER5mhSkXBNwM0mkATuDe6KYYUuxqtaiHeYGb7KaaBRdM5WqyeFiL8Ag==';
// Its public key, derived independently (node:crypto, raw 32 bytes of the SPKI export).
const A_PUBLIC = 'whpk_ZlN4eg7dSSqi0moX9hQUk3orrOouK3QVQSlJa248c/g=';
// The same Go file's other test key (seed "WEBHOOKASYMMETRICTESTPRIVATEKEY1", given there without the whsk_ prefix).
const B_SIGNING = 'whsk_V0VCSE9PS0FTWU1NRVRSSUNURVNUUFJJVkFURUtFWTE=';
const B_PUBLIC = standardPublicKeyOf(B_SIGNING);

const v1aOf = (signing: string, id: string, ts: number, payload: string | Buffer) => adapter.sign(Buffer.from(payload), signing, { id, timestamp: ts })['webhook-signature']!;

describe('standard-webhooks v1a: published vector (Go reference library)', () => {
  it('sign with the whsk_ seed reproduces v1a,tQ9V2X… and verify with the whpk_ key accepts it', () => {
    const h = adapter.sign(Buffer.from(V_PAYLOAD), A_SIGNING, { id: V_ID, timestamp: V_TS });
    expect(h).toEqual({ 'webhook-id': V_ID, 'webhook-timestamp': String(V_TS), 'webhook-signature': A_SIG });
    expect(standardPublicKeyOf(A_SIGNING)).toBe(A_PUBLIC);
    expect(check(headers(V_ID, V_TS, A_SIG), V_PAYLOAD, keys(['pk', A_PUBLIC]))).toBe('pk');
  });

  it('the same content as v1 is signed: id, timestamp and body', () => {
    const k = keys(['pk', A_PUBLIC]);
    expect(check(headers('msg_p5jXN8AQM9LWM0D4loKWxJeK', V_TS, A_SIG), V_PAYLOAD, k)).toBeNull();
    expect(check(headers(V_ID, V_TS + 1, A_SIG), V_PAYLOAD, k)).toBeNull();
    expect(check(headers(V_ID, V_TS, A_SIG), '{"test":2432232314}', k)).toBeNull();
    expect(check(headers(V_ID, V_TS, A_SIG), V_PAYLOAD + ' ', k)).toBeNull();
  });

  it('signature verified with node:crypto directly over `${id}.${ts}.${payload}` (independent of the adapter)', () => {
    const pub = createPublicKey({ key: { kty: 'OKP', crv: 'Ed25519', x: Buffer.from(A_PUBLIC.slice(5), 'base64').toString('base64url') }, format: 'jwk' });
    expect(edVerify(null, Buffer.from(`${V_ID}.${V_TS}.${V_PAYLOAD}`), pub, Buffer.from(A_SIG.slice(4), 'base64'))).toBe(true);
  });
});

describe('standard-webhooks v1a: the Go library’s asymmetric test cases', () => {
  const ts = V_TS;
  const k = keys(['pk', B_PUBLIC]);
  const valid = v1aOf(B_SIGNING, V_ID, ts, V_PAYLOAD);

  it('valid signature is valid; one-byte body mutation and a wrong key are not', () => {
    expect(check(headers(V_ID, ts, valid), V_PAYLOAD, k)).toBe('pk');
    const mutated = Buffer.from(V_PAYLOAD);
    mutated[10] = mutated[10]! ^ 1;
    expect(check(headers(V_ID, ts, valid), mutated, k)).toBeNull();
    expect(check(headers(V_ID, ts, valid), V_PAYLOAD, keys(['other', A_PUBLIC]))).toBeNull();
    // A signature over the same content by the other key pair is not this key's.
    expect(check(headers(V_ID, ts, v1aOf(A_SIGNING, V_ID, ts, V_PAYLOAD)), V_PAYLOAD, k)).toBeNull();
  });

  it('valid multi sig (v1, v2, valid v1a, v1) is valid with only the public key trusted', () => {
    const sig = ['v1,Ceo5qEr07ixe2NLpvHk3FH9bwy/WavXrAFQ/9tdO6mc=', 'v2,Ceo5qEr07ixe2NLpvHk3FH9bwy/WavXrAFQ/9tdO6mc=', valid, 'v1,Ceo5qEr07ixe2NLpvHk3FH9bwy/WavXrAFQ/9tdO6mc='].join(' ');
    expect(check(headers(V_ID, ts, sig), V_PAYLOAD, k)).toBe('pk');
  });

  it.each(expectedFirst([
    ['missing id', [['webhook-timestamp', String(ts)], ['webhook-signature', valid]], 'malformed_signature'],
    ['missing timestamp', [['webhook-id', V_ID], ['webhook-signature', valid]], 'malformed_signature'],
    ['missing signature', [['webhook-id', V_ID], ['webhook-timestamp', String(ts)]], 'missing_signature'],
    ['"invalid signature" (a 32-byte value as v1a)', headers(V_ID, ts, 'v1a,Ceo5qEr07ixe2NLpvHk3FH9bwy/WavXrAFQ/9tdO6mc='), 'malformed_signature'],
    ['partial signature "v1a,"', headers(V_ID, ts, 'v1a,'), 'malformed_signature'],
    ['v1a not base64', headers(V_ID, ts, 'v1a,' + '*'.repeat(88)), 'malformed_signature'],
    ['v1a of 63 bytes', headers(V_ID, ts, 'v1a,' + Buffer.alloc(63, 1).toString('base64')), 'malformed_signature'],
    ['v1a of 65 bytes', headers(V_ID, ts, 'v1a,' + Buffer.alloc(65, 1).toString('base64')), 'malformed_signature'],
    ['a good v1a next to a malformed one', headers(V_ID, ts, `${valid} v1a,abcd`), 'malformed_signature'],
    ['only unknown versions', headers(V_ID, ts, 'v2,' + Buffer.alloc(64, 1).toString('base64')), 'missing_signature'],
  ] as [string, [string, string][], string][]))('%s → %s', (_name, reason, pairs) => {
    expect(reasonOf(() => adapter.parseSignature(view(pairs)))).toBe(reason);
  });

  it(`at most ${MAX_V1A_SIGNATURES} v1a entries (each costs an ed25519 verification over the whole body): the valid one last of ${MAX_V1A_SIGNATURES} verifies, one more is malformed`, () => {
    const bogus = 'v1a,' + Buffer.alloc(64, 3).toString('base64');
    const within = [...Array<string>(MAX_V1A_SIGNATURES - 1).fill(bogus), valid].join(' ');
    expect(check(headers(V_ID, ts, within), V_PAYLOAD, k)).toBe('pk');
    expect(reasonOf(() => adapter.parseSignature(view(headers(V_ID, ts, `${bogus} ${within}`))))).toBe('malformed_signature');
    // v1 (HMAC) entries cost one digest per key however many there are: not capped.
    const manyV1 = [...Array<string>(20).fill('v1,' + Buffer.alloc(32, 3).toString('base64')), valid].join(' ');
    expect(check(headers(V_ID, ts, manyV1), V_PAYLOAD, k)).toBe('pk');
  });

  it('a corrupted but well-formed v1a (one bit flipped) is invalid, not malformed', () => {
    const sig = Buffer.from(valid.slice(4), 'base64');
    sig[0] = sig[0]! ^ 1;
    expect(check(headers(V_ID, ts, 'v1a,' + sig.toString('base64')), V_PAYLOAD, k)).toBeNull();
  });
});

describe('standard-webhooks v1a: mixed secret lists and headers (each key checks only its own scheme)', () => {
  const body = V_PAYLOAD;
  const hmacSig = V_SIG; // valid v1 for V_SECRET over (V_ID, V_TS, body)
  const edSig = A_SIG; // valid v1a for A_PUBLIC over the same content
  const badHmac = 'v1,' + Buffer.alloc(32, 7).toString('base64');
  const badEd = 'v1a,' + Buffer.alloc(64, 7).toString('base64');
  const mixed = keys(['hmac', V_SECRET], ['ed', A_PUBLIC]);

  it('header with v1 and v1a: the first configured key that verifies by its own scheme wins', () => {
    expect(check(headers(V_ID, V_TS, `${hmacSig} ${edSig}`), body, mixed)).toBe('hmac');
    expect(check(headers(V_ID, V_TS, `${edSig} ${hmacSig}`), body, keys(['ed', A_PUBLIC], ['hmac', V_SECRET]))).toBe('ed');
    expect(check(headers(V_ID, V_TS, `${badHmac} ${edSig}`), body, mixed)).toBe('ed');
    expect(check(headers(V_ID, V_TS, `${hmacSig} ${badEd}`), body, mixed)).toBe('hmac');
    expect(check(headers(V_ID, V_TS, `${badHmac} ${badEd}`), body, mixed)).toBeNull();
  });

  it('sign() with several space-separated signing secrets emits one entry each (whsec_ → v1, whsk_ → v1a)', () => {
    expect(adapter.sign(Buffer.from(body), `${V_SECRET} ${A_SIGNING}`, { id: V_ID, timestamp: V_TS })['webhook-signature']).toBe(`${V_SIG} ${A_SIG}`);
  });

  it('the public key is public: an HMAC keyed with its bytes (raw or DER) never verifies as v1', () => {
    const raw = Buffer.from(A_PUBLIC.slice(5), 'base64');
    const prepared = adapter.prepareSecret(A_PUBLIC);
    for (const k of [raw, prepared]) {
      const forged = 'v1,' + hmac('sha256', k, [`${V_ID}.${V_TS}.`, body]).toString('base64');
      expect(check(headers(V_ID, V_TS, forged), body, keys(['ed', A_PUBLIC]))).toBeNull();
      expect(check(headers(V_ID, V_TS, `${forged} ${badEd}`), body, mixed)).toBeNull();
    }
  });

  it('an HMAC secret never checks v1a, an ed25519 key never checks v1', () => {
    expect(check(headers(V_ID, V_TS, edSig), body, keys(['hmac', V_SECRET]))).toBeNull();
    expect(check(headers(V_ID, V_TS, hmacSig), body, keys(['ed', A_PUBLIC]))).toBeNull();
  });

  it('a retired public key never verifies; rotation across schemes (v1 retired, v1a current) works', () => {
    const now = Date.now();
    expect(check(headers(V_ID, V_TS, edSig), body, keys(['ed', A_PUBLIC, now]), now)).toBeNull();
    expect(check(headers(V_ID, V_TS, `${hmacSig} ${edSig}`), body, keys(['hmac', V_SECRET, now], ['ed', A_PUBLIC]), now)).toBe('ed');
  });
});

describe('standard-webhooks v1a: key formats', () => {
  it('whpk_ → the DER SPKI of the raw public key; base64url alphabet accepted too', () => {
    const raw = Buffer.from(A_PUBLIC.slice(5), 'base64');
    const prepared = adapter.prepareSecret(A_PUBLIC);
    expect(prepared.toString('hex')).toBe('302a300506032b6570032100' + raw.toString('hex'));
    expect(isEd25519Key(prepared)).toBe(true);
    expect(adapter.prepareSecret('whpk_' + raw.toString('base64url') + '=').equals(prepared)).toBe(true);
  });

  it('a whsk_ private key is refused as a verification key, with a message that says why', () => {
    expect(() => adapter.prepareSecret(A_SIGNING)).toThrow(/PRIVATE signing key.*whpk_/);
  });

  it.each([
    ['empty', 'whpk_'],
    ['not base64', 'whpk_not*base64!'],
    ['31 bytes', 'whpk_' + Buffer.alloc(31, 1).toString('base64')],
    ['33 bytes', 'whpk_' + Buffer.alloc(33, 1).toString('base64')],
    ['64 bytes (a whole key pair)', 'whpk_' + Buffer.alloc(64, 1).toString('base64')],
  ])('whpk_ %s → refused', (_name, value) => {
    expect(() => adapter.prepareSecret(value)).toThrow(/whpk_/);
  });

  it('a whsec_ secret that decodes to an ed25519 DER public key is refused (no key may be both kinds)', () => {
    const der = adapter.prepareSecret(A_PUBLIC);
    expect(() => adapter.prepareSecret('whsec_' + der.toString('base64'))).toThrow(/ed25519 public key/);
    expect(() => decodeStandardSecret(A_PUBLIC)).toThrow(/ed25519 key, not an HMAC secret/);
  });

  it('sign(): whpk_ cannot sign; a malformed whsk_ is refused; 64-byte seed‖public is accepted only if consistent', () => {
    expect(() => adapter.sign(Buffer.from(V_PAYLOAD), A_PUBLIC, { id: V_ID, timestamp: V_TS })).toThrow(/cannot sign/);
    expect(() => adapter.sign(Buffer.from(V_PAYLOAD), 'whsk_' + Buffer.alloc(31, 1).toString('base64'), { id: V_ID, timestamp: V_TS })).toThrow(/whsk_/);
    const seed = Buffer.from(A_SIGNING.slice(5), 'base64');
    const pub = Buffer.from(A_PUBLIC.slice(5), 'base64');
    const pair = 'whsk_' + Buffer.concat([seed, pub]).toString('base64');
    expect(adapter.sign(Buffer.from(V_PAYLOAD), pair, { id: V_ID, timestamp: V_TS })['webhook-signature']).toBe(A_SIG);
    const wrongPair = 'whsk_' + Buffer.concat([seed, Buffer.alloc(32, 1)]).toString('base64');
    expect(() => adapter.sign(Buffer.from(V_PAYLOAD), wrongPair, { id: V_ID, timestamp: V_TS })).toThrow(/does not match/);
  });

  it('ed25519 signatures are deterministic (RFC 8032): signing twice gives the same entry', () => {
    expect(v1aOf(B_SIGNING, 'msg_1', 1700000000, '{}')).toBe(v1aOf(B_SIGNING, 'msg_1', 1700000000, '{}'));
  });

  it('multi-byte body: the exact UTF-8 bytes are signed and verified', () => {
    const payload = Buffer.from('{"type":"user.created","data":{"name":"Zoë 🦄 東京"}}', 'utf8');
    const sig = v1aOf(B_SIGNING, 'msg_utf8', V_TS, payload);
    expect(check(headers('msg_utf8', V_TS, sig), payload, keys(['pk', B_PUBLIC]))).toBe('pk');
    expect(check(headers('msg_utf8', V_TS, sig), Buffer.from(payload.toString('latin1'), 'utf8'), keys(['pk', B_PUBLIC]))).toBeNull();
  });
});
