import { describe, expect, it, vi } from 'vitest';
import { compilePaths, NON_SCALAR, scanJsonObject, type ScannedValue } from '../../src/providers/json-scan.js';
import { pathValue } from '../../src/providers/json.js';
import { PROVIDERS } from '../../src/providers/registry.js';

/** What the scanner must agree with: JSON.parse of the UTF-8 text, then the dotted paths. */
function reference(body: Buffer, paths: readonly string[]): ScannedValue[] | 'invalid' | 'not_object' {
  let v: unknown;
  try {
    v = JSON.parse(body.toString('utf8'));
  } catch {
    return 'invalid';
  }
  if (v === null || typeof v !== 'object' || Array.isArray(v)) return 'not_object';
  return paths.map((p) => {
    const x = pathValue(v, p);
    return x !== null && typeof x === 'object' ? NON_SCALAR : (x as ScannedValue);
  });
}

const PATHS = ['id', 'type', 'data.object.id', 'created', 'data.object'];
const compiled = compilePaths(PATHS);
const scan = (s: string | Buffer) => scanJsonObject(typeof s === 'string' ? Buffer.from(s, 'utf8') : s, compiled);

describe('json-scan: validates like JSON.parse, keeps only the paths', () => {
  it('reads the values at the paths of a Stripe-shaped event', () => {
    const body = '{"id":"evt_1","object":"event","created":1686089970,"type":"charge.refunded","data":{"object":{"id":"ch_1","amount":5,"refunds":[{"id":"re_1"}]}}}';
    expect(scan(body)).toEqual(['evt_1', 'charge.refunded', 'ch_1', 1686089970, NON_SCALAR]);
  });

  it.each([
    ['duplicate key: the last value wins', '{"id":"a","id":"b"}', ['b', undefined, undefined, undefined, undefined]],
    ['a later scalar replaces an object and what was under it', '{"data":{"object":{"id":"x"}},"data":1}', [undefined, undefined, undefined, undefined, undefined]],
    ['a later object replaces an earlier one', '{"data":{"object":{"id":"x"}},"data":{"other":{}}}', [undefined, undefined, undefined, undefined, undefined]],
    ['paths do not go through arrays', '{"data":[{"object":{"id":"x"}}]}', [undefined, undefined, undefined, undefined, undefined]],
    ['escaped keys match', '{"\\u0069d":"e1","typ\\u0065":"t"}', ['e1', 't', undefined, undefined, undefined]],
    ['escaped values are decoded', '{"id":"a\\"b\\\\c\\/d\\n\\u00e9\\ud83d\\ude00"}', ['a"b\\c/d\né😀', undefined, undefined, undefined, undefined]],
    ['a lone surrogate escape is kept, as JSON.parse does', '{"id":"\\ud800"}', ['\ud800', undefined, undefined, undefined, undefined]],
    ['multi-byte UTF-8 text', '{"id":"évt_ü_€_😀","type":"日本"}', ['évt_ü_€_😀', '日本', undefined, undefined, undefined]],
    ['literals and numbers', '{"id":null,"type":true,"created":-1.5e+3,"data":{"object":false}}', [null, true, undefined, -1500, false]],
    ['whitespace everywhere', ' \t\r\n{ "id" : "a" , "data" : { "object" : { } } } \n', ['a', undefined, undefined, undefined, NON_SCALAR]],
    ['empty containers', '{"a":{},"b":[],"c":[[]],"id":"x"}', ['x', undefined, undefined, undefined, undefined]],
    ['a key at another depth is not the path', '{"data":{"id":"inner","object":{"type":"deep"}},"x":{"id":"y"}}', [undefined, undefined, undefined, undefined, NON_SCALAR]],
    ['an escaped key at depth, and a later escaped duplicate wins', '{"d\\u0061ta":{"obj\\u0065ct":{"id":"a","\\u0069d":"b"}},"id":"x","i\\u0064":"y"}', ['y', undefined, 'b', undefined, NON_SCALAR]],
    ['NUL and escaped solidus', '{"id":"a\\u0000b\\/c"}', ['a\u0000b/c', undefined, undefined, undefined, undefined]],
    ['-0, 1.0 and exponents read as JSON.parse reads them', '{"id":-0,"type":1.0,"created":1E+0,"data":{"object":{"id":0.1e-400}}}', [-0, 1, 0, 1, NON_SCALAR]],
  ])('%s', (_, body, want) => {
    expect(scan(body)).toEqual(want);
    expect(scan(body)).toEqual(reference(Buffer.from(body), PATHS));
  });

  it('keeps an integer past ±2^53 exact (a bigint of its digits); other numbers as JSON.parse reads them', () => {
    const body = '{"id":9007199254740993,"type":-123456789012345678901234567890,"created":9007199254740991,"data":{"object":1.5e20}}';
    expect(scan(body)).toEqual([9007199254740993n, -123456789012345678901234567890n, undefined, 9007199254740991, 1.5e20]);
    // JSON.parse would have made the first the same number as its neighbour.
    expect(JSON.parse('{"id":9007199254740993}').id).toBe(9007199254740992);
    expect(scan('{"id":-9007199254740991}')).toEqual([-9007199254740991, undefined, undefined, undefined, undefined]);
    expect(scan('{"id":9007199254740992}')).toEqual([9007199254740992n, undefined, undefined, undefined, undefined]);
    // Not integer literals: read as numbers (rounded), as before.
    expect(scan('{"id":9007199254740993.0,"type":1e400}')).toEqual([9007199254740992, Infinity, undefined, undefined, undefined]);
  });

  it.each([
    ['empty', ''],
    ['whitespace only', ' \n'],
    ['a byte-order mark', '\ufeff{}'],
    ['trailing garbage', '{} x'],
    ['two documents', '{}{}'],
    ['trailing comma in an object', '{"a":1,}'],
    ['trailing comma in an array', '{"a":[1,]}'],
    ['leading comma', '{,"a":1}'],
    ['missing colon', '{"a" 1}'],
    ['unquoted key', '{a:1}'],
    ['single quotes', "{'a':1}"],
    ['unclosed object', '{"a":1'],
    ['unclosed string', '{"a":"x}'],
    ['unclosed array', '{"a":[1}'],
    ['mismatched close', '{"a":[1}]'],
    ['leading zero', '{"a":01}'],
    ['bare minus', '{"a":-}'],
    ['dot without digits', '{"a":1.}'],
    ['leading dot', '{"a":.5}'],
    ['exponent without digits', '{"a":1e}'],
    ['plus sign', '{"a":+1}'],
    ['hex number', '{"a":0x10}'],
    ['NaN', '{"a":NaN}'],
    ['raw tab inside a string', '{"a":"x\ty"}'],
    ['raw newline inside a string', '{"a":"x\ny"}'],
    ['unknown escape', '{"a":"\\x"}'],
    ['short unicode escape', '{"a":"\\u12"}'],
    ['bad unicode escape', '{"a":"\\u12G4"}'],
    ['truncated literal', '{"a":tru}'],
    ['capitalised literal', '{"a":True}'],
    ['comment', '{"a":1 /* x */}'],
    ['a vertical tab as white space', '{\v"a":1}'],
    ['a form feed as white space', '{"a":1\f}'],
    ['a no-break space as white space', '{\u00a0"a":1}'],
    ['a BOM after the object', '{"a":1}\ufeff'],
    ['a raw NUL inside a string', '{"a":"x\u0000"}'],
  ])('invalid: %s', (_, body) => {
    expect(scan(body)).toBe('invalid');
    expect(reference(Buffer.from(body), PATHS)).toBe('invalid');
  });

  it.each([['an array', '[{"id":"x"}]'], ['a string', '"x"'], ['a number', ' 1 '], ['null', 'null']])('valid JSON but %s at the top: not_object', (_, body) => {
    expect(scan(body)).toBe('not_object');
  });

  it('invalid UTF-8 inside a string is replaced as toString does', () => {
    const body = Buffer.concat([Buffer.from('{"id":"a'), Buffer.from([0xff, 0xc3]), Buffer.from('","type":"t\xe9"}', 'latin1')]);
    expect(scan(body)).toEqual(reference(body, PATHS));
    expect((scan(body) as ScannedValue[])[0]).toBe('a\ufffd\ufffd');
  });

  it('reads a Buffer that is a view into a larger allocation', () => {
    const big = Buffer.from('xxxx{"id":"inner"}yyyy');
    expect(scan(big.subarray(4, big.length - 4))).toEqual(['inner', undefined, undefined, undefined, undefined]);
  });

  it('deep nesting needs no recursion', () => {
    const body = `{"a":${'['.repeat(100_000)}${']'.repeat(100_000)},"id":"deep"}`;
    expect((scan(body) as ScannedValue[])[0]).toBe('deep');
  });

  it('refuses paths into arrays when compiled, since it does not follow them', () => {
    expect(() => compilePaths(['items.0.id'])).toThrow(/segment "0"/);
    expect(() => compilePaths(['items.length'])).toThrow(/segment "length"/);
    expect(() => compilePaths(['a..b'])).toThrow(/segment ""/);
  });

  // Differential check: random documents and random damage to them, against JSON.parse.
  it('agrees with JSON.parse + pathValue on 20,000 random and damaged documents', () => {
    let seed = 0x2545f491;
    const rnd = () => {
      seed ^= seed << 13;
      seed ^= seed >>> 17;
      seed ^= seed << 5;
      return (seed >>> 0) / 2 ** 32;
    };
    const pick = <T>(xs: readonly T[]): T => xs[Math.floor(rnd() * xs.length)]!;
    // Now and then a character that is white space elsewhere but not in JSON (\v, \f, NBSP, a BOM).
    const ws = () => (rnd() < 0.01 ? pick(['\v', '\f', '\u00a0', '\ufeff']) : pick(['', '', '', ' ', '\n', '\t', '\r\n  ']));
    const KEYS = ['id', 'type', 'data', 'object', 'created', 'x', 'id', '\\u0069d', 'i\\u0064', 'da\\u0074a', 'ïd', '', '\\u0000', '__proto__'];
    const STRINGS = ['', 'evt_1', 'a\\"b', '\\\\', '\\/', '\\u00e9', '\\ud83d\\ude00', 'é€😀', '\\n\\t\\b\\f\\r', 'x y', '\\u0000', '\\ud800', '\\udc00\\ud800', '\\uDBFF\\uDFFF', '\u2028\u007f'];
    const NUMBERS = ['0', '-0', '1', '-12', '3.25', '1e5', '1E-2', '-0.5e+3', '123456789012345678901234567890', '1e400', '9007199254740993', '-9007199254740993', '1.0', '1E+0', '5e-324', '0.1e-400'];
    const value = (depth: number): string => {
      const r = rnd();
      if (depth < 5 && r < 0.3) {
        const n = Math.floor(rnd() * 4);
        const members = Array.from({ length: n }, () => `${ws()}"${pick(KEYS)}"${ws()}:${ws()}${value(depth + 1)}${ws()}`);
        return `{${members.join(',')}${n === 0 ? ws() : ''}}`;
      }
      if (depth < 5 && r < 0.4) return `[${Array.from({ length: Math.floor(rnd() * 3) }, () => `${ws()}${value(depth + 1)}${ws()}`).join(',')}]`;
      if (r < 0.7) return `"${pick(STRINGS)}"`;
      if (r < 0.9) return pick(NUMBERS);
      return pick(['true', 'false', 'null']);
    };
    const NOISE = [...'{}[],:"\\ \t\n0123456789-+.eEtfnux/\''].map((c) => c.charCodeAt(0)).concat([0x00, 0x0b, 0x0c, 0x1f, 0x7f, 0x80, 0xa0, 0xc3, 0xed, 0xef, 0xbb, 0xbf, 0xf0, 0xff]);
    let invalid = 0;
    let notObject = 0;
    for (let k = 0; k < 20_000; k++) {
      const members = Array.from({ length: 1 + Math.floor(rnd() * 5) }, () => `"${pick(KEYS)}":${value(0)}`);
      let bytes = Buffer.from(`${ws()}{${members.join(',')}}${ws()}`, 'utf8');
      const damage = Math.floor(rnd() * 3); // 0: intact; 1-2 edits
      for (let d = 0; d < damage && bytes.length > 0; d++) {
        const at = Math.floor(rnd() * bytes.length);
        const op = rnd();
        if (op < 0.33) bytes = Buffer.concat([bytes.subarray(0, at), bytes.subarray(at + 1)]);
        else if (op < 0.66) bytes = Buffer.concat([bytes.subarray(0, at), Buffer.from([pick(NOISE)]), bytes.subarray(at)]);
        else bytes = Buffer.concat([bytes.subarray(0, at), Buffer.from([pick(NOISE)]), bytes.subarray(at + 1)]);
      }
      const want = reference(bytes, PATHS);
      if (want === 'invalid') invalid++;
      if (want === 'not_object') notObject++;
      const got = scanJsonObject(bytes, compiled);
      // A bigint (an integer literal past ±2^53, kept exact) must be what JSON.parse rounds to the same double.
      const plain = (_: string, v: unknown) => (v === NON_SCALAR ? '<object>' : v === undefined ? '<undefined>' : typeof v === 'bigint' ? Number(v) : v);
      if (JSON.stringify(got, plain) !== JSON.stringify(want, plain)) {
        expect({ body: bytes.toString('latin1'), got }).toEqual({ body: bytes.toString('latin1'), got: want });
      }
    }
    // The damage must have produced both kinds of case, or the check proves little.
    expect(invalid).toBeGreaterThan(3_000);
    expect(20_000 - invalid - notObject).toBeGreaterThan(8_000);
  });
  // The same check on what providers really send: each adapter's own sample event, damaged at the
  // byte level, read at the paths the JSON adapters use.
  it('agrees with JSON.parse + pathValue on 5,000 damaged provider sample bodies', () => {
    const options: Record<string, Record<string, unknown>> = {
      'generic-hmac': { signatureHeader: 'x-signature', idPath: 'id' },
      square: { publicUrl: 'https://hooks.example.com/square' },
      twilio: { publicUrl: 'https://hooks.example.com/twilio' },
    };
    // Some samples carry the current time: a fixed clock keeps the bodies, and so the run, the same.
    vi.useFakeTimers({ toFake: ['Date'], now: Date.UTC(2026, 0, 2, 3, 4, 5, 6) });
    let samples: Buffer[];
    try {
      samples = Object.entries(PROVIDERS)
        .map(([name, create]) => create(options[name], 'x').sample('42').body)
        .filter((b) => b[0] === 0x7b);
    } finally {
      vi.useRealTimers();
    }
    expect(samples.length).toBeGreaterThan(8);
    const paths = ['id', 'type', 'data.id', 'data.object.id', 'created', 'event_id', 'event_type', 'occurred_at', 'resource.id', 'create_time', 'entityId', 'createdAt', 'timestamp', 'repository.full_name', 'event.type', 'data'];
    const sampleCompiled = compilePaths(paths);
    let seed = 0x9e3779b9;
    const rnd = () => {
      seed ^= seed << 13;
      seed ^= seed >>> 17;
      seed ^= seed << 5;
      return (seed >>> 0) / 2 ** 32;
    };
    const NOISE = [...'{}[],:"\\ \t\n0123456789-+.eEtfnux/\''].map((c) => c.charCodeAt(0)).concat([0x00, 0x0b, 0x0c, 0x7f, 0x80, 0xa0, 0xc3, 0xef, 0xff]);
    const plain = (_: string, v: unknown) => (v === NON_SCALAR ? '<object>' : v === undefined ? '<undefined>' : typeof v === 'bigint' ? Number(v) : v);
    let valid = 0;
    for (let k = 0; k < 5_000; k++) {
      let bytes = samples[k % samples.length]!;
      const damage = 1 + Math.floor(rnd() * 2);
      for (let d = 0; d < damage; d++) {
        const at = Math.floor(rnd() * bytes.length);
        const op = rnd();
        const noise = Buffer.from([NOISE[Math.floor(rnd() * NOISE.length)]!]);
        if (op < 0.25) bytes = Buffer.concat([bytes.subarray(0, at), bytes.subarray(at + 1)]);
        else if (op < 0.5) bytes = Buffer.concat([bytes.subarray(0, at), noise, bytes.subarray(at)]);
        else if (op < 0.75) bytes = Buffer.concat([bytes.subarray(0, at), noise, bytes.subarray(at + 1)]);
        else bytes = Buffer.concat([bytes.subarray(0, at), bytes.subarray(at, at + 1 + Math.floor(rnd() * 12)), bytes.subarray(at)]); // a run repeated
      }
      const want = reference(bytes, paths);
      if (typeof want !== 'string') valid++;
      const got = scanJsonObject(bytes, sampleCompiled);
      if (JSON.stringify(got, plain) !== JSON.stringify(want, plain)) {
        expect({ body: bytes.toString('latin1'), got }).toEqual({ body: bytes.toString('latin1'), got: want });
      }
    }
    expect(valid).toBeGreaterThan(500);
  });
});
