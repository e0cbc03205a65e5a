import { DAY, withoutOptions } from './contract.js';
import { createPrivateKey, createPublicKey, sign as edSign, verify as edVerify, type KeyObject } from 'node:crypto';
import { hmac, isRetired, matchHmac, decodeBase64, type TrustedKey } from '../crypto/hmac.js';
import { ConfigError, IngressError } from '../errors.js';
import type { AdapterFactory, ProviderAdapter, RequestView, SignatureMetadata } from './contract.js';
import { envelope, jsonFields, idString, requireEventId, requireEventType, toEpochMs, parseUnixSeconds } from './json.js';

/**
 * Standard Webhooks (Svix and others): `webhook-id`, `webhook-timestamp`,
 * `webhook-signature: <version>,<b64> [<version>,<b64> …]` (Svix sends the same as `svix-*`).
 * The signed content is `${id}.${timestamp}.${raw}` for both schemes the spec defines:
 *  - `v1`  = HMAC-SHA256, key = base64 of the secret minus `whsec_` (symmetric);
 *  - `v1a` = ed25519, verified with the producer's public key `whpk_<base64 of 32 raw bytes>`
 *    (the producer signs with `whsk_<base64 of the 32-byte seed>`; a receiver never holds it).
 * An endpoint's secret list may mix `whsec_` and `whpk_` versions; each key checks only its own
 * scheme (an ed25519 public key is public, so it must never be usable as an HMAC key).
 * The id is signed and stable across retries, so it is the de-duplication key.
 *
 * Prepared key bytes: an HMAC secret is its raw key bytes (as before); an ed25519 public key is
 * its DER SubjectPublicKeyInfo (44 bytes, fixed 12-byte prefix). A `whsec_` secret that decodes
 * to exactly that shape is refused, so the two kinds can never be confused, even in a copy.
 */
export interface StandardSignature extends SignatureMetadata {
  readonly timestamp: number;
  readonly id: string;
  /** `v1` entries: 32-byte HMAC-SHA256 digests. */
  readonly v1: readonly Buffer[];
  /** `v1a` entries: 64-byte ed25519 signatures. */
  readonly v1a: readonly Buffer[];
}

const PREFIXES = ['webhook-', 'svix-'] as const;

const ED25519_SPKI_PREFIX = Buffer.from('302a300506032b6570032100', 'hex');
const ED25519_PKCS8_PREFIX = Buffer.from('302e020100300506032b657004220420', 'hex');
const SECRET = 'whsec_';
const PUBLIC = 'whpk_';
const PRIVATE = 'whsk_';

function headerSet(req: RequestView, prefixes: readonly string[]): { id?: string; ts?: string; sig?: string } {
  const present = prefixes.filter((p) => req.all(`${p}signature`).length > 0);
  // A request carrying both header families could mean different things to different readers.
  if (present.length > 1) throw new IngressError('ambiguous_signature', 'both webhook-* and svix-* signature headers are present');
  const p = present[0] ?? prefixes[0]!;
  return { id: req.single(`${p}id`), ts: req.single(`${p}timestamp`), sig: req.single(`${p}signature`) };
}

/** True for prepared key bytes that hold an ed25519 public key (DER SPKI), not an HMAC secret. */
export function isEd25519Key(key: Buffer): boolean {
  return key.length === ED25519_SPKI_PREFIX.length + 32 && key.subarray(0, ED25519_SPKI_PREFIX.length).equals(ED25519_SPKI_PREFIX);
}

/** The symmetric `whsec_` secret (or bare base64) → HMAC key bytes. Refuses the asymmetric formats. */
export function decodeStandardSecret(value: string): Buffer {
  if (value.startsWith(PUBLIC) || value.startsWith(PRIVATE)) {
    throw new Error(`a "${value.slice(0, 5)}" value is an ed25519 key, not an HMAC secret ("whsec_…")`);
  }
  const key = decodeBase64(padded(value.startsWith(SECRET) ? value.slice(SECRET.length) : value));
  if (key === null || key.length === 0) throw new Error('a Standard Webhooks secret is base64 (optionally prefixed "whsec_")');
  if (isEd25519Key(key)) throw new Error('this secret decodes to an ed25519 public key (DER): configure the public key as "whpk_<base64 of its 32 raw bytes>"');
  return key;
}

/**
 * A secret's base64 with its padding restored: producers that generate keys as unpadded base64
 * (base64url without `=` is common) are read as the official library reads them. Only secrets:
 * a signature stays strict (decodeBase64).
 */
function padded(b64: string): string {
  return b64.length % 4 === 2 ? `${b64}==` : b64.length % 4 === 3 ? `${b64}=` : b64;
}

/** decodeStandardSecret for a configured value: a bad one is a ConfigError naming `path` (never the value). */
export function standardSecretAt(value: string, path: string): Buffer {
  try {
    return decodeStandardSecret(value);
  } catch {
    throw new ConfigError(path, 'is not a Standard Webhooks secret (base64, optionally prefixed "whsec_")');
  }
}

const publicKeys = new WeakMap<Buffer, KeyObject>();

function publicKeyObject(spki: Buffer): KeyObject {
  let k = publicKeys.get(spki);
  if (k === undefined) {
    k = createPublicKey({ key: spki, format: 'der', type: 'spki' });
    publicKeys.set(spki, k);
  }
  return k;
}

/** `whpk_<base64 of the 32 raw public key bytes>` → prepared key bytes (DER SPKI). */
export function decodeStandardPublicKey(value: string): Buffer {
  if (!value.startsWith(PUBLIC)) throw new Error('an ed25519 verification key is "whpk_<base64 of the 32-byte public key>"');
  const raw = decodeBase64(value.slice(PUBLIC.length));
  if (raw === null || raw.length !== 32) throw new Error('a "whpk_" key is the base64 of a raw 32-byte ed25519 public key');
  const spki = Buffer.concat([ED25519_SPKI_PREFIX, raw]);
  try {
    publicKeyObject(spki);
  } catch {
    throw new Error('the "whpk_" value is not a usable ed25519 public key');
  }
  return spki;
}

/**
 * One configured verification key: `whsec_…` (or bare base64) = HMAC secret for `v1`;
 * `whpk_…` = ed25519 public key for `v1a`. A `whsk_…` private key is refused: the receiver
 * must only ever hold the public half (holding the private key would let it forge).
 */
export function prepareStandardKey(value: string): Buffer {
  if (value.startsWith(PRIVATE)) {
    throw new Error('a "whsk_" value is an ed25519 PRIVATE signing key: configure its public key ("whpk_…") instead; a receiver never needs the private key');
  }
  return value.startsWith(PUBLIC) ? decodeStandardPublicKey(value) : decodeStandardSecret(value);
}

/** `whsk_<base64>` (32-byte seed, or 64 bytes seed‖public as libsodium stores it) → private KeyObject. */
function privateKeyObject(value: string): KeyObject {
  const raw = value.startsWith(PRIVATE) ? decodeBase64(value.slice(PRIVATE.length)) : null;
  if (raw === null || (raw.length !== 32 && raw.length !== 64)) {
    throw new Error('an ed25519 signing key is "whsk_<base64 of the 32-byte seed>" (or of 64 bytes seed‖public key)');
  }
  const key = createPrivateKey({ key: Buffer.concat([ED25519_PKCS8_PREFIX, raw.subarray(0, 32)]), format: 'der', type: 'pkcs8' });
  if (raw.length === 64 && !publicRaw(key).equals(raw.subarray(32))) throw new Error('the "whsk_" value\'s public half does not match its seed');
  return key;
}

function publicRaw(privateKey: KeyObject): Buffer {
  return createPublicKey(privateKey).export({ format: 'der', type: 'spki' }).subarray(ED25519_SPKI_PREFIX.length);
}

/** The `whpk_…` verification key that belongs to a `whsk_…` signing key. */
export function standardPublicKeyOf(signingKey: string): string {
  return PUBLIC + publicRaw(privateKeyObject(signingKey)).toString('base64');
}

/**
 * At most this many `v1a` entries in one header. Each is a separate ed25519 verification over the
 * whole message (its SHA-512 cannot be shared between signatures or keys): without a cap, an
 * unauthenticated sender fitting ~180 of them in the header block could buy ~180 hashes of a
 * 1 MiB body per public key with one request. A producer sends one, or two or three while it
 * rotates keys; HMAC `v1` entries cost one digest per key however many there are, so they are
 * not capped.
 */
export const MAX_V1A_SIGNATURES = 4;

/** Parses the signature headers (HEADERS ONLY) of the given families, `webhook-` first. */
export function parseStandardSignature(req: RequestView, prefixes: readonly string[] = PREFIXES): StandardSignature {
  const h = headerSet(req, prefixes);
  const name = prefixes[0]!;
  if (h.sig === undefined) throw new IngressError('missing_signature', `${name}signature header is absent`);
  if (h.id === undefined || h.id === '') throw new IngressError('malformed_signature', `${name}id header is absent`);
  const timestamp = parseUnixSeconds(h.ts);
  if (timestamp === null) throw new IngressError('malformed_signature', `${name}timestamp is absent or not Unix seconds`);
  const v1: Buffer[] = [];
  const v1a: Buffer[] = [];
  for (const token of h.sig.split(' ')) {
    if (token === '') continue;
    const comma = token.indexOf(',');
    if (comma <= 0) throw new IngressError('malformed_signature', `a ${name}signature entry is not "<version>,<signature>"`);
    const version = token.slice(0, comma);
    if (version !== 'v1' && version !== 'v1a') continue; // unknown (future) schemes are skipped
    const d = decodeBase64(token.slice(comma + 1));
    if (version === 'v1') {
      if (d === null || d.length !== 32) throw new IngressError('malformed_signature', 'a v1 signature is not a base64 SHA-256 digest');
      v1.push(d);
    } else {
      if (d === null || d.length !== 64) throw new IngressError('malformed_signature', 'a v1a signature is not a base64 64-byte ed25519 signature');
      if (v1a.length === MAX_V1A_SIGNATURES) throw new IngressError('malformed_signature', `more than ${MAX_V1A_SIGNATURES} v1a signatures`);
      v1a.push(d);
    }
  }
  if (v1.length === 0 && v1a.length === 0) throw new IngressError('missing_signature', `${name}signature has no v1 or v1a signature`);
  return { timestamp, id: h.id, v1, v1a };
}

/**
 * The first trusted, non-retired key (in configured order) that verifies: an HMAC key against
 * the `v1` entries (constant-time), an ed25519 key against the `v1a` entries. Never across schemes.
 */
export function verifyStandard(m: StandardSignature, body: Buffer, keys: readonly TrustedKey[], nowMs: number): TrustedKey | null {
  const prefix = `${m.id}.${m.timestamp}.`;
  let message: Buffer | undefined;
  for (const k of keys) {
    if (isRetired(k, nowMs)) continue;
    if (isEd25519Key(k.key)) {
      if (m.v1a.length === 0) continue;
      // ed25519 signs the whole message (no streaming): build it once, only when needed.
      message ??= Buffer.concat([Buffer.from(prefix, 'utf8'), body]);
      const pub = publicKeyObject(k.key);
      for (const sig of m.v1a) if (edVerify(null, message, pub, sig)) return k;
    } else if (matchHmac('sha256', [prefix, body], m.v1, [k], nowMs)) {
      return k;
    }
  }
  return null;
}

export function signStandard(key: Buffer, id: string, timestamp: number, body: Buffer): string {
  return 'v1,' + hmac('sha256', key, [`${id}.${timestamp}.`, body]).toString('base64');
}

export function signStandardV1a(signingKey: string, id: string, timestamp: number, body: Buffer): string {
  return 'v1a,' + edSign(null, Buffer.concat([Buffer.from(`${id}.${timestamp}.`, 'utf8'), body]), privateKeyObject(signingKey)).toString('base64');
}

/**
 * The `webhook-signature` value for one or more signing secrets separated by spaces (base64 has
 * none): `whsec_…` → a `v1` entry, `whsk_…` → a `v1a` entry, in the order given.
 */
export function signStandardEntries(secrets: string, id: string, timestamp: number, body: Buffer): string {
  return secrets.split(' ').filter((s) => s !== '').map((s) => {
    if (s.startsWith(PUBLIC)) throw new Error('a "whpk_" public key cannot sign: sign with its "whsk_" private key');
    return s.startsWith(PRIVATE) ? signStandardV1a(s, id, timestamp, body) : signStandard(decodeStandardSecret(s), id, timestamp, body);
  }).join(' ');
}

const readFields = jsonFields(['type', 'data.id', 'timestamp']);

/**
 * The event type of a payload that has no `type` (or a null one). The spec only recommends a body `type` ("this specification does
 * not dictate the structure, or impose any requirements, on the shape, format, and content of the payload"), and
 * producers leave it out — Svix's own verification example sends `{"event_type":"ping",…}`. Such a delivery is
 * signed, fresh and keyed by its `webhook-id`: it is stored under this type, not refused (a 400 would be retried
 * for a day and then disable the endpoint, the event never stored).
 */
export const UNTYPED_EVENT = 'untyped';

const adapter: ProviderAdapter = {
  name: 'standard-webhooks',
  contentTypes: ['application/json'],
  defaultToleranceSeconds: 300,
  // producer-defined; Svix ≈ 27 h, the spec's example schedule ≈ 3 days.
  redeliveryWindowSeconds: 3 * DAY,
  prepareSecret: prepareStandardKey,
  parseSignature: (req) => parseStandardSignature(req),
  verify(meta, body, keys, nowMs) {
    return verifyStandard(meta as StandardSignature, body, keys, nowMs);
  },
  envelope(body, _req, meta) {
    const [type, dataId, timestamp] = readFields(body);
    return envelope({
      eventId: requireEventId((meta as StandardSignature).id, 'webhook-id header'),
      // Absent (or null): the producer sends none. Present but unusable (empty, an object) is still refused.
      eventType: type === undefined || type === null ? UNTYPED_EVENT : requireEventType(type, 'type'),
      objectId: idString(dataId),
      providerCreatedAtMs: toEpochMs(timestamp),
    });
  },
  sign(body, secret, opts) {
    const id = opts.id ?? `msg_${Date.now().toString(36)}`;
    const ts = opts.timestamp ?? Math.floor(Date.now() / 1000);
    return {
      'webhook-id': id,
      'webhook-timestamp': String(ts),
      'webhook-signature': signStandardEntries(secret, id, ts, body),
    };
  },
  sample(seq) {
    const body = JSON.stringify({ type: 'invoice.paid', timestamp: new Date().toISOString(), data: { id: `inv_sample_${seq}`, amount: 2000 } });
    return { body: Buffer.from(body), headers: { 'content-type': 'application/json' }, signOptions: { id: `msg_sample_${seq}` } };
  },
};

export const createStandardWebhooks: AdapterFactory = withoutOptions(adapter);
