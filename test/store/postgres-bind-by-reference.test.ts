import pg from 'pg';
import { createRequire } from 'node:module';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { acceptValues, queryOn } from '../../src/store/postgres/accept.js';
import { bindChunks, BindByReferenceQuery } from '../../src/store/postgres/bind-by-reference.js';
import { PG_ADMIN_URL, pgAvailable } from '../helpers/pg.js';
import { record } from '../helpers/records.js';

/** pg's own connection class (its types leave it out). */
const Connection = createRequire(import.meta.url)('pg/lib/connection.js') as new (c: object) => { parsedStatements: Record<string, string> };

/**
 * The bytes a query writes to its connection, through pg's own Connection over a stream that
 * only records: what `submit` sends (Parse when the statement is new on the connection, then
 * Bind, Describe, Execute, Sync), as chunks.
 */
function wire(query: { submit(c: unknown): unknown }, parsedAlready = false): Buffer[] {
  const written: Buffer[] = [];
  const stream = { writable: true, cork() {}, uncork() {}, write: (b: Buffer) => written.push(b) > 0, on() {} };
  const connection = new Connection({ stream });
  if (parsedAlready) connection.parsedStatements[(query as unknown as { name: string }).name] = (query as unknown as { text: string }).text;
  expect(query.submit(connection)).toBeNull();
  return written;
}
const asPgSendsIt = (config: pg.QueryConfig, parsed = false) => Buffer.concat(wire(new pg.Query(config) as never, parsed));
const byReference = (config: pg.QueryConfig & { name: string }, parsed = false) => Buffer.concat(wire(new BindByReferenceQuery(config) as never, parsed));

describe('the accept Bind sent by reference', () => {
  const big = Buffer.alloc(20_000, 0xab);
  const small = Buffer.from([1, 2, 3, 0, 255]);
  const underKiB = Buffer.alloc(1023, 7);
  const kib = Buffer.alloc(1024, 9);
  const mixed = ['ünïcødé ✓ 𝄞', 12.5, 1_733_456_789_123, true, false, null, undefined, '', small, big, Buffer.alloc(0), underKiB, kib];

  const text = 'SELECT ' + mixed.map((_, i) => `$${i + 1}`).join(', ');

  it('writes byte for byte what pg\'s own Query writes for the same values, with and without the Parse', () => {
    const config = { name: 'wi_accept_4', text, values: mixed };
    const pgBytes = asPgSendsIt(config);
    expect(pgBytes.length).toBeGreaterThan(big.length);
    expect(byReference(config)).toEqual(pgBytes);
    expect(byReference(config, true)).toEqual(asPgSendsIt(config, true));
    expect(byReference({ name: 's', text: 'SELECT 1', values: [] }, true)).toEqual(asPgSendsIt({ name: 's', text: 'SELECT 1', values: [] }, true));
  });

  it('writes byte for byte what pg writes for a batch of real accept records (sealed payloads, hashes, nulls, booleans)', () => {
    const values = [record('evt_1'), record('evt_2', '{"id":"evt_2","x":"ü"}', { objectId: 'ob_ü', relay: false })].flatMap(acceptValues);
    const config = { name: 'wi_accept_2', text: 'SELECT ' + values.map((_, i) => `$${i + 1}`).join(', '), values };
    expect(byReference(config, true)).toEqual(asPgSendsIt(config, true));
  });

  it('passes each Buffer of 1 KiB or more as the same object (no copy), and copies the small ones into one buffer', () => {
    const chunks = bindChunks('wi_accept_4', mixed);
    expect(chunks).toContain(big);
    expect(chunks).toContain(kib);
    expect(chunks).not.toContain(underKiB);
    expect(chunks).not.toContain(small);
    // The rest (header, lengths, small fields) are views of one allocation, none of them a parameter.
    const views = chunks.filter((c) => c !== big && c !== kib);
    expect(views).toHaveLength(3);
    expect(new Set(views.map((c) => c.buffer)).size).toBe(1);
    expect(views.some((c) => c.buffer === big.buffer || c.buffer === kib.buffer)).toBe(false);
  });

  it('refuses a value of another type before anything is written, naming the parameter', () => {
    expect(() => bindChunks('s', ['a', { x: 1 }])).toThrow(/parameter \$2: object/);
    expect(() => bindChunks('s', [10n])).toThrow(/parameter \$1: bigint/);
  });
});

describe.runIf(await pgAvailable())('the accept Bind sent by reference, on PostgreSQL', () => {
  let pool: pg.Pool;
  beforeAll(() => {
    pool = new pg.Pool({ connectionString: PG_ADMIN_URL, max: 1 });
  });
  afterAll(async () => {
    await pool?.end();
  });

  const ECHO = 'SELECT $1::text AS t, $2::bytea AS b, $3::float8 AS f, $4::boolean AS y, $5::int4 AS i, $6::bytea AS small';

  it('round-trips text, large and small binary, numbers, booleans and NULL, on a pool and on a client, parsing the statement once', async () => {
    const big = Buffer.from(Array.from({ length: 40_000 }, (_, i) => i % 251));
    const run = queryOn(pool);
    for (let i = 0; i < 3; i++) {
      const { rows } = await run<{ t: string; b: Buffer; f: number; y: boolean; i: number | null; small: Buffer }>(
        new BindByReferenceQuery({ name: 'bbr_echo', text: ECHO, values: ['𝄞 ü', big, 1.5 + i, i % 2 === 0, null, Buffer.from([i])] }),
      );
      expect(rows).toEqual([{ t: '𝄞 ü', b: big, f: 1.5 + i, y: i % 2 === 0, i: null, small: Buffer.from([i]) }]);
    }
    const client = await pool.connect();
    try {
      const { rows } = await queryOn(client)<{ t: string }>(new BindByReferenceQuery({ name: 'bbr_echo', text: ECHO, values: ['c', big, 0, true, 7, Buffer.alloc(0)] }));
      expect(rows[0]).toMatchObject({ t: 'c', i: 7, small: Buffer.alloc(0) });
      // The connection parsed it once: pg's bookkeeping of prepared statements still holds.
      const parsed = (client as unknown as { connection: { parsedStatements: Record<string, string> } }).connection.parsedStatements;
      expect(parsed['bbr_echo']).toBe(ECHO);
      const prepared = await client.query<{ n: string }>("SELECT count(*) AS n FROM pg_prepared_statements WHERE name = 'bbr_echo'");
      expect(prepared.rows[0]!.n).toBe('1');
    } finally {
      client.release();
    }
  });

  it('rejects on an error PostgreSQL raises, and the connection goes on answering', async () => {
    const run = queryOn(pool);
    await expect(run(new BindByReferenceQuery({ name: 'bbr_div', text: 'SELECT 1 / $1::int4 AS q', values: [0] }))).rejects.toThrow(/division by zero/);
    const { rows } = await run<{ q: number }>(new BindByReferenceQuery({ name: 'bbr_div', text: 'SELECT 1 / $1::int4 AS q', values: [1] }));
    expect(rows).toEqual([{ q: 1 }]);
  });

  it('rejects a value it cannot send without sending the query, and the connection goes on answering', async () => {
    const run = queryOn(pool);
    await expect(run(new BindByReferenceQuery({ name: 'bbr_bad', text: 'SELECT $1::text AS t', values: [{}] }))).rejects.toThrow(/parameter \$1: object/);
    const { rows } = await run<{ t: string }>(new BindByReferenceQuery({ name: 'bbr_bad', text: 'SELECT $1::text AS t', values: ['ok'] }));
    expect(rows).toEqual([{ t: 'ok' }]);
  });
});
