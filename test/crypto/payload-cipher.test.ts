import { createDecipheriv, randomBytes } from 'node:crypto';
import { MessageChannel, receiveMessageOnPort } from 'node:worker_threads';
import { describe, expect, it } from 'vitest';
import { PayloadCipher, PayloadKeyMissingError, payloadAad, sealPayload, type SealingKey } from '../../src/crypto/payload-cipher.js';
import { uuidv7 } from '../../src/crypto/ids.js';

const k1 = Buffer.alloc(32, 1);
const k2 = Buffer.alloc(32, 2);
const bind = (id: string) => ({ provider: 'stripe', endpointId: 'ep', providerEventId: id });

describe('payload encryption', () => {
  it('round-trips the exact bytes, including invalid UTF-8', () => {
    const c = new PayloadCipher(new Map([['k1', k1]]), 'k1');
    const raw = Buffer.from([0x7b, 0xff, 0xfe, 0x00, 0xc3, 0xa9, 0x7d]);
    const sealed = c.seal(raw, bind('a'));
    expect(sealed.keyId).toBe('k1');
    expect(sealed.ciphertext.includes(raw)).toBe(false);
    expect(c.open(sealed, bind('a')).equals(raw)).toBe(true);
  });

  it('seals large bodies in slices as one standard AES-256-GCM message (ciphertext ‖ 16-byte tag)', () => {
    const c = new PayloadCipher(new Map([['k1', k1]]), 'k1');
    // Sizes around the 64 KiB slice edges and a 1 MiB body; each decrypted in ONE call by plain node:crypto.
    for (const size of [0, 65_535, 65_536, 65_537, 200_003, 1024 * 1024]) {
      const raw = randomBytes(size);
      const sealed = c.seal(raw, bind('big'));
      expect(sealed.ciphertext.length).toBe(size + 16);
      const d = createDecipheriv('aes-256-gcm', k1, sealed.nonce);
      d.setAAD(payloadAad(bind('big')));
      d.setAuthTag(sealed.ciphertext.subarray(size));
      expect(Buffer.concat([d.update(sealed.ciphertext.subarray(0, size)), d.final()]).equals(raw)).toBe(true);
      expect(c.open(sealed, bind('big')).equals(raw)).toBe(true);
    }
  });

  it('refuses a ciphertext moved to another row (associated data binds the unique key)', () => {
    const c = new PayloadCipher(new Map([['k1', k1]]), 'k1');
    const sealed = c.seal(Buffer.from('{"amount":1}'), bind('evt_a'));
    expect(() => c.open(sealed, bind('evt_b'))).toThrow();
    expect(() => c.open(sealed, { ...bind('evt_a'), endpointId: 'other' })).toThrow();
  });

  it('refuses a tampered ciphertext', () => {
    const c = new PayloadCipher(new Map([['k1', k1]]), 'k1');
    const sealed = c.seal(Buffer.from('{"amount":1}'), bind('a'));
    sealed.ciphertext[0]! ^= 1;
    expect(() => c.open(sealed, bind('a'))).toThrow();
  });

  // GCM checks a tag cut down to as few as 4 bytes unless told its length: an empty body's
  // ciphertext is its 16-byte tag alone, and its first 4 bytes opened as the whole payload.
  it('refuses a stored ciphertext cut short of its 16-byte tag', () => {
    const c = new PayloadCipher(new Map([['k1', k1]]), 'k1');
    const sealed = c.seal(Buffer.alloc(0), bind('empty'));
    expect(sealed.ciphertext.length).toBe(16);
    expect(c.open(sealed, bind('empty')).length).toBe(0);
    for (const n of [4, 8, 12, 15]) {
      expect(() => c.open({ ...sealed, ciphertext: Buffer.from(sealed.ciphertext.subarray(0, n)) }, bind('empty')), `${n} bytes`).toThrow();
    }
  });

  it('encrypts with the current key and still decrypts rows written under an older key', () => {
    const old = new PayloadCipher(new Map([['k1', k1]]), 'k1');
    const rotated = new PayloadCipher(new Map([['k1', k1], ['k2', k2]]), 'k2');
    const oldRow = old.seal(Buffer.from('old'), bind('a'));
    const newRow = rotated.seal(Buffer.from('new'), bind('b'));
    expect(newRow.keyId).toBe('k2');
    expect(rotated.open(oldRow, bind('a')).toString()).toBe('old');
    expect(() => old.open(newRow, bind('b'))).toThrow(/k2/);
  });

  it('never reuses a nonce', () => {
    const c = new PayloadCipher(new Map([['k1', k1]]), 'k1');
    const nonces = new Set(Array.from({ length: 5000 }, () => c.seal(Buffer.from('x'), bind('a')).nonce.toString('hex')));
    expect(nonces.size).toBe(5000);
  });

  it('a sealed payload crosses to another thread as its own bytes only (the nonce is no view on a shared allocation pool)', () => {
    // The SQLite writer is a thread: a message clones the whole ArrayBuffer behind each view.
    const c = new PayloadCipher(new Map([['k1', k1]]), 'k1');
    const sealed = c.seal(Buffer.from('{"id":"evt_thread"}'), bind('evt_thread'));
    const { port1, port2 } = new MessageChannel();
    port1.postMessage(sealed);
    const got = receiveMessageOnPort(port2)!.message as { keyId: string; nonce: Uint8Array; ciphertext: Uint8Array };
    port1.close();
    expect(got.nonce.buffer.byteLength).toBe(12);
    expect(c.open({ keyId: got.keyId, nonce: Buffer.from(got.nonce), ciphertext: Buffer.from(got.ciphertext) }, bind('evt_thread')).toString()).toBe('{"id":"evt_thread"}');
  });

  it('a thread that seals (the offload lane) gets the current key alone, as its own 32 bytes, and its payloads open here', () => {
    // Keys decoded from base64 are small Buffers that share a pooled slab with other allocations.
    const pooled = (b: Buffer) => Buffer.from(b.toString('base64'), 'base64');
    const c = new PayloadCipher(new Map([['k1', pooled(k1)], ['k2', pooled(k2)]]), 'k2');
    expect(pooled(k1).buffer.byteLength).toBeGreaterThan(32);
    const { port1, port2 } = new MessageChannel();
    port1.postMessage(c.sealingKey);
    const got = receiveMessageOnPort(port2)!.message as SealingKey;
    port1.close();
    expect(got.keyId).toBe('k2');
    expect(got.key.buffer.byteLength).toBe(32);
    expect(Buffer.from(got.key).equals(k2)).toBe(true);
    const sealed = sealPayload(Buffer.from('{"id":"evt_lane"}'), got, bind('evt_lane'));
    expect(sealed.keyId).toBe('k2');
    expect(c.open(sealed, bind('evt_lane')).toString()).toBe('{"id":"evt_lane"}');
  });

  it('compresses a body of compressBodyBytes or more before sealing it, and opening gives back the exact bytes', () => {
    const c = new PayloadCipher(new Map([['k1', k1]]), 'k1', 4096);
    const json = Buffer.from(JSON.stringify({ items: Array.from({ length: 400 }, (_, i) => ({ id: `li_${i}`, amount: i * 7, note: 'é ✓' })) }));
    const sealed = c.seal(json, bind('big'));
    expect(sealed.encoding).toBe('br');
    expect(sealed.rawBytes).toBe(json.length);
    expect(sealed.ciphertext.length).toBeLessThan(json.length / 4);
    expect(c.open(sealed, bind('big')).equals(json)).toBe(true);
    // Below the threshold, and with compression off, the exact bytes are sealed as they are.
    const small = json.subarray(0, 4095);
    expect(c.seal(small, bind('small'))).not.toHaveProperty('encoding');
    const off = new PayloadCipher(new Map([['k1', k1]]), 'k1', 0).seal(json, bind('big'));
    expect(off).not.toHaveProperty('encoding');
    expect(off.ciphertext.length).toBe(json.length + 16);
  });

  it('a large body that does not compress is sealed as it is', () => {
    const c = new PayloadCipher(new Map([['k1', k1]]), 'k1', 4096);
    const noise = randomBytes(100_000);
    const sealed = c.seal(noise, bind('noise'));
    expect(sealed).not.toHaveProperty('encoding');
    expect(sealed.ciphertext.length).toBe(noise.length + 16);
    expect(c.open(sealed, bind('noise')).equals(noise)).toBe(true);
  });

  it('refuses a compressed payload whose encoding or raw size was changed (both are bound), and one moved to another row', () => {
    const c = new PayloadCipher(new Map([['k1', k1]]), 'k1', 1024);
    const sealed = c.seal(Buffer.from('{"a":"'.concat('x'.repeat(5000), '"}')), bind('evt_a'));
    expect(sealed.encoding).toBe('br');
    expect(() => c.open({ ...sealed, encoding: undefined, rawBytes: undefined }, bind('evt_a'))).toThrow();
    expect(() => c.open({ ...sealed, rawBytes: sealed.rawBytes! + 1 }, bind('evt_a'))).toThrow();
    expect(() => c.open(sealed, bind('evt_b'))).toThrow();
    // An uncompressed payload cannot be passed off as compressed either.
    const plain = c.seal(Buffer.from('{"a":1}'), bind('evt_a'));
    expect(() => c.open({ ...plain, encoding: 'br', rawBytes: 7 }, bind('evt_a'))).toThrow();
  });

  it('reseal (key rotation): the same bytes under the current key and a fresh nonce, a compressed one still compressed', () => {
    const old = new PayloadCipher(new Map([['k1', k1]]), 'k1', 1024);
    const rotated = new PayloadCipher(new Map([['k1', k1], ['k2', k2]]), 'k2', 1024);
    const onlyNew = new PayloadCipher(new Map([['k2', k2]]), 'k2');
    const small = Buffer.from('{"amount":1,"note":"é"}');
    const big = Buffer.from(JSON.stringify({ items: Array.from({ length: 300 }, (_, i) => ({ id: `li_${i}` })) }));
    for (const [raw, id] of [[small, 'evt_s'], [big, 'evt_b']] as const) {
      const before = old.seal(raw, bind(id));
      const after = rotated.reseal(before, bind(id));
      expect(after.keyId).toBe('k2');
      expect(after.nonce.equals(before.nonce)).toBe(false);
      expect(after.encoding).toBe(before.encoding);
      expect(after.rawBytes).toBe(before.rawBytes);
      expect(after.ciphertext.length).toBe(before.ciphertext.length); // the packed bytes, never unpacked and packed again
      expect(onlyNew.open(after, bind(id)).equals(raw)).toBe(true);
      expect(() => rotated.reseal(before, bind('another_row'))).toThrow(); // the binding still authenticates first
    }
    expect(old.seal(big, bind('x')).encoding).toBe('br');
  });

  it('opening or resealing under a key it was not given says which key is missing', () => {
    const sealed = new PayloadCipher(new Map([['k0', k1]]), 'k0').seal(Buffer.from('{}'), bind('a'));
    const c = new PayloadCipher(new Map([['k2', k2]]), 'k2');
    expect(() => c.reseal(sealed, bind('a'))).toThrow(PayloadKeyMissingError);
    expect(() => c.open(sealed, bind('a'))).toThrow('payload key "k0" is not configured');
  });

  it('rejects keys that are not 32 bytes and a current id that is not a key', () => {
    expect(() => new PayloadCipher(new Map([['k1', Buffer.alloc(16)]]), 'k1')).toThrow(/32 bytes/);
    expect(() => new PayloadCipher(new Map([['k1', k1]]), 'k9')).toThrow(/k9/);
  });
});

describe('uuidv7', () => {
  it('is a valid, time-ordered v7 UUID', () => {
    const a = uuidv7(1_800_000_000_000);
    const b = uuidv7(1_800_000_000_001);
    expect(a).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
    expect(a < b).toBe(true);
    expect(parseInt(a.replace(/-/g, '').slice(0, 12), 16)).toBe(1_800_000_000_000);
  });

  it('gives distinct ids within one millisecond, each with its own random bits, across pool refills', () => {
    // 1,000 ids take 16,000 random bytes: the 4 KiB pool is refilled several times on the way.
    const ids = Array.from({ length: 1000 }, () => uuidv7(1_800_000_000_000));
    expect(new Set(ids).size).toBe(1000);
    for (const id of ids) {
      expect(id).toMatch(/^01a3185c-5000-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
    }
    // The 74 random bits vary: every hex digit position after the version shows several values.
    const tails = ids.map((id) => id.replace(/-/g, '').slice(13));
    for (let k = 0; k < 19; k++) expect(new Set(tails.map((t) => t[k])).size).toBeGreaterThan(2);
  });
});
