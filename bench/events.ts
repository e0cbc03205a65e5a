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

/** One line item, padded to a fixed width so a body's size is a simple function of the item count. */
const ITEM_BYTES = 160;
function item(i: number): string {
  const base = `{"id":"li_${String(i).padStart(8, '0')}","object":"line_item","amount_subtotal":${1000 + (i % 977)},"currency":"usd","quantity":${1 + (i % 5)},"description":"`;
  const tail = '"}';
  const fill = 'Bench item with a plausible description text '.repeat(4);
  return base + fill.slice(0, ITEM_BYTES - base.length - tail.length) + tail;
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
    this.itemsJoined = Buffer.from(Array.from({ length: n }, (_, i) => item(i)).join(','));
    this.mid = Buffer.from(`","object":"payment_intent","amount":2000,"currency":"usd","status":"succeeded","livemode":false,"metadata":{"order_id":"bench"},"line_items":{"object":"list","has_more":false,"data":[`);
    this.end = Buffer.from(`]}}}}`);
    this.largeFiller = Buffer.from('L'.repeat(opts.largeBytes));
  }

  private head(id: string, created: number): Buffer {
    return Buffer.from(`{"id":"evt_${id}","object":"event","api_version":"2024-06-20","created":${created},"livemode":false,"pending_webhooks":1,"request":{"id":null,"idempotency_key":null},"type":"${this.type}","data":{"object":{"id":"pi_`);
  }

  make(id: string, large: boolean, rnd: () => number, created = Math.floor(Date.now() / 1000)): Buffer {
    const head = this.head(id, created);
    const idBuf = Buffer.from(id);
    const fixed = head.length + idBuf.length + this.mid.length + this.end.length;
    if (large) {
      // Items up to ~target, then one string item that pads the body to exactly largeBytes.
      const items = this.itemsJoined;
      const pre = Buffer.from(',"');
      const post = Buffer.from('"');
      const fillLen = this.opts.largeBytes - fixed - items.length - pre.length - post.length;
      if (fillLen < 0) throw new Error('largeBytes too small');
      return Buffer.concat([head, idBuf, this.mid, items, pre, this.largeFiller.subarray(0, fillLen), post, this.end]);
    }
    const want = this.opts.minBytes + Math.floor(rnd() * (this.opts.maxBytes - this.opts.minBytes + 1));
    const room = Math.max(ITEM_BYTES, want - fixed);
    const count = Math.max(1, Math.min(Math.floor((room + 1) / (ITEM_BYTES + 1)), Math.floor((this.itemsJoined.length + 1) / (ITEM_BYTES + 1))));
    const items = this.itemsJoined.subarray(0, count * (ITEM_BYTES + 1) - 1);
    return Buffer.concat([head, idBuf, this.mid, items, this.end]);
  }
}
