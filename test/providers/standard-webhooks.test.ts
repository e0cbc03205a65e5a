import { Webhook } from 'standardwebhooks';
import { describe, expect, it } from 'vitest';
import { hmac, type TrustedKey } from '../../src/crypto/hmac.js';
import type { ProviderAdapter } from '../../src/providers/contract.js';
import { PROVIDERS } from '../../src/providers/registry.js';
import { expectedFirst, reasonOf, trustedKeys, verifyWith, view } from '../helpers/adapter.js';

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

  it('v1a (ed25519) entries are skipped, not treated as HMAC', () => {
    const ed = 'v1a,' + Buffer.alloc(64, 1).toString('base64');
    expect(check(headers(V_ID, V_TS, `${ed} ${V_SIG}`), body, keys(['v1', V_SECRET]))).toBe('v1');
    expect(reasonOf(() => adapter.parseSignature(view(headers(V_ID, V_TS, ed))))).toBe('missing_signature');
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
    ['no type', '{"data":{}}', 'missing_event_type'],
    ['not JSON', '{', 'malformed_payload'],
  ])('%s → %s', (_name, body, reason) => {
    const meta = adapter.parseSignature(view(headers(V_ID, V_TS, V_SIG)));
    expect(reasonOf(() => adapter.envelope(Buffer.from(body), view([]), meta))).toBe(reason);
  });
});
