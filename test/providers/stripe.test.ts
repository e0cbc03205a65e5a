import Stripe from 'stripe';
import { describe, expect, it } from 'vitest';
import { hmac, type TrustedKey } from '../../src/crypto/hmac.js';
import type { ProviderAdapter } from '../../src/providers/contract.js';
import { PROVIDERS } from '../../src/providers/registry.js';
import { expectedFirst, reasonOf, trustedKeys, verifyWith, view } from '../helpers/adapter.js';

const adapter: ProviderAdapter = PROVIDERS.stripe!(undefined, 'endpoints[0].options');
const stripe = new Stripe('sk_test_not_used_for_webhooks');

const SECRET = 'whsec_test_secret_for_webhook_inbox';
const OLD_SECRET = 'whsec_previous_secret_for_webhook_inbox';
const NOW = 1_700_000_000;

const keys = (...entries: [string, string, number?][]): TrustedKey[] => trustedKeys(adapter, ...entries);

/** parseSignature + verify, as the pipeline does; the version that matched or null. */
const check = (header: string, body: Buffer, ks: TrustedKey[], nowMs = NOW * 1000) => verifyWith(adapter, [['stripe-signature', header]], body, ks, nowMs);

const hex = (key: string, t: number, body: Buffer | string) => hmac('sha256', Buffer.from(key, 'utf8'), [`${t}.`, body]).toString('hex');

const EVENT = Buffer.from('{\n  "id": "evt_1NG8Du2eZvKYlo2CUI79vXWy",\n  "object": "event",\n  "type": "payment_intent.succeeded",\n  "created": 1686089970,\n  "data": {"object": {"id": "pi_3NG8Du2eZvKYlo2C0ERwbx1J", "amount": 1.0, "description": "caf\\u00e9 ☕ 東京"}}\n}\n');

describe('stripe: published HMAC vectors (stripe/stripe-node test/crypto/helpers.ts, secret "test_secret")', () => {
  // Stripe signs `${t}.${payload}`; these vectors pin the HMAC-SHA256/hex primitive the adapter uses.
  it.each([
    ['sample payload', JSON.stringify({ obj1: 'hello', obj2: 'world' }), 'bebb1a643997f419b315ddba19e6f5411e1ce7f810ba6d3617ce72823092f363'],
    ['empty payload', '', 'f7f9bd47fb987337b5796fdc1fdb9ba221d0d5396814bfcaf9521f43fd8927fd'],
    ['payload with utf-8', '\ud83d\ude00', '837da296d05c4fe31f61d5d7ead035099d9585a5bcde87de952012a78f0b0c43'],
  ])('%s', (_name, payload, expected) => {
    expect(hmac('sha256', Buffer.from('test_secret', 'utf8'), [Buffer.from(payload, 'utf8')]).toString('hex')).toBe(expected);
  });

  it('the adapter signs exactly the HMAC of `${t}.` + raw body, keyed by the whole whsec_ string', () => {
    const body = Buffer.from(JSON.stringify({ obj1: 'hello', obj2: 'world' }));
    const h = adapter.sign(body, SECRET, { timestamp: NOW });
    expect(h).toEqual({ 'stripe-signature': `t=${NOW},v1=${hex(SECRET, NOW, body)}` });
    // Not the base64-decoded secret (that is the Standard Webhooks convention).
    const decoded = Buffer.from(SECRET.slice('whsec_'.length), 'base64');
    expect(h['stripe-signature']).not.toContain(hmac('sha256', decoded, [`${NOW}.`, body]).toString('hex'));
  });
});

describe('stripe: cross-checks with the official stripe SDK', () => {
  it('produces byte-identical headers to stripe.webhooks.generateTestHeaderString', () => {
    for (const body of [EVENT, Buffer.from('{"id":"evt_x","type":"a.b"}')]) {
      const theirs = stripe.webhooks.generateTestHeaderString({ payload: body.toString('utf8'), secret: SECRET, timestamp: NOW });
      expect(adapter.sign(body, SECRET, { timestamp: NOW })['stripe-signature']).toBe(theirs);
    }
  });

  it('SDK → ours: a header from generateTestHeaderString verifies (multi-byte body)', () => {
    const header = stripe.webhooks.generateTestHeaderString({ payload: EVENT.toString('utf8'), secret: SECRET, timestamp: NOW });
    expect(check(header, EVENT, keys(['v1', SECRET]))).toBe('v1');
    expect(check(header, EVENT, keys(['v1', OLD_SECRET]))).toBeNull();
    // One changed byte, after the SDK signed.
    const tampered = Buffer.from(EVENT);
    tampered.writeUInt8(tampered.readUInt8(tampered.length - 3) ^ 0x01, tampered.length - 3);
    expect(check(header, tampered, keys(['v1', SECRET]))).toBeNull();
  });

  it('ours → SDK: stripe.webhooks.constructEvent accepts our signature and rejects a tampered body', () => {
    const t = Math.floor(Date.now() / 1000);
    const header = adapter.sign(EVENT, SECRET, { timestamp: t })['stripe-signature']!;
    const event = stripe.webhooks.constructEvent(EVENT, header, SECRET);
    expect(event.id).toBe('evt_1NG8Du2eZvKYlo2CUI79vXWy');
    const reserialised = Buffer.from(JSON.stringify(JSON.parse(EVENT.toString('utf8'))));
    expect(() => stripe.webhooks.constructEvent(reserialised, header, SECRET)).toThrow(/No signatures found/);
    expect(() => stripe.webhooks.constructEvent(EVENT, header, OLD_SECRET)).toThrow(/No signatures found/);
  });

  it('ours ≡ SDK on a re-serialised body: both reject it', () => {
    const header = adapter.sign(EVENT, SECRET, { timestamp: NOW })['stripe-signature']!;
    const reserialised = Buffer.from(JSON.stringify(JSON.parse(EVENT.toString('utf8'))));
    expect(reserialised.equals(EVENT)).toBe(false);
    expect(check(header, reserialised, keys(['v1', SECRET]))).toBeNull();
  });
});

describe('stripe: Stripe-Signature parsing', () => {
  const body = Buffer.from('{"id":"evt_1","type":"charge.refunded"}');
  const good = hex(SECRET, NOW, body);
  const old = hex(OLD_SECRET, NOW, body);

  it('several v1 entries (a secret roll): any one matching a trusted key verifies, in any order', () => {
    const k = keys(['v2', SECRET], ['v1', OLD_SECRET]);
    expect(check(`t=${NOW},v1=${good},v1=${old}`, body, k)).toBe('v2');
    expect(check(`t=${NOW},v1=${old},v1=${good}`, body, k)).toBe('v2');
    expect(check(`t=${NOW},v1=${old},v1=${good}`, body, keys(['v1', OLD_SECRET]))).toBe('v1');
    expect(check(`t=${NOW},v1=${'0'.repeat(64)},v1=${good}`, body, keys(['v2', SECRET]))).toBe('v2');
    expect(check(`t=${NOW},v1=${'0'.repeat(64)},v1=${'f'.repeat(64)}`, body, k)).toBeNull();
  });

  it('v0 is ignored: a correct digest under v0 neither counts nor makes the header malformed', () => {
    expect(reasonOf(() => check(`t=${NOW},v0=${good}`, body, keys(['v1', SECRET])))).toBe('missing_signature');
    expect(check(`t=${NOW},v1=${'0'.repeat(64)},v0=${good}`, body, keys(['v1', SECRET]))).toBeNull();
    expect(check(`t=${NOW},v0=not-hex-at-all,v1=${good}`, body, keys(['v1', SECRET]))).toBe('v1');
  });

  it('the timestamp is signed: another t with the same v1 fails', () => {
    expect(check(`t=${NOW + 1},v1=${good}`, body, keys(['v1', SECRET]))).toBeNull();
    expect(check(`v1=${good},t=${NOW}`, body, keys(['v1', SECRET]))).toBe('v1');
  });

  it('exposes the signed timestamp for the freshness check', () => {
    expect(adapter.defaultToleranceSeconds).toBe(300);
    expect(adapter.parseSignature(view([['Stripe-Signature', `t=${NOW},v1=${good}`]])).timestamp).toBe(NOW);
  });

  it.each(expectedFirst([
    ['absent header', null, 'missing_signature'],
    ['empty header', '', 'missing_signature'],
    ['no v1 entry', `t=${NOW}`, 'missing_signature'],
    ['missing timestamp', `v1=${'a'.repeat(64)}`, 'malformed_signature'],
    ['non-numeric timestamp', `t=17e8,v1=${'a'.repeat(64)}`, 'malformed_signature'],
    ['negative timestamp', `t=-1,v1=${'a'.repeat(64)}`, 'malformed_signature'],
    ['two timestamps', `t=${NOW},t=${NOW + 1},v1=${'a'.repeat(64)}`, 'ambiguous_signature'],
    ['item without "="', `t=${NOW},v1`, 'malformed_signature'],
    ['malformed hex', `t=${NOW},v1=${'g'.repeat(64)}`, 'malformed_signature'],
    ['odd-length hex', `t=${NOW},v1=${'a'.repeat(63)}`, 'malformed_signature'],
    ['short digest (31 bytes)', `t=${NOW},v1=${'a'.repeat(62)}`, 'malformed_signature'],
    ['long digest (33 bytes)', `t=${NOW},v1=${'a'.repeat(66)}`, 'malformed_signature'],
    ['empty v1', `t=${NOW},v1=`, 'malformed_signature'],
    ['one good and one malformed v1', `t=${NOW},v1=${'a'.repeat(64)},v1=xyz`, 'malformed_signature'],
  ]))('%s → %s', (_name, reason, header) => {
    const pairs: [string, string][] = header === null ? [] : [['stripe-signature', header]];
    expect(reasonOf(() => adapter.parseSignature(view(pairs)))).toBe(reason);
  });

  it('the header sent twice is ambiguous, never joined', () => {
    const h = `t=${NOW},v1=${good}`;
    expect(reasonOf(() => adapter.parseSignature(view([['stripe-signature', h], ['Stripe-Signature', h]])))).toBe('ambiguous_signature');
  });
});

describe('stripe: secrets', () => {
  const body = Buffer.from('{"id":"evt_1","type":"charge.refunded"}');
  const header = `t=${NOW},v1=${hex(SECRET, NOW, body)}`;

  it('a retired secret never verifies, even with the right signature', () => {
    expect(check(header, body, keys(['v1', SECRET, NOW * 1000]))).toBeNull();
    expect(check(header, body, keys(['v1', SECRET, NOW * 1000 + 1]))).toBe('v1');
    expect(check(header, body, keys(['v1', SECRET, NOW * 1000]), NOW * 1000 - 1)).toBe('v1');
  });

  it('refuses a secret that is not a whsec_ string', () => {
    expect(() => adapter.prepareSecret('sk_test_123')).toThrow(/whsec_/);
    expect(adapter.prepareSecret(SECRET).equals(Buffer.from(SECRET, 'utf8'))).toBe(true);
  });
});

describe('stripe: redelivery window', () => {
  it('covers a manual resend (stripe events resend --webhook-endpoint, same evt_ id) of an event up to 30 days old, not only the 3 days of automatic retries', () => {
    expect(adapter.redeliveryWindowSeconds).toBe(30 * 24 * 60 * 60);
  });
});

describe('stripe: envelope (verified body → logical event)', () => {
  it('takes id, type, data.object.id and created from the body', () => {
    const meta = adapter.parseSignature(view([['stripe-signature', adapter.sign(EVENT, SECRET, { timestamp: NOW })['stripe-signature']!]]));
    expect(adapter.envelope(EVENT, view([]), meta)).toEqual({
      eventId: 'evt_1NG8Du2eZvKYlo2CUI79vXWy',
      eventType: 'payment_intent.succeeded',
      objectId: 'pi_3NG8Du2eZvKYlo2C0ERwbx1J',
      objectVersion: null,
      providerCreatedAtMs: 1686089970_000,
    });
  });

  it.each([
    ['not JSON', 'not json', 'malformed_payload'],
    ['a JSON array', '[{"id":"evt_1"}]', 'malformed_payload'],
    ['no id', '{"type":"charge.refunded"}', 'missing_event_id'],
    ['empty id', '{"id":"","type":"charge.refunded"}', 'missing_event_id'],
    ['no type', '{"id":"evt_1"}', 'missing_event_type'],
  ])('%s → %s', (_name, body, reason) => {
    expect(reasonOf(() => adapter.envelope(Buffer.from(body), view([]), { timestamp: NOW }))).toBe(reason);
  });
});
