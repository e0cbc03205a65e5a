/**
 * Stripe-style event bodies for the load generator: every body is distinct (its own `evt_…`
 * id), valid JSON shaped like a Stripe event (many small fields, so JSON parsing costs what a
 * real event costs), and signed the way Stripe signs (the loadgen does it before a step starts):
 *   Stripe-Signature: t=<unix>,v1=hex(HMAC-SHA256(secret, `${t}.${body}`))
 *
 * Bodies are assembled from pre-encoded pieces (head + id + line items + tail), so building
 * one costs a memcpy, not a JSON.stringify; the loadgen shares the two cores with the server.
 */
import { createHmac } from 'node:crypto';

export const LARGE_BODY_BYTES = 1024 * 1024;

/** mulberry32: small, fast, seedable; the bench must not depend on Math.random's quality or seed. */
export function prng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

export function stripeSignature(secret: string, body: Buffer, t: number): string {
  const sig = createHmac('sha256', secret).update(`${t}.`).update(body).digest('hex');
  return `t=${t},v1=${sig}`;
}

/**
 * One line item, padded to a fixed width so a body's size is a simple function of the item count.
 * Its ids, amounts and words vary (a seeded generator), so a body compresses as real event JSON
 * does (~4-5x with brotli at quality 1), not as one phrase repeated would (~16x): the server may
 * compress bodies before sealing them (limits.compressBodyBytes), and a flattering ratio would
 * flatter that.
 */
const ITEM_BYTES = 160;
/** A random Stripe-style id suffix (base 36, ~8 characters). */
const randomId = (rnd: () => number): string => Math.floor(rnd() * 2 ** 40).toString(36);
const WORDS = ['annual', 'plan', 'blue', 'large', 'cotton', 'shirt', 'express', 'shipping', 'gift', 'card', 'refill', 'pack',
  'premium', 'support', 'seat', 'license', 'black', 'mug', 'ceramic', 'set', 'of', 'two', 'organic', 'coffee', 'beans', 'dark',
  'roast', 'monthly', 'box', 'small', 'green', 'tea', 'sample', 'bundle', 'extra', 'storage', 'add-on', 'team', 'edition', 'pro'];
function item(i: number, rnd: () => number): string {
  const base = `{"id":"li_${randomId(rnd)}","object":"line_item","amount_subtotal":${Math.floor(rnd() * 100_000)},"currency":"usd","quantity":${1 + (i % 5)},"description":"`;
  const tail = '"}';
  let fill = `Product ${Math.floor(rnd() * 400)} size ${Math.floor(rnd() * 17)} sku ${randomId(rnd)}`;
  while (fill.length < ITEM_BYTES) fill += ` ${WORDS[Math.floor(rnd() * WORDS.length)]}`;
  return base + fill.slice(0, ITEM_BYTES - base.length - tail.length) + tail;
}

/** Each varied item starts with ',' and ends with this. */
const ITEM_END = Buffer.from('}}');

/**
 * About `bytes` of distinct line items as a real large event has them (ids, amounts and names that
 * vary), so the body compresses as such JSON does (~6× with brotli at quality 1), not as a run of
 * one repeated byte would (~1000×): the server may compress large bodies before sealing them.
 */
function variedItems(bytes: number): Buffer {
  const rnd = prng(0x5eed);
  const id = () => randomId(rnd);
  const colours = ['blue', 'red', 'green', 'black', 'white', 'silver'];
  const parts: string[] = [];
  let n = 0;
  for (let i = 0; n < bytes; i++) {
    const part = `,{"id":"li_${id()}","object":"line_item","amount_subtotal":${Math.floor(rnd() * 100_000)},"amount_total":${Math.floor(rnd() * 100_000)},"currency":"usd","description":"Product ${Math.floor(rnd() * 400)} ${colours[i % colours.length]} size ${Math.floor(rnd() * 17)}","quantity":${1 + Math.floor(rnd() * 5)},"price":{"id":"price_${id()}","unit_amount":${Math.floor(rnd() * 5000)},"product":"prod_${id()}"}}`;
    parts.push(part);
    n += part.length;
  }
  return Buffer.from(parts.join(''));
}

export interface EventFactoryOptions {
  /** Uniform range for ordinary bodies, bytes. */
  readonly minBytes: number;
  readonly maxBytes: number;
  readonly largeBytes: number;
}

export const DEFAULT_SIZES: EventFactoryOptions = { minBytes: 1024, maxBytes: 13 * 1024, largeBytes: LARGE_BODY_BYTES };

/**
 * Builds distinct event bodies. `make(id, large, rnd)` returns a Buffer whose size is uniform in
 * [minBytes, maxBytes] (to the item granularity) or exactly `largeBytes` when `large`.
 */
export class EventFactory {
  private readonly itemsJoined: Buffer;
  private readonly largeFiller: Buffer;
  private readonly mid: Buffer;
  private readonly end: Buffer;

  constructor(private readonly opts: EventFactoryOptions = DEFAULT_SIZES, private readonly type = 'payment_intent.succeeded') {
    // Enough items for the largest ordinary body; a body takes a prefix of them (cut at an item edge).
    const n = Math.ceil(opts.maxBytes / (ITEM_BYTES + 1)) + 1;
    const rnd = prng(0x17e5);
    this.itemsJoined = Buffer.from(Array.from({ length: n }, (_, i) => item(i, rnd)).join(','));
    this.mid = Buffer.from(`","object":"payment_intent","amount":2000,"currency":"usd","status":"succeeded","livemode":false,"metadata":{"order_id":"bench"},"line_items":{"object":"list","has_more":false,"data":[`);
    this.end = Buffer.from(`]}}}}`);
    this.largeFiller = variedItems(opts.largeBytes);
  }

  private head(id: string, created: number): Buffer {
    return Buffer.from(`{"id":"evt_${id}","object":"event","api_version":"2024-06-20","created":${created},"livemode":false,"pending_webhooks":1,"request":{"id":null,"idempotency_key":null},"type":"${this.type}","data":{"object":{"id":"pi_`);
  }

  make(id: string, large: boolean, rnd: () => number, created = Math.floor(Date.now() / 1000)): Buffer {
    const head = this.head(id, created);
    const idBuf = Buffer.from(id);
    const fixed = head.length + idBuf.length + this.mid.length + this.end.length;
    if (large) {
      // The ordinary items, then distinct ones up to ~target, then one string item that pads the
      // body to exactly largeBytes.
      const items = this.itemsJoined;
      const pre = Buffer.from(',"');
      const post = Buffer.from('"');
      const room = this.opts.largeBytes - fixed - items.length - pre.length - post.length;
      if (room < 0) throw new Error('largeBytes too small');
      const cut = room > 0 ? this.largeFiller.lastIndexOf(ITEM_END, room - 1) : -1;
      const varied = cut > 0 ? this.largeFiller.subarray(0, cut + ITEM_END.length) : Buffer.alloc(0);
      const pad = Buffer.alloc(room - varied.length, 'L');
      return Buffer.concat([head, idBuf, this.mid, items, varied, pre, pad, post, this.end]);
    }
    const want = this.opts.minBytes + Math.floor(rnd() * (this.opts.maxBytes - this.opts.minBytes + 1));
    const room = Math.max(ITEM_BYTES, want - fixed);
    const count = Math.max(1, Math.min(Math.floor((room + 1) / (ITEM_BYTES + 1)), Math.floor((this.itemsJoined.length + 1) / (ITEM_BYTES + 1))));
    const items = this.itemsJoined.subarray(0, count * (ITEM_BYTES + 1) - 1);
    return Buffer.concat([head, idBuf, this.mid, items, this.end]);
  }
}
