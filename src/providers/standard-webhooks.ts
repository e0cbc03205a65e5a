import { hmac, matchHmac, decodeBase64 } from '../crypto/hmac.js';
import { IngressError } from '../errors.js';
import type { AdapterFactory, ProviderAdapter, RequestView, SignatureMetadata } from './contract.js';
import { envelope, parseJsonObject, pathValue, idString, requireEventId, requireEventType, toEpochMs, parseUnixSeconds } from './json.js';

/**
 * Standard Webhooks (Svix and others): `webhook-id`, `webhook-timestamp`,
 * `webhook-signature: v1,<b64> [v1,<b64> …]` (Svix sends the same as `svix-*`).
 * HMAC-SHA256 over `${id}.${timestamp}.${raw}`, key = base64 of the secret minus `whsec_`.
 * The id is signed and stable across retries, so it is the de-duplication key.
 */
interface StandardSignature extends SignatureMetadata {
  readonly timestamp: number;
  readonly id: string;
  readonly v1: readonly Buffer[];
}

const PREFIXES = ['webhook-', 'svix-'] as const;

function headerSet(req: RequestView): { id?: string; ts?: string; sig?: string } {
  const present = PREFIXES.filter((p) => req.all(`${p}signature`).length > 0);
  // A request carrying both header families could mean different things to different readers.
  if (present.length > 1) throw new IngressError('ambiguous_signature', 'both webhook-* and svix-* signature headers are present');
  const p = present[0] ?? 'webhook-';
  return { id: req.single(`${p}id`), ts: req.single(`${p}timestamp`), sig: req.single(`${p}signature`) };
}

export function decodeStandardSecret(value: string): Buffer {
  const key = decodeBase64(value.startsWith('whsec_') ? value.slice(6) : value);
  if (key === null || key.length === 0) throw new Error('a Standard Webhooks secret is base64 (optionally prefixed "whsec_")');
  return key;
}

export function signStandard(key: Buffer, id: string, timestamp: number, body: Buffer): string {
  return 'v1,' + hmac('sha256', key, [`${id}.${timestamp}.`, body]).toString('base64');
}

const adapter: ProviderAdapter = {
  name: 'standard-webhooks',
  contentTypes: ['application/json'],
  defaultToleranceSeconds: 300,
  prepareSecret: decodeStandardSecret,
  parseSignature(req) {
    const h = headerSet(req);
    if (h.sig === undefined) throw new IngressError('missing_signature', 'webhook-signature header is absent');
    if (h.id === undefined || h.id === '') throw new IngressError('malformed_signature', 'webhook-id header is absent');
    const timestamp = parseUnixSeconds(h.ts);
    if (timestamp === null) throw new IngressError('malformed_signature', 'webhook-timestamp is absent or not Unix seconds');
    const v1: Buffer[] = [];
    for (const token of h.sig.split(' ')) {
      if (token === '') continue;
      const comma = token.indexOf(',');
      if (comma <= 0) throw new IngressError('malformed_signature', 'a webhook-signature entry is not "<version>,<signature>"');
      if (token.slice(0, comma) !== 'v1') continue; // other schemes (v1a) are not HMAC
      const d = decodeBase64(token.slice(comma + 1));
      if (d === null || d.length !== 32) throw new IngressError('malformed_signature', 'a v1 signature is not a base64 SHA-256 digest');
      v1.push(d);
    }
    if (v1.length === 0) throw new IngressError('missing_signature', 'webhook-signature has no v1 signature');
    return { timestamp, id: h.id, v1 } satisfies StandardSignature;
  },
  verify(meta, body, keys, nowMs) {
    const m = meta as StandardSignature;
    return matchHmac('sha256', [`${m.id}.${m.timestamp}.`, body], m.v1, keys, nowMs);
  },
  envelope(body, _req, meta) {
    const e = parseJsonObject(body);
    return envelope({
      eventId: requireEventId((meta as StandardSignature).id, 'webhook-id header'),
      eventType: requireEventType(e.type, 'type'),
      objectId: idString(pathValue(e, 'data.id')),
      providerCreatedAtMs: toEpochMs(e.timestamp),
    });
  },
  sign(body, secret, opts) {
    const id = opts.id ?? `msg_${Date.now().toString(36)}`;
    const ts = opts.timestamp ?? Math.floor(Date.now() / 1000);
    return {
      'webhook-id': id,
      'webhook-timestamp': String(ts),
      'webhook-signature': signStandard(decodeStandardSecret(secret), id, ts, body),
    };
  },
  sample(seq) {
    const body = JSON.stringify({ type: 'invoice.paid', timestamp: new Date().toISOString(), data: { id: `inv_sample_${seq}`, amount: 2000 } });
    return { body: Buffer.from(body), headers: { 'content-type': 'application/json' }, signOptions: { id: `msg_sample_${seq}` } };
  },
};

export const createStandardWebhooks: AdapterFactory = () => adapter;
