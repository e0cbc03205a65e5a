import { DAY } from './contract.js';
import { digestHeader, utf8Secret } from './signature.js';
import { hmac, matchHmac } from '../crypto/hmac.js';
import { asObject } from '../config/read.js';
import type { AdapterFactory, ProviderAdapter, RequestView, SignatureMetadata } from './contract.js';
import { envelope, parseJsonObject, pathValue, idString, requireEventId, requireEventType, toEpochMs } from './json.js';

/**
 * Razorpay: `X-Razorpay-Signature: <hex>` = HMAC-SHA256(webhook secret, raw body). Only the body is
 * signed: no timestamp (no freshness check) and not `x-razorpay-event-id`, the documented
 * de-duplication key (retries keep it). So a captured body re-posted under a new event id
 * verifies and is a new row; handlers must be idempotent on the entity ids in the body.
 * Rotation: deliveries of events created before a secret change stay signed with the OLD secret
 * (retries run up to 24 h after the event), so the old version must stay trusted that long.
 */
interface RazorpaySignature extends SignatureMetadata {
  readonly digest: Buffer;
}

const HEADER = 'x-razorpay-signature';
const EVENT_ID_HEADER = 'x-razorpay-event-id';

function entityAt(payload: Record<string, unknown>, key: string): string | null {
  // Some payload keys contain a dot themselves (`payment.downtime`, `fund_account.validation`).
  const holder = Object.hasOwn(payload, key) ? payload[key] : pathValue(payload, key);
  return idString(pathValue(holder, 'entity.id'));
}

/**
 * The entity the event is about, generic over entity kinds: the event name minus its action
 * (`payment.dispute.created` → `payment.dispute`), as a payload key, else its segments from the
 * most specific (`dispute`, then `payment`), else the single entity the event `contains`.
 * `refund.processed` → the refund (not the payment it also carries), `order.paid` → the order.
 */
function objectId(e: Record<string, unknown>): string | null {
  const payload = e.payload;
  if (payload === null || typeof payload !== 'object' || Array.isArray(payload)) return null;
  const p = payload as Record<string, unknown>;
  const segments = typeof e.event === 'string' ? e.event.split('.').slice(0, -1) : [];
  const candidates = segments.length > 1 ? [segments.join('.'), ...[...segments].reverse()] : segments;
  for (const key of candidates) {
    const id = entityAt(p, key);
    if (id !== null) return id;
  }
  const contains = e.contains;
  if (Array.isArray(contains) && contains.length === 1 && typeof contains[0] === 'string') return entityAt(p, contains[0]);
  return null;
}

const adapter: ProviderAdapter = {
  name: 'razorpay',
  contentTypes: ['application/json'],
  defaultToleranceSeconds: null,
  // 24 h of retries; replays of events up to 15 days old on request.
  redeliveryWindowSeconds: 15 * DAY,
  prepareSecret: utf8Secret,
  parseSignature(req) {
    return { timestamp: null, digest: digestHeader(req, HEADER, 'hex') } satisfies RazorpaySignature;
  },
  verify(meta, body, keys, nowMs) {
    return matchHmac('sha256', [body], [(meta as RazorpaySignature).digest], keys, nowMs);
  },
  envelope(body: Buffer, req: RequestView) {
    const eventId = requireEventId(req.single(EVENT_ID_HEADER, 'ambiguous_header'), `${EVENT_ID_HEADER} header`);
    const e = parseJsonObject(body);
    return envelope({
      eventId,
      eventType: requireEventType(e.event, 'event'),
      objectId: objectId(e),
      providerCreatedAtMs: toEpochMs(e.created_at),
    });
  },
  sign(body, secret) {
    return { [HEADER]: hmac('sha256', Buffer.from(secret, 'utf8'), [body]).toString('hex') };
  },
  sample(seq) {
    const created = Math.floor(Date.now() / 1000);
    const body = JSON.stringify({
      entity: 'event', account_id: 'acc_BFQ7uQEaa7j2z7', event: 'payment.captured', contains: ['payment'],
      payload: { payment: { entity: { id: `pay_sample${seq}`, entity: 'payment', amount: 50000, currency: 'INR', status: 'captured', created_at: created } } },
      created_at: created,
    });
    return { body: Buffer.from(body), headers: { 'content-type': 'application/json', [EVENT_ID_HEADER]: `Evt${seq}` }, signOptions: {} };
  },
};

export const createRazorpay: AdapterFactory = (options, path) => {
  asObject(options ?? {}, path, []); // no options: a key here is a typo, not a silent no-op
  return adapter;
};
