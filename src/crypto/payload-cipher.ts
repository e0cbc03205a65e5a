import { createCipheriv, createDecipheriv, hash } from 'node:crypto';
import { brotliCompressSync, brotliDecompressSync, constants as zlib } from 'node:zlib';
import { randomBytesFromPool } from './ids.js';

/** An encrypted raw payload as stored: the key id travels with the ciphertext. */
export interface SealedPayload {
  readonly keyId: string;
  readonly nonce: Buffer;
  /** AES-256-GCM ciphertext followed by its 16-byte tag. */
  readonly ciphertext: Buffer;
  /**
   * What was sealed: absent = the exact raw bytes; 'br' = those bytes brotli-compressed (a large
   * body, see SealingKey.compressFrom). Bound into the associated data, like the row's key.
   */
  readonly encoding?: PayloadEncoding;
  /** With an encoding: the raw body's size, which opening gives back (also bound). */
  readonly rawBytes?: number;
}

export type PayloadEncoding = 'br';

/** How a compressed payload was packed; absent for one stored as it came. */
type Packing = { readonly encoding: PayloadEncoding; readonly rawBytes: number };

export interface PayloadBinding {
  readonly provider: string;
  readonly endpointId: string;
  readonly providerEventId: string;
}

/**
 * The key new payloads are sealed with, as plain data: it travels with the work to a thread
 * that seals on the event loop's behalf (same process; never logged or stored).
 */
export interface SealingKey {
  readonly keyId: string;
  readonly key: Uint8Array;
  /**
   * Bodies of at least this many bytes are compressed before they are sealed (Infinity = never;
   * config limits.compressBodyBytes). Ciphertext does not compress, so this is the only place
   * it can happen: a 1 MiB JSON body becomes ~190 KB, which is what the database writes, its
   * WAL carries and a worker reads back. Only large bodies: on a 10 KB one, compressing costs
   * more than it saves.
   */
  readonly compressFrom: number;
}

const TAG_BYTES = 16;
const NONCE_BYTES = 12;
/**
 * seal feeds the cipher in slices of this size: update() returns a new buffer per call, and
 * small ones come from reused memory, where one call on a 1 MiB body allocates a second
 * body-sized buffer. Fresh pages are costly on a VM (~12 µs each here): a 1 MiB seal fell
 * from ~8.7 ms to ~1–4 ms of event-loop time.
 */
const SLICE_BYTES = 64 * 1024;

/**
 * Associated data binds a ciphertext to its row's unique key, so a ciphertext copied onto
 * another row fails authentication instead of decrypting as that row's payload; and, for a
 * compressed payload, to its encoding and raw size, so a row whose encoding columns were
 * changed fails too. JSON array encoding keeps the fields unambiguous whatever characters they contain.
 */
export function payloadAad(b: PayloadBinding, packing?: Pick<SealedPayload, 'encoding' | 'rawBytes'>): Buffer {
  const fields: (string | number)[] = ['webhook-inbox/payload/v1', b.provider, b.endpointId, b.providerEventId];
  if (packing?.encoding) fields.push(packing.encoding, packing.rawBytes ?? -1);
  return Buffer.from(JSON.stringify(fields));
}

/**
 * Brotli at quality 1: ~2.7 ms for 1 MiB of JSON here (~6x smaller), against ~10 ms for zlib's
 * deflate at level 6 for about the same size (bench/RESULTS.md, 2026-12-01).
 */
function compress(plain: Buffer): Buffer {
  return brotliCompressSync(plain, { params: { [zlib.BROTLI_PARAM_QUALITY]: 1, [zlib.BROTLI_PARAM_SIZE_HINT]: plain.length } });
}

/** SHA-256 of bytes, or of a string's UTF-8 bytes. One-shot: no Hash object (7 vs 10 µs for 7 KB here). */
export function sha256(data: Buffer | string): Buffer {
  return hash('sha256', data, 'buffer');
}

/**
 * Seals `raw` under `k` (AES-256-GCM, a fresh random nonce), bound to its row's unique key;
 * compressed first if it is large and compresses (opening gives back `raw`, byte for byte).
 */
export function sealPayload(raw: Buffer, k: SealingKey, binding: PayloadBinding): SealedPayload {
  if (raw.length >= k.compressFrom) {
    const packed = compress(raw);
    if (packed.length < raw.length) {
      const packing: Packing = { encoding: 'br', rawBytes: raw.length };
      return { ...encrypt(packed, k, payloadAad(binding, packing)), ...packing };
    }
  }
  return encrypt(raw, k, payloadAad(binding));
}

/** AES-256-GCM over `plain` (what is stored: the raw bytes, or their packing) with a fresh random nonce, bound to `aad`. */
function encrypt(plain: Buffer, k: Pick<SealingKey, 'keyId' | 'key'>, aad: Buffer): SealedPayload {
  const nonce = randomBytesFromPool(NONCE_BYTES);
  const cipher = createCipheriv('aes-256-gcm', k.key, nonce);
  cipher.setAAD(aad);
  const out = Buffer.allocUnsafeSlow(plain.length + TAG_BYTES);
  let n = 0;
  for (let at = 0; at < plain.length; at += SLICE_BYTES) n += cipher.update(plain.subarray(at, at + SLICE_BYTES)).copy(out, n);
  const tail = cipher.final();
  tail.copy(out, n);
  cipher.getAuthTag().copy(out, n + tail.length);
  return { keyId: k.keyId, nonce, ciphertext: out };
}

/**
 * AES-256-GCM with random 96-bit nonces (NIST SP 800-38D §8.3 bound: rotate `current`
 * before ~2^32 payloads under one key). Old keys stay to decrypt old rows.
 */
export class PayloadCipher {
  readonly sealingKey: SealingKey;

  constructor(
    private readonly keys: ReadonlyMap<string, Buffer>,
    readonly currentKeyId: string,
    /** limits.compressBodyBytes: 0 or absent = never compress. */
    compressBodyBytes = 0,
  ) {
    const current = keys.get(currentKeyId);
    if (!current) throw new Error(`current payload key "${currentKeyId}" is not among the keys`);
    for (const [id, k] of keys) if (k.length !== 32) throw new Error(`payload key "${id}" must be 32 bytes`);
    // Its own copy: a Buffer decoded from base64 may share a pooled slab, and a clone sent to a
    // thread would carry the whole slab.
    this.sealingKey = { keyId: currentKeyId, key: new Uint8Array(current), compressFrom: compressBodyBytes > 0 ? compressBodyBytes : Infinity };
  }

  seal(raw: Buffer, binding: PayloadBinding): SealedPayload {
    return sealPayload(raw, this.sealingKey, binding);
  }

  has(keyId: string): boolean {
    return this.keys.has(keyId);
  }

  /** The exact raw bytes. Throws if the key is unknown or the ciphertext/binding does not authenticate. */
  open(sealed: SealedPayload, binding: PayloadBinding): Buffer {
    const plain = this.decrypt(sealed, binding);
    // Authenticated above: these are bytes this receiver compressed, not a stranger's input.
    if (sealed.encoding !== 'br') return plain;
    const raw = brotliDecompressSync(plain, { maxOutputLength: Math.max(1, sealed.rawBytes!) });
    if (raw.length !== sealed.rawBytes) throw new Error('decompressed payload has the wrong size');
    return raw;
  }

  /**
   * The same payload sealed again under the current key (key rotation: `keys reseal`): a fresh
   * nonce, the same binding and packing, so it opens to the same raw bytes and its row's
   * payload_hash still holds. A compressed payload stays compressed: it is never unpacked here.
   */
  reseal(sealed: SealedPayload, binding: PayloadBinding): SealedPayload {
    const plain = this.decrypt(sealed, binding);
    const packing = sealed.encoding ? { encoding: sealed.encoding, rawBytes: sealed.rawBytes! } : undefined;
    return { ...encrypt(plain, this.sealingKey, payloadAad(binding, packing)), ...packing };
  }

  /**
   * Small data that is not a webhook body (an effect's data: crypto/effect-data.ts), sealed under
   * the current key and bound to `aad`, which names what it belongs to.
   */
  sealData(plain: Buffer, aad: Buffer): SealedPayload {
    return encrypt(plain, this.sealingKey, aad);
  }

  /** What sealData sealed. Throws PayloadKeyMissingError, or when it does not authenticate under `aad`. */
  openData(sealed: SealedPayload, aad: Buffer): Buffer {
    return this.decryptWith(sealed, aad);
  }

  /** What was sealed (the raw bytes or their packing), once the tag authenticates it and its binding. */
  private decrypt(sealed: SealedPayload, binding: PayloadBinding): Buffer {
    return this.decryptWith(sealed, payloadAad(binding, sealed));
  }

  private decryptWith(sealed: SealedPayload, aad: Buffer): Buffer {
    const key = this.keys.get(sealed.keyId);
    if (!key) throw new PayloadKeyMissingError(sealed.keyId);
    // Always a full 16-byte tag: GCM would also check a truncated one (down to 4 bytes), so a stored
    // ciphertext cut short (an empty body's is its tag alone) could still authenticate.
    if (sealed.ciphertext.length < TAG_BYTES) throw new Error(`sealed payload shorter than its ${TAG_BYTES}-byte tag`);
    const body = sealed.ciphertext.subarray(0, sealed.ciphertext.length - TAG_BYTES);
    const tag = sealed.ciphertext.subarray(sealed.ciphertext.length - TAG_BYTES);
    const decipher = createDecipheriv('aes-256-gcm', key, sealed.nonce, { authTagLength: TAG_BYTES });
    decipher.setAAD(aad);
    decipher.setAuthTag(tag);
    return Buffer.concat([decipher.update(body), decipher.final()]);
  }
}

/** A payload sealed under a key id this cipher was not given. */
export class PayloadKeyMissingError extends Error {
  override readonly name = 'PayloadKeyMissingError';
  constructor(readonly keyId: string) {
    super(`payload key "${keyId}" is not configured`);
  }
}
