import { DAY, withoutOptions } from './contract.js';
import { hmac, matchHmac } from '../crypto/hmac.js';
import { timestampedDigests, tokenSecret } from './signature.js';
import type { AdapterFactory, ProviderAdapter, SignatureMetadata } from './contract.js';
import { jsonEnvelope } from './json.js';

/**
 * Stripe: `Stripe-Signature: t=<unix>,v1=<hex>[,v1=<hex>…][,v0=…]`, HMAC-SHA256 over
 * `${t}.${raw}` keyed by the whole `whsec_…` string. Only v1 counts; during a secret roll
 * Stripe sends one v1 per active secret, any of which may match. Key = body `id` (evt_…).
 */
interface StripeSignature extends SignatureMetadata {
  readonly timestamp: number;
  readonly v1: readonly Buffer[];
}

const HEADER = 'stripe-signature';

function parseSignature(req: Parameters<ProviderAdapter['parseSignature']>[0]): StripeSignature {
  const { timestamp, digests } = timestampedDigests(req, HEADER, ',', 't', 'v1');
  return { timestamp, v1: digests };
}

const adapter: ProviderAdapter = {
  name: 'stripe',
  contentTypes: ['application/json'],
  defaultToleranceSeconds: 300,
  // live mode: automatic retries for up to 3 days; a manual resend (`stripe events resend --webhook-endpoint`,
  // same evt_ id) of any event created in the last 30 days.
  redeliveryWindowSeconds: 30 * DAY,
  prepareSecret(value) {
    if (!value.startsWith('whsec_')) throw new Error('a Stripe endpoint secret starts with "whsec_"');
    return tokenSecret(value, 'Stripe endpoint');
  },
  parseSignature,
  verify(meta, body, keys, nowMs) {
    const m = meta as StripeSignature;
    return matchHmac('sha256', [`${m.timestamp}.`, body], m.v1, keys, nowMs);
  },
  envelope: jsonEnvelope({ id: 'id', type: 'type', objectId: 'data.object.id', createdAt: 'created' }),
  sign(body, secret, opts) {
    const t = opts.timestamp ?? Math.floor(Date.now() / 1000);
    const sig = hmac('sha256', Buffer.from(secret, 'utf8'), [`${t}.`, body]).toString('hex');
    return { 'stripe-signature': `t=${t},v1=${sig}` };
  },
  sample(seq) {
    const created = Math.floor(Date.now() / 1000);
    const body = JSON.stringify({
      id: `evt_sample_${seq}`, object: 'event', api_version: '2024-06-20', created, livemode: false, type: 'payment_intent.succeeded',
      data: { object: { id: `pi_sample_${seq}`, object: 'payment_intent', amount: 2000, currency: 'usd', status: 'succeeded' } },
    });
    return { body: Buffer.from(body), headers: { 'content-type': 'application/json; charset=utf-8' }, signOptions: {} };
  },
};

export const createStripe: AdapterFactory = withoutOptions(adapter);
