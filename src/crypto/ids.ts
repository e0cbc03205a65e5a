import { randomFillSync } from 'node:crypto';

// Random bytes are drawn in blocks: one syscall serves ~400 ids on the hot path.
const POOL_SIZE = 4096;
const pool = Buffer.allocUnsafe(POOL_SIZE);
let offset = POOL_SIZE;

/** Fills `n` fresh random bytes from the shared pool (never reused). */
export function randomBytesFromPool(n: number): Buffer {
  if (offset + n > POOL_SIZE) {
    randomFillSync(pool);
    offset = 0;
  }
  const out = Buffer.from(pool.subarray(offset, offset + n));
  offset += n;
  return out;
}

const HEX: string[] = Array.from({ length: 256 }, (_, i) => i.toString(16).padStart(2, '0'));

/**
 * UUIDv7 (RFC 9562): 48-bit Unix milliseconds + 74 random bits. Time-ordered ids keep
 * B-tree inserts local (PostgreSQL `uuid`, SQLite TEXT) and sort by arrival.
 */
export function uuidv7(nowMs: number = Date.now()): string {
  const b = randomBytesFromPool(16);
  b[0] = Math.floor(nowMs / 2 ** 40) & 0xff;
  b[1] = Math.floor(nowMs / 2 ** 32) & 0xff;
  b[2] = (nowMs >>> 24) & 0xff;
  b[3] = (nowMs >>> 16) & 0xff;
  b[4] = (nowMs >>> 8) & 0xff;
  b[5] = nowMs & 0xff;
  b[6] = 0x70 | (b[6]! & 0x0f);
  b[8] = 0x80 | (b[8]! & 0x3f);
  let s = '';
  for (let i = 0; i < 16; i++) {
    if (i === 4 || i === 6 || i === 8 || i === 10) s += '-';
    s += HEX[b[i]!];
  }
  return s;
}
