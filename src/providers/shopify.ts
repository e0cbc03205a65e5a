import { HOUR } from './contract.js';
import { tokenSecret } from './signature.js';
import { hmac, matchHmac, decodeBase64 } from '../crypto/hmac.js';
import { IngressError } from '../errors.js';
import { asObject, optEnum } from '../config/read.js';
import type { AdapterFactory, ProviderAdapter, RequestView, SignatureMetadata } from './contract.js';
import { envelope, parseJsonObject, idString, requireEventType, toEpochMs, isoTimestamp } from './json.js';

/**
 * Shopify: `X-Shopify-Hmac-Sha256: <base64>` = HMAC-SHA256(app client secret as UTF-8, raw body).
 * Nothing else is signed: no timestamp (so no freshness check), no topic, no ids.
 *
 * Header names: classic webhooks send `X-Shopify-*`; Shopify's newer deliveries (Events) use
 * `shopify-hmac-sha256`, `shopify-topic`, … and, for now, the `X-Shopify-*` ones beside them.
 * Either family is accepted; both at once only with the same signature (else ambiguous_signature),
 * and then it is an Events delivery, read from `shopify-*` (as @shopify/shopify-api decides: classic
 * webhooks never send `shopify-hmac-sha256`). Every other header comes from the one family chosen.
 *
 * Key: `X-Shopify-Event-Id` is "shared across all deliveries produced by the same merchant
 * action" (several topics, several subscriptions), so on its own it would fold distinct
 * deliveries into one row. The key is therefore `<event id>:<topic>[:<object id>]`: retries and a
 * duplicate subscription (same topic, same resource) collapse, distinct deliveries never do. An
 * Events delivery adds `<action>:<handle>` after the topic: its topic is only the resource name
 * (`Product` for create, update and delete), and each subscription (handle) shapes its own payload
 * with its own query, so two subscriptions' deliveries of one event are two events to the app.
 * Without an event id (Events deliveries are dropping it) the key is the per-delivery
 * `Webhook-Id`. Option `deduplicateBy: delivery` keys on `Webhook-Id` alone (Shopify's current advice).
 */
interface ShopifySignature extends SignatureMetadata {
  readonly digest: Buffer;
  /** The header family that carried the signature: `x-shopify-` or `shopify-`. */
  readonly family: Family;
}

const FAMILIES = ['x-shopify-', 'shopify-'] as const;
type Family = (typeof FAMILIES)[number];
const MAX_KEY_BYTES = 1024;

/**
 * The signature header family of this request. Both families at once are accepted only when
 * they carry the same signature (Events deliveries send both); then `shopify-*` is read.
 */
function familyOf(req: RequestView): Family {
  const present = FAMILIES.filter((f) => req.all(`${f}hmac-sha256`).length > 0);
  if (present.length > 1 && req.single('x-shopify-hmac-sha256') !== req.single('shopify-hmac-sha256')) {
    throw new IngressError('ambiguous_signature', 'X-Shopify-Hmac-Sha256 and Shopify-Hmac-Sha256 disagree');
  }
  // Classic webhooks never send shopify-hmac-sha256: with it, this is an Events delivery.
  return present.includes('shopify-') ? 'shopify-' : 'x-shopify-';
}

/**
 * An unsigned header of the signature's family (topic, ids, Triggered-At); '' counts as absent. Sent twice →
 * 400 ambiguous_header (the contract's reason for unsigned metadata): the signature itself was fine.
 */
function header(req: RequestView, family: Family, name: string): string | undefined {
  const v = req.single(family + name, 'ambiguous_header');
  return v === undefined || v === '' ? undefined : v;
}

/**
 * An Events delivery's action and subscription handle (`shopify-action`, `shopify-handle`), the
 * key parts its topic leaves out; none for classic webhooks, nor when neither header is sent.
 */
function eventsScope(req: RequestView, family: Family): string[] {
  if (family !== 'shopify-') return [];
  const action = header(req, family, 'action');
  const handle = header(req, family, 'handle');
  return action === undefined && handle === undefined ? [] : [action ?? '', handle ?? ''];
}

export function signShopify(body: Buffer, secret: string): string {
  return hmac('sha256', Buffer.from(secret, 'utf8'), [body]).toString('base64');
}

export const createShopify: AdapterFactory = (options, path) => {
  const o = asObject(options ?? {}, path, ['deduplicateBy']);
  const deduplicateBy = optEnum(o, 'deduplicateBy', path, ['event', 'delivery'] as const) ?? 'event';

  const adapter: ProviderAdapter = {
    name: 'shopify',
    contentTypes: ['application/json'],
    defaultToleranceSeconds: null,
    // 8 retries over 4 hours.
    redeliveryWindowSeconds: 4 * HOUR,
    // No documented payload cap; a products/update with 2,048 variants exceeds 1 MiB, and a 413 is
    // retried 8 times and then may delete the subscription.
    defaultMaxBodyBytes: 5 * 1024 * 1024,
    prepareSecret: (value) => tokenSecret(value, 'Shopify'),
    parseSignature(req): ShopifySignature {
      const family = familyOf(req);
      const value = req.single(`${family}hmac-sha256`);
      if (value === undefined || value === '') throw new IngressError('missing_signature', 'X-Shopify-Hmac-Sha256 header is absent');
      const digest = decodeBase64(value);
      if (digest === null || digest.length !== 32) throw new IngressError('malformed_signature', 'Shopify HMAC header is not a base64 SHA-256 digest');
      return { timestamp: null, digest, family };
    },
    verify(meta, body, keys, nowMs) {
      return matchHmac('sha256', [body], [(meta as ShopifySignature).digest], keys, nowMs);
    },
    envelope(body, req, meta) {
      const { family } = meta as ShopifySignature;
      const topic = requireEventType(header(req, family, 'topic'), `${family}topic header`);
      const e = parseJsonObject(body);
      // The GID names the resource type (`gid://shopify/Order/1`): numeric REST ids of different
      // types can be equal, and the GraphQL Admin API fetches by GID.
      const objectId = idString(e.admin_graphql_api_id) ?? idString(e.id);
      const eventId = deduplicateBy === 'event' ? idString(header(req, family, 'event-id')) : null;
      const webhookId = idString(header(req, family, 'webhook-id'));
      let key: string;
      if (eventId !== null) key = [eventId, topic, ...eventsScope(req, family), ...(objectId === null ? [] : [objectId])].join(':');
      else if (webhookId !== null) key = webhookId;
      else throw new IngressError('missing_event_id', deduplicateBy === 'event' ? `neither ${family}event-id nor ${family}webhook-id is present` : `${family}webhook-id header is absent`);
      // The parts are unsigned headers: bound the composite so it always fits the unique index.
      if (Buffer.byteLength(key, 'utf8') > MAX_KEY_BYTES) throw new IngressError('missing_event_id', 'the event key is too long');
      return envelope({
        eventId: key,
        eventType: topic,
        objectId,
        objectVersion: isoTimestamp(e.updated_at),
        providerCreatedAtMs: toEpochMs(header(req, family, 'triggered-at')),
      });
    },
    sign(body, secret) {
      return { 'x-shopify-hmac-sha256': signShopify(body, secret) };
    },
    sample(seq) {
      const id = 5_000_000_000_000 + Number(seq.replace(/\D/g, '').slice(-9) || '0');
      const now = new Date().toISOString();
      const body = JSON.stringify({
        id, admin_graphql_api_id: `gid://shopify/Order/${id}`, name: `#${seq}`, email: 'jon@example.com',
        created_at: now, updated_at: now, currency: 'USD', total_price: '10.00', financial_status: 'paid',
      });
      const uuid = `00000000-0000-4000-8000-${seq.padStart(12, '0').slice(-12)}`;
      return {
        body: Buffer.from(body),
        headers: {
          'content-type': 'application/json', 'x-shopify-topic': 'orders/create', 'x-shopify-shop-domain': 'example.myshopify.com',
          'x-shopify-api-version': '2025-07', 'x-shopify-event-id': uuid, 'x-shopify-webhook-id': uuid.replace('4000', '4001'),
          'x-shopify-triggered-at': now,
        },
        signOptions: {},
      };
    },
  };
  return adapter;
};
