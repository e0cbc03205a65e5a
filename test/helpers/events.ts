import { PROVIDERS } from '../../src/providers/registry.js';
import { STRIPE_SECRET } from './app.js';
import { post } from './http.js';

const stripe = PROVIDERS.stripe!(undefined, 'test');

/** A Stripe-style event body of (at least) `size` bytes, exactly `size` when padding allows. */
export function stripeEvent(id: string, opts: { type?: string; size?: number } = {}): Buffer {
  const base = { id, object: 'event', type: opts.type ?? 'payment_intent.succeeded', created: 1700000000, data: { object: { id: `pi_${id}` } }, pad: '' };
  let text = JSON.stringify(base);
  if (opts.size !== undefined && opts.size > text.length) {
    base.pad = 'x'.repeat(opts.size - text.length);
    text = JSON.stringify(base);
  }
  return Buffer.from(text);
}

/** A ~620 KB Stripe-style event of distinct line items (JSON that compresses as real JSON does). */
export function largeEvent(id: string): Buffer {
  const items = Array.from({ length: 4000 }, (_, i) => ({ id: `li_${id}_${i}`, amount: (i * 7919) % 100_000, currency: 'usd', description: `Product ${i % 313} size ${i % 17}`, note: 'é ✓' }));
  return Buffer.from(JSON.stringify({ id, object: 'event', type: 'payment_intent.succeeded', created: 1700000000, data: { object: { id: `pi_${id}`, items } } }, null, 1));
}

/** Headers a correct Stripe delivery of `body` carries. */
export function stripeHeaders(body: Buffer, secret = STRIPE_SECRET, timestamp?: number): Record<string, string> {
  return { 'content-type': 'application/json', ...stripe.sign(body, secret, timestamp === undefined ? {} : { timestamp }) };
}

/** POSTs a correctly signed Stripe event `id` (payment_intent.succeeded) to the app's `stripe` endpoint. */
export function sendStripeEvent(baseUrl: string, id: string) {
  const body = stripeEvent(id, { type: 'payment_intent.succeeded' });
  return post(`${baseUrl}/webhooks/stripe`, body, stripeHeaders(body));
}
