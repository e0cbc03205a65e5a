/**
 * Exact byte ranges inside a JSON document, without re-serialising anything.
 *
 * Used where one delivery carries several events (Adyen `notificationItems`): each event is stored
 * as the exact bytes the provider sent for it, i.e. a slice of the raw body. The scanner works on
 * bytes: every structural character of JSON (`{ } [ ] , : "` and `\`) is ASCII, and in UTF-8 no
 * byte of a multi-byte character is below 0x80, so multi-byte text can never be mistaken for
 * structure. Call it on a body that `JSON.parse` has already accepted; it still refuses (throws
 * JsonSliceError) anything structurally wrong rather than guessing, and never reads out of bounds.
 */

/** `[start, end)` byte offsets into the scanned buffer. */
export interface ByteRange {
  readonly start: number;
  readonly end: number;
}

export class JsonSliceError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'JsonSliceError';
  }
}

const QUOTE = 0x22;
const BACKSLASH = 0x5c;
const COMMA = 0x2c;
const COLON = 0x3a;
const OPEN_OBJECT = 0x7b;
const CLOSE_OBJECT = 0x7d;
const OPEN_ARRAY = 0x5b;
const CLOSE_ARRAY = 0x5d;

/** JSON whitespace is exactly these four bytes (RFC 8259 §2); anything else is not skipped. */
const isWs = (b: number | undefined) => b === 0x20 || b === 0x09 || b === 0x0a || b === 0x0d;

function skipWs(buf: Buffer, i: number): number {
  while (isWs(buf[i])) i++;
  return i;
}

function expect(buf: Buffer, i: number, byte: number, what: string): void {
  if (buf[i] !== byte) throw new JsonSliceError(`expected ${what} at byte ${i}`);
}

/** `i` is at an opening quote; returns the offset just past the closing quote. */
function skipString(buf: Buffer, i: number): number {
  expect(buf, i, QUOTE, 'a string');
  i++;
  for (;;) {
    const b = buf[i];
    if (b === undefined) throw new JsonSliceError('unterminated string');
    if (b === BACKSLASH) i += 2; // the escaped byte (`"`, `\`, `u`…) is never structure
    else if (b === QUOTE) return i + 1;
    else i++;
  }
}

/** `i` is at the first byte of a value; returns the offset just past its last byte. */
function skipValue(buf: Buffer, i: number): number {
  const first = buf[i];
  if (first === QUOTE) return skipString(buf, i);
  if (first === OPEN_OBJECT || first === OPEN_ARRAY) {
    // Nesting: only the depth matters here (JSON.parse has already checked the grammar), but
    // a close that does not match its opener is still refused.
    const stack: number[] = [];
    for (;;) {
      const b = buf[i];
      if (b === undefined) throw new JsonSliceError('unterminated object or array');
      if (b === QUOTE) {
        i = skipString(buf, i);
        continue;
      }
      if (b === OPEN_OBJECT) stack.push(CLOSE_OBJECT);
      else if (b === OPEN_ARRAY) stack.push(CLOSE_ARRAY);
      else if (b === CLOSE_OBJECT || b === CLOSE_ARRAY) {
        if (stack.pop() !== b) throw new JsonSliceError(`mismatched close at byte ${i}`);
        if (stack.length === 0) return i + 1;
      }
      i++;
    }
  }
  // A number or literal (true, false, null): up to the next delimiter.
  const start = i;
  for (;;) {
    const b = buf[i];
    if (b === undefined || isWs(b) || b === COMMA || b === CLOSE_OBJECT || b === CLOSE_ARRAY) break;
    if (b === QUOTE || b === OPEN_OBJECT || b === OPEN_ARRAY || b === COLON) throw new JsonSliceError(`unexpected byte ${b} at ${i}`);
    i++;
  }
  if (i === start) throw new JsonSliceError(`expected a value at byte ${start}`);
  return i;
}

/** The elements of the array starting at `i` (at `[`); returns their ranges and the offset past `]`. */
function arrayElements(buf: Buffer, i: number): { ranges: ByteRange[]; end: number } {
  expect(buf, i, OPEN_ARRAY, '[');
  const ranges: ByteRange[] = [];
  i = skipWs(buf, i + 1);
  if (buf[i] === CLOSE_ARRAY) return { ranges, end: i + 1 };
  for (;;) {
    const start = i;
    const end = skipValue(buf, i);
    ranges.push({ start, end });
    i = skipWs(buf, end);
    if (buf[i] === COMMA) {
      i = skipWs(buf, i + 1);
      continue;
    }
    expect(buf, i, CLOSE_ARRAY, '"," or "]"');
    return { ranges, end: i + 1 };
  }
}

/** Whether the first byte past JSON whitespace opens an array (any bytes: nothing is parsed). */
export function opensArray(buf: Buffer): boolean {
  return buf[skipWs(buf, 0)] === OPEN_ARRAY;
}

/**
 * The byte ranges of the elements of a document that is a top-level array (`[…]`), or null when
 * it is not an array. As everywhere here: call it on a body that `JSON.parse` has accepted.
 */
export function topLevelArray(buf: Buffer): ByteRange[] | null {
  if (!opensArray(buf)) return null;
  const { ranges, end } = arrayElements(buf, skipWs(buf, 0));
  if (skipWs(buf, end) !== buf.length) throw new JsonSliceError('bytes after the top-level array');
  return ranges;
}

export type MemberArray =
  | { readonly kind: 'array'; readonly elements: readonly ByteRange[] }
  | { readonly kind: 'absent' }
  | { readonly kind: 'not-array' }
  | { readonly kind: 'duplicate' };

/**
 * The byte ranges of the elements of the array that is member `key` of the top-level object.
 * Member names are compared after JSON unescaping (`"notification\u0049tems"` is
 * `notificationItems`, as JSON.parse sees it). A member that appears twice is reported as
 * `duplicate`: JSON.parse keeps the last one, other parsers the first, so no slice is safe.
 */
export function topLevelArrayElements(buf: Buffer, key: string): MemberArray {
  let i = skipWs(buf, 0);
  expect(buf, i, OPEN_OBJECT, 'a top-level object');
  i = skipWs(buf, i + 1);
  let found: MemberArray = { kind: 'absent' };
  let seen = false;
  let duplicate = false;
  if (buf[i] !== CLOSE_OBJECT) {
    for (;;) {
      const nameEnd = skipString(buf, i);
      // Unescape only when there is something to unescape (JSON.parse decodes exactly as the full parse did).
      const raw = buf.toString('utf8', i, nameEnd);
      let name: unknown = raw.slice(1, -1);
      if (raw.includes('\\')) {
        try {
          name = JSON.parse(raw);
        } catch {
          throw new JsonSliceError(`bad escape in a member name at byte ${i}`);
        }
      }
      i = skipWs(buf, nameEnd);
      expect(buf, i, COLON, '":"');
      i = skipWs(buf, i + 1);
      let end: number;
      if (name === key) {
        if (seen) duplicate = true;
        seen = true;
        if (buf[i] === OPEN_ARRAY) {
          const a = arrayElements(buf, i);
          found = { kind: 'array', elements: a.ranges };
          end = a.end;
        } else {
          found = { kind: 'not-array' };
          end = skipValue(buf, i);
        }
      } else {
        end = skipValue(buf, i);
      }
      i = skipWs(buf, end);
      if (buf[i] === COMMA) {
        i = skipWs(buf, i + 1);
        continue;
      }
      expect(buf, i, CLOSE_OBJECT, '"," or "}"');
      break;
    }
  }
  if (skipWs(buf, i + 1) !== buf.length) throw new JsonSliceError('bytes after the top-level object');
  return duplicate ? { kind: 'duplicate' } : found;
}

/**
 * The offset of the first key that repeats one before it in the same object, in text that
 * JSON.parse accepted; undefined when none does. Keys compare as parsed ("a" and "\u0061" are equal).
 */
export function duplicateKeyOffset(text: string): number | undefined {
  // Per open container: the keys seen (objects) or null (arrays); expectKey while a key may come next.
  const stack: (Set<string> | null)[] = [];
  let expectKey = false;
  for (let i = 0; i < text.length; i++) {
    const c = text[i];
    if (c === '"') {
      let j = i + 1;
      while (text[j] !== '"') j += text[j] === '\\' ? 2 : 1;
      const top = stack[stack.length - 1];
      if (expectKey && top) {
        const key = JSON.parse(text.slice(i, j + 1)) as string;
        if (top.has(key)) return i;
        top.add(key);
      }
      expectKey = false;
      i = j;
    } else if (c === '{') {
      stack.push(new Set());
      expectKey = true;
    } else if (c === '[') {
      stack.push(null);
    } else if (c === '}' || c === ']') {
      stack.pop();
    } else if (c === ',') {
      expectKey = stack[stack.length - 1] != null;
    }
  }
  return undefined;
}
