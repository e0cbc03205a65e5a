import { describe, expect, it } from 'vitest';
import { redact } from '../../src/engine/failure.js';

/** PostgreSQL's DatabaseError as the `pg` driver throws it: name "error", the SQLSTATE as `code`. */
const pgError = (message: string, code: string) => Object.assign(new Error(message), { name: 'error', code });

describe('redact: last_error says what failed, never the data it failed on', () => {
  it.each([
    ['invalid input syntax for type integer: "4242 4242 4242 4242"', '22P02', 'error [22P02]: invalid input syntax for type integer: "…"'],
    ['value "4242424242424242" is out of range for type integer', '22003', 'error [22003]: value "…" is out of range for type integer'],
    ['invalid input value for enum plan: "alice@example.com"', '22P02', 'error [22P02]: invalid input value for enum plan: "…"'],
    ['invalid input syntax for type uuid: "a"b"c"', '22P02', 'error [22P02]: invalid input syntax for type uuid: "…"'],
    ['invalid byte sequence for encoding "UTF8": 0xc3 0x28', '22021', 'error [22021]: invalid byte sequence for encoding "…": 0x…'],
  ])('a PostgreSQL data exception (class 22) loses the quoted value: %s', (message, code, want) => {
    expect(redact(pgError(message, code))).toBe(want);
  });

  it('other PostgreSQL errors name only schema objects, and keep them', () => {
    expect(redact(pgError('duplicate key value violates unique constraint "paid_orders_pkey"', '23505'))).toBe('error [23505]: duplicate key value violates unique constraint "paid_orders_pkey"');
    expect(redact(pgError('relation "paid_orders" does not exist', '42P01'))).toBe('error [42P01]: relation "paid_orders" does not exist');
  });

  it.each(['CARD 4242 4242 4242 4242', `${'x'.repeat(40)} CARD 4242 4242 ${'y'.repeat(40)}`, 'undefined'])('a JSON.parse failure loses its snippet of the input: %s', (input) => {
    let err: unknown;
    try {
      JSON.parse(input);
    } catch (e) {
      err = e;
    }
    const line = redact(err);
    expect(line).toMatch(/^SyntaxError: .*"…" is not valid JSON$/);
    expect(line).not.toMatch(/4242|CARD|xxx|undefined"/);
  });

  it('a message with neither kept as it is (one line, bounded)', () => {
    expect(redact(new Error('ledger service\ntimed out'))).toBe('Error: ledger service timed out');
    expect(redact(new Error('x'.repeat(600)))).toHaveLength(500);
  });
});
