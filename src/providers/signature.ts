import { decodeDigest } from '../crypto/hmac.js';
import { IngressError } from '../errors.js';
import type { RequestView } from './contract.js';

/**
 * Shared mechanics of the simple schemes: one header carrying one digest of the raw body,
 * and a secret used as its UTF-8 bytes. Provider quirks stay in the adapters.
 */

/** The usual secret: non-empty, its UTF-8 bytes are the HMAC key. */
export function utf8Secret(value: string): Buffer {
  if (value.length === 0) throw new Error('secret is empty');
  return Buffer.from(value, 'utf8');
}

export interface DigestHeaderOptions {
  /** A scheme prefix such as `sha256=`; `prefixOptional` also accepts the bare digest. */
  readonly prefix?: string;
  readonly prefixOptional?: boolean;
  /** Digest length in bytes (default 32: SHA-256). */
  readonly bytes?: number;
  /** The header's name in messages (default: `name`). */
  readonly label?: string;
}

/**
 * The digest in header `name`: absent or blank → 401 missing_signature; twice → 400
 * ambiguous_signature (RequestView.single); wrong prefix, encoding or length → 401 malformed_signature.
 */
export function digestHeader(req: RequestView, name: string, encoding: 'hex' | 'base64', o: DigestHeaderOptions = {}): Buffer {
  const label = o.label ?? name;
  const raw = req.single(name)?.trim();
  if (raw === undefined || raw === '') throw new IngressError('missing_signature', `${label} header is absent`);
  let value = raw;
  if (o.prefix !== undefined) {
    if (raw.startsWith(o.prefix)) value = raw.slice(o.prefix.length);
    else if (!o.prefixOptional) throw new IngressError('malformed_signature', `${label} must start with "${o.prefix}"`);
  }
  const bytes = o.bytes ?? 32;
  const digest = decodeDigest(value, encoding);
  if (digest === null || digest.length !== bytes) {
    throw new IngressError('malformed_signature', `${label} is not a ${encoding === 'hex' ? `${bytes * 2}-digit hex` : 'base64'} ${bytes}-byte digest`);
  }
  return digest;
}
