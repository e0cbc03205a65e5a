import { decodeDigest, decodeHex } from '../crypto/hmac.js';
import { IngressError } from '../errors.js';
import type { RequestView } from './contract.js';
import { parseUnixSeconds } from './json.js';

/**
 * Shared mechanics of the simple schemes: one header carrying one digest of the raw body,
 * and a secret used as its UTF-8 bytes. Provider quirks stay in the adapters.
 */

/** The usual secret: non-empty, its UTF-8 bytes are the HMAC key. */
export function utf8Secret(value: string): Buffer {
  if (value.length === 0) throw new Error('secret is empty');
  return Buffer.from(value, 'utf8');
}

/**
 * A secret the provider generates as one token (letters, digits, `_`): white space in it is what
 * a file or variable added (a second trailing newline, a space after a paste), and kept it would
 * fail every delivery with 401 while the endpoint reads as ready. Refused when secrets load.
 */
export function tokenSecret(value: string, provider: string): Buffer {
  if (/\s/.test(value)) throw new Error(`a ${provider} secret has no white space (a blank line or a space in its file or variable?)`);
  return utf8Secret(value);
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

/**
 * A header of `key=value` items holding one signed timestamp and one or more hex SHA-256 digests
 * (Stripe `t=…,v1=…[,v1=…]`, Paddle `ts=…;h1=…[;h1=…]`): two timestamps → 400 ambiguous_signature;
 * an item without `=`, a bad digest or no valid timestamp → 401 malformed_signature; no digest →
 * 401 missing_signature. Items of other schemes are ignored. `ts` is the timestamp as it arrived.
 */
export function timestampedDigests(
  req: RequestView, name: string, separator: string, tsKey: string, sigKey: string,
): { timestamp: number; ts: string; digests: Buffer[] } {
  const header = req.single(name);
  if (header === undefined || header.trim() === '') throw new IngressError('missing_signature', `${name} header is absent`);
  let ts: string | undefined;
  const digests: Buffer[] = [];
  for (const item of header.split(separator)) {
    const eq = item.indexOf('=');
    if (eq <= 0) throw new IngressError('malformed_signature', `${name} has an item without "="`);
    const k = item.slice(0, eq).trim();
    const v = item.slice(eq + 1).trim();
    if (k === tsKey) {
      if (ts !== undefined) throw new IngressError('ambiguous_signature', `${name} carries two timestamps`);
      ts = v;
    } else if (k === sigKey) {
      const d = decodeHex(v);
      if (d === null || d.length !== 32) throw new IngressError('malformed_signature', `${sigKey} is not a 64-digit hex digest`);
      digests.push(d);
    }
  }
  const timestamp = parseUnixSeconds(ts);
  if (timestamp === null) throw new IngressError('malformed_signature', `${name} has no valid ${tsKey}=`);
  if (digests.length === 0) throw new IngressError('missing_signature', `${name} has no ${sigKey} signature`);
  return { timestamp, ts: ts!, digests };
}
