import { DAY } from './contract.js';
import { digestHeader, utf8Secret } from './signature.js';
import { randomUUID } from 'node:crypto';
import { hmac, matchHmac } from '../crypto/hmac.js';
import { asObject, optEnum } from '../config/read.js';
import { IngressError } from '../errors.js';
import type { AdapterFactory, Envelope, ProviderAdapter, SignatureMetadata } from './contract.js';
import { formObject, parseForm } from './form.js';
import { envelope, jsonEnvelope } from './json.js';

/**
 * Mollie has two webhook systems, chosen per endpoint with `options.mode`:
 *
 * - `signed` (default; "next-gen" webhooks): `X-Mollie-Signature: sha256=<hex>` =
 *   HMAC-SHA256(secret, raw body); JSON event with `id` (the key), `type`, `entityId`, `createdAt`.
 *   No timestamp is signed. A request WITHOUT the header is refused — Mollie's own SDK treats a
 *   missing header as "legacy webhook" and accepts it, which would let anyone bypass the check.
 * - `classic`: the body is only `id=tr_…`, and nothing is signed. It is accepted as a "go fetch"
 *   notice, never as data: stored with verification `fetch-required`; processing must fetch the
 *   resource from the Mollie API. Notices for one resource coalesce while a row for it is still
 *   PENDING; a notice after that row was claimed makes a new row (the state may have changed
 *   after the worker fetched it). Anyone can send one, so the endpoint is rate-limited by default.
 */
interface MollieSignature extends SignatureMetadata {
  readonly digest: Buffer | null;
}

const HEADER = 'x-mollie-signature';
const PREFIX = 'sha256=';
/** Mollie resource ids: a lowercase prefix, `_`, then letters and digits. */
const RESOURCE_ID = /^([a-z]{1,10})_[A-Za-z0-9]{1,60}$/;
/** Resource kinds by id prefix, for the notice's event type (`payment.changed`, …). */
const KINDS: Readonly<Record<string, string>> = {
  tr: 'payment', ord: 'order', sub: 'subscription', pl: 'payment-link', re: 'refund', chb: 'chargeback',
  cst: 'customer', mdt: 'mandate', stl: 'settlement', shp: 'shipment', cap: 'capture', trm: 'terminal', bt: 'balance-transfer',
};

const NO_SECRET = { version: 'unsigned', key: Buffer.alloc(0) };

function classicEnvelope(body: Buffer): Envelope {
  const ids = parseForm(body).get('id') ?? [];
  if (ids.length !== 1) throw new IngressError('missing_event_id', ids.length === 0 ? 'form field id is absent' : 'form field id appears twice');
  const m = RESOURCE_ID.exec(ids[0]!);
  if (!m) throw new IngressError('malformed_payload', 'id is not a Mollie resource id');
  const resourceId = ids[0]!;
  return envelope({
    // Unique per notice: coalescing, not the key, decides when two notices share a row.
    eventId: `${resourceId}@${randomUUID()}`,
    eventType: `${KINDS[m[1]!] ?? 'resource'}.changed`,
    objectId: resourceId,
    notice: { coalesceKey: resourceId },
  });
}

const signed: ProviderAdapter = {
  name: 'mollie',
  contentTypes: ['application/json'],
  defaultToleranceSeconds: null,
  // retry schema not confirmed [U]: about a day.
  redeliveryWindowSeconds: DAY,
  prepareSecret: utf8Secret,
  parseSignature(req) {
    return { timestamp: null, digest: digestHeader(req, HEADER, 'hex', { prefix: PREFIX, prefixOptional: true }) } satisfies MollieSignature;
  },
  verify(meta, body, keys, nowMs) {
    return matchHmac('sha256', [body], [(meta as MollieSignature).digest!], keys, nowMs);
  },
  envelope: jsonEnvelope({ id: 'id', type: 'type', objectId: 'entityId', createdAt: 'createdAt' }),
  sign(body, secret) {
    return { [HEADER]: PREFIX + hmac('sha256', Buffer.from(secret, 'utf8'), [body]).toString('hex') };
  },
  sample(seq) {
    const body = JSON.stringify({
      resource: 'event', id: `event_sample${seq}`, type: 'payment-link.paid', entityId: `pl_sample${seq}`, createdAt: new Date().toISOString(),
      _embedded: { entity: { resource: 'payment-link', id: `pl_sample${seq}`, amount: { currency: 'EUR', value: '10.00' } } },
    });
    return { body: Buffer.from(body), headers: { 'content-type': 'application/json' }, signOptions: {} };
  },
};

const classic: ProviderAdapter = {
  name: 'mollie',
  contentTypes: ['application/x-www-form-urlencoded'],
  defaultToleranceSeconds: null,
  // retry schema not confirmed [U]: about a day; notices coalesce anyway.
  redeliveryWindowSeconds: DAY,
  unsigned: true,
  // A notice is ~20 bytes; anything large is not Mollie.
  defaultMaxBodyBytes: 4096,
  defaultRateLimit: { perSecond: 50, burst: 200 },
  prepareSecret() {
    throw new Error('a classic Mollie endpoint has no secret');
  },
  parseSignature: () => ({ timestamp: null, digest: null }) satisfies MollieSignature,
  verify: () => NO_SECRET,
  envelope: classicEnvelope,
  parsePayload: (raw) => formObject(raw),
  sign: () => ({}),
  sample: (seq) => ({
    body: Buffer.from(`id=tr_sample${seq.replace(/[^A-Za-z0-9]/g, '')}`),
    headers: { 'content-type': 'application/x-www-form-urlencoded' },
    signOptions: {},
  }),
};

export const createMollie: AdapterFactory = (options, path) => {
  const o = asObject(options ?? {}, path, ['mode']);
  const mode = optEnum(o, 'mode', path, ['signed', 'classic'] as const) ?? 'signed';
  return mode === 'classic' ? classic : signed;
};
