import { HOUR } from './contract.js';
import { digestHeader, tokenSecret } from './signature.js';
import { hmac, matchHmac } from '../crypto/hmac.js';
import { asObject, child, reqString } from '../config/read.js';
import { ConfigError } from '../errors.js';
import type { AdapterFactory, ProviderAdapter, SignatureMetadata } from './contract.js';
import { envelope, parseJsonObject, pathValue, idString, requireEventId, requireEventType, toEpochMs } from './json.js';

/**
 * Square: `x-square-hmacsha256-signature: <base64>` = HMAC-SHA256(subscription signature key,
 * notification URL + raw body). The URL is part of the signed bytes, so it must be the URL
 * registered in the Square subscription, character for character: it comes from configuration
 * (`options.publicUrl`), never from the request, because behind a proxy or load balancer the
 * scheme, host, port and path this server sees differ from what Square signed.
 * Nothing time-related is signed (no freshness check). Key = body `event_id` (kept by retries).
 * The legacy HMAC-SHA1 `x-square-signature` header is not accepted.
 */
interface SquareSignature extends SignatureMetadata {
  readonly digest: Buffer;
}

const HEADER = 'x-square-hmacsha256-signature';
const OPTION_KEYS = ['publicUrl'] as const;

/** The registered notification URL, validated but kept exactly as written (it is signed verbatim). */
function readPublicUrl(options: Record<string, unknown> | undefined, path: string): string {
  const o = asObject(options ?? {}, path, OPTION_KEYS);
  const url = reqString(o, 'publicUrl', path);
  const p = child(path, 'publicUrl');
  // new URL() would silently trim or normalise; the signed string must be what Square has.
  if (/[\s\x00-\x1f\x7f]/.test(url)) throw new ConfigError(p, 'must not contain whitespace or control characters (it is signed exactly as written)');
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    throw new ConfigError(p, 'must be an absolute URL, exactly as registered in the Square webhook subscription');
  }
  if (parsed.protocol !== 'https:') throw new ConfigError(p, 'must be an https:// URL (Square only delivers to HTTPS notification URLs)');
  return url;
}

/** `version` of the resource under `data.object` (`payment`, `order_updated`, `invoice`…), when it has one. */
function resourceVersion(e: Record<string, unknown>): string | null {
  const obj = pathValue(e, 'data.object');
  if (obj === null || typeof obj !== 'object' || Array.isArray(obj)) return null;
  const o = obj as Record<string, unknown>;
  const type = pathValue(e, 'data.type');
  const keys = Object.keys(o);
  const name = typeof type === 'string' && Object.hasOwn(o, type) ? type : keys.length === 1 ? keys[0]! : undefined;
  if (name === undefined) return null;
  const v = pathValue(o[name], 'version');
  if (typeof v === 'number' && Number.isSafeInteger(v) && v >= 0) return String(v);
  if (typeof v === 'string' && /^\d{1,20}$/.test(v)) return v;
  return null; // e.g. payments carry only an opaque `version_token`, which orders nothing
}

export const createSquare: AdapterFactory = (options, path) => {
  const publicUrl = readPublicUrl(options, path);
  const adapter: ProviderAdapter = {
    name: 'square',
    contentTypes: ['application/json'],
    defaultToleranceSeconds: null,
    // retries for up to 72 hours after the event.
    redeliveryWindowSeconds: 72 * HOUR,
    prepareSecret: (value) => tokenSecret(value, 'Square'),
    parseSignature(req) {
      return { timestamp: null, digest: digestHeader(req, HEADER, 'base64') } satisfies SquareSignature;
    },
    verify(meta, body, keys, nowMs) {
      return matchHmac('sha256', [publicUrl, body], [(meta as SquareSignature).digest], keys, nowMs);
    },
    envelope(body) {
      const e = parseJsonObject(body);
      return envelope({
        eventId: requireEventId(e.event_id, 'event_id'),
        eventType: requireEventType(e.type, 'type'),
        objectId: idString(pathValue(e, 'data.id')),
        objectVersion: resourceVersion(e),
        providerCreatedAtMs: toEpochMs(e.created_at),
      });
    },
    sign(body, secret) {
      return { [HEADER]: hmac('sha256', Buffer.from(secret, 'utf8'), [publicUrl, body]).toString('base64') };
    },
    sample(seq) {
      const id = `KkAkhdMsgzn59SM8A89W${seq}`.slice(0, 40);
      const body = JSON.stringify({
        merchant_id: 'MLEFBHHSJGVHD', type: 'order.updated', event_id: `00000000-0000-4000-8000-${seq.padStart(12, '0').slice(-12)}`,
        created_at: new Date().toISOString(),
        data: { type: 'order', id, object: { order_updated: { order_id: id, location_id: 'L88917AVBK2S5', state: 'OPEN', version: 2, created_at: '2024-01-02T03:04:05.000Z', updated_at: '2024-01-02T03:04:06.000Z' } } },
      });
      return { body: Buffer.from(body), headers: { 'content-type': 'application/json' }, signOptions: {} };
    },
  };
  return adapter;
};
