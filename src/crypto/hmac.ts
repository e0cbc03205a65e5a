import { createHmac, timingSafeEqual } from 'node:crypto';

export type HmacAlgorithm = 'sha1' | 'sha256' | 'sha512';

/** One trusted secret version, already decoded into key bytes by its adapter. */
export interface TrustedKey {
  readonly version: string;
  readonly key: Buffer;
  /** Unix ms after which this version is no longer trusted; undefined = no end. */
  readonly retireAtMs?: number | undefined;
}

/** Whether a secret version's `retireAt` has come: from then on it verifies nothing. */
export function isRetired(v: { readonly retireAtMs?: number | undefined }, nowMs: number): boolean {
  return v.retireAtMs !== undefined && nowMs >= v.retireAtMs;
}

/** HMAC over the concatenation of `parts`, without building the concatenation. */
export function hmac(algorithm: HmacAlgorithm, key: Buffer, parts: readonly (Buffer | string)[]): Buffer {
  const h = createHmac(algorithm, key);
  for (const p of parts) h.update(p);
  return h.digest();
}

/** Constant-time comparison; digests of different length never match (length is not secret). */
export function digestsEqual(a: Buffer, b: Buffer): boolean {
  return a.length === b.length && timingSafeEqual(a, b);
}

/**
 * The shared core of every HMAC adapter: compute the expected digest with each trusted,
 * non-retired key, and accept if ANY candidate signature from the request equals it.
 * Returns the key version that matched, or null.
 */
export function matchHmac(
  algorithm: HmacAlgorithm,
  parts: readonly (Buffer | string)[],
  candidates: readonly Buffer[],
  keys: readonly TrustedKey[],
  nowMs: number,
): TrustedKey | null {
  if (candidates.length === 0) return null;
  for (const k of keys) {
    if (isRetired(k, nowMs)) continue;
    const expected = hmac(algorithm, k.key, parts);
    for (const c of candidates) if (digestsEqual(expected, c)) return k;
  }
  return null;
}

const HEX_RE = /^[0-9a-fA-F]+$/;
const B64_RE = /^[A-Za-z0-9+/]+={0,2}$/;
const B64URL_RE = /^[A-Za-z0-9_-]+={0,2}$/;

/** Strict decoders: Buffer.from() silently skips bad characters, which would hide malformed input. */
export function decodeHex(s: string): Buffer | null {
  return s.length % 2 === 0 && HEX_RE.test(s) ? Buffer.from(s, 'hex') : null;
}

export function decodeBase64(s: string): Buffer | null {
  if (s.length % 4 !== 0) return null;
  if (B64_RE.test(s)) return Buffer.from(s, 'base64');
  if (B64URL_RE.test(s)) return Buffer.from(s, 'base64url');
  return null;
}

export function decodeDigest(s: string, encoding: 'hex' | 'base64'): Buffer | null {
  return encoding === 'hex' ? decodeHex(s) : decodeBase64(s);
}
