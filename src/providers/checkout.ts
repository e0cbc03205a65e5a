import { sha256 } from '../crypto/payload-cipher.js';
import { DAY } from './contract.js';
import { digestHeader, utf8Secret } from './signature.js';
import { hmac, matchHmac, digestsEqual } from '../crypto/hmac.js';
import { ConfigError, IngressError } from '../errors.js';
import { asObject, child, type Obj } from '../config/read.js';
import { parseSecretRef, type SecretRef } from '../config/secrets.js';
import { OptionSecrets } from './option-secrets.js';
import type { AdapterFactory, ProviderAdapter, SignatureMetadata } from './contract.js';
import { envelope, parseJsonObject, pathValue, idString, requireEventId, requireEventType, toEpochMs } from './json.js';

/**
 * Checkout.com: `Cko-Signature: <hex>` = HMAC-SHA256(webhook signature key as UTF-8, raw body).
 * Nothing else is signed: no timestamp (so no freshness check). Key = body `id` (`evt_…`), which
 * automatic retries and Dashboard/API resends keep. Type = body `type`, object = `data.id`.
 *
 * Checkout.com can also send a configured "Authorization header key" verbatim in `Authorization`.
 * It is a static bearer value, not bound to the body, so it adds nothing the HMAC does not already
 * prove; the HMAC is always required. With `options.authorization` (one or more secret references)
 * the header must ALSO match one of them, for operators who want both checks.
 */
interface CheckoutSignature extends SignatureMetadata {
  readonly digest: Buffer;
  /** SHA-256 of the Authorization header, when the endpoint requires one. */
  readonly authorization: Buffer | null;
}

const HEADER = 'cko-signature';


/** The references of the accepted Authorization values (`options.authorization`). */
function authorizationRefs(o: Obj, path: string): SecretRef[] {
  const raw = o.authorization;
  if (raw === undefined) return [];
  const p = child(path, 'authorization');
  const list = Array.isArray(raw) ? raw : [raw];
  if (list.length === 0) throw new ConfigError(p, 'must name at least one value');
  return list.map((v, i) => parseSecretRef(v, Array.isArray(raw) ? child(p, i) : p));
}

export const createCheckout: AdapterFactory = (options, path, env) => {
  const o = asObject(options ?? {}, path, ['authorization']);
  const refs = authorizationRefs(o, path);
  // Compared as fixed-length SHA-256 digests: constant time, and the value's length does not leak.
  // Re-read with the endpoint's secrets (OptionSecrets says how).
  const authorization = refs.length > 0 ? new OptionSecrets(refs, (values) => ({ first: values[0]!, digests: values.map(sha256) }), undefined, env) : null;

  const adapter: ProviderAdapter = {
    name: 'checkout',
    contentTypes: ['application/json'],
    defaultToleranceSeconds: null,
    // 8 retries over about 30 h; Dashboard/API resends (same evt_ id) of events of the last 90 days.
    redeliveryWindowSeconds: 90 * DAY,
    prepareSecret: utf8Secret,
    ...(authorization ? { optionSecrets: authorization } : {}),
    parseSignature(req): CheckoutSignature {
      const digest = digestHeader(req, HEADER, 'hex', { label: 'Cko-Signature' });
      let auth: Buffer | null = null;
      if (authorization) {
        const a = req.single('authorization');
        if (a === undefined || a === '') throw new IngressError('missing_signature', 'Authorization header is absent');
        // Node decodes header bytes as latin1: that recovers the exact bytes sent (UTF-8 of the key).
        auth = sha256(Buffer.from(a, 'latin1'));
      }
      return { timestamp: null, digest, authorization: auth };
    },
    verify(meta, body, keys, nowMs) {
      const m = meta as CheckoutSignature;
      const key = matchHmac('sha256', [body], [m.digest], keys, nowMs);
      if (!authorization) return key;
      let authorized = false;
      for (const d of authorization.value.digests) authorized = digestsEqual(d, m.authorization!) || authorized;
      return authorized ? key : null;
    },
    envelope(body) {
      const e = parseJsonObject(body);
      return envelope({
        eventId: requireEventId(e.id, 'id'),
        eventType: requireEventType(e.type, 'type'),
        objectId: idString(pathValue(e, 'data.id')),
        // Workflow events carry `created_on`; older gateway events carry `timestamp`.
        providerCreatedAtMs: toEpochMs(e.created_on ?? e.timestamp),
      });
    },
    sign(body, secret) {
      const headers: Record<string, string> = { [HEADER]: hmac('sha256', Buffer.from(secret, 'utf8'), [body]).toString('hex') };
      // As its UTF-8 bytes, one per character: Node writes header strings as latin1.
      if (authorization) headers.authorization = Buffer.from(authorization.value.first, 'utf8').toString('latin1');
      return headers;
    },
    sample(seq) {
      const body = JSON.stringify({
        id: `evt_sample_${seq}`, type: 'payment_approved', version: '1.0.43', created_on: new Date().toISOString(),
        data: { id: `pay_sample_${seq}`, action_id: `act_sample_${seq}`, amount: 1000, currency: 'GBP', reference: `ORD-${seq}`, response_code: '10000', response_summary: 'Approved' },
      });
      return { body: Buffer.from(body), headers: { 'content-type': 'application/json' }, signOptions: {} };
    },
  };
  return adapter;
};
