import pg from 'pg';

/**
 * The accept statement's Bind message with every large Buffer parameter (the ciphertexts) sent
 * by reference: the socket's writev takes them as they are.
 *
 * Why: pg-protocol serialises a Bind into one buffer that starts at 256 bytes and grows by half
 * at a time, copying what it holds at each step, and starts from 256 again for the next query.
 * A batch of 88 ten-KiB ciphertexts (PostgreSQL at 5,000 req/s) took ~20 growths, copying and
 * allocating about three times its bytes on the event loop. Here the small fields share one
 * buffer sized in advance and each ciphertext is copied once, by the kernel's write.
 *
 * The bytes on the wire are exactly those pg's own Query writes for the same values
 * (test/store/postgres-bind-by-reference.test.ts compares them through pg's Connection), for the
 * value types an accept has: null/undefined, string, number, boolean, Buffer. Anything else
 * throws before a byte is written.
 */
const BY_REFERENCE_BYTES = 1024;

/** The longest `String(n)` of a number ("-2.2250738585072014e-308") or a boolean. */
const MAX_NUMBER_CHARS = 24;

/** Bytes of a text parameter: what `buf.write` returns, at most 3 per UTF-16 unit. */
const textBound = (v: string) => 3 * v.length;

/**
 * The Bind message ('B') binding `values` to the prepared `statement`, unnamed portal, text
 * results, as chunks whose concatenation is the message. One pass sizes the copied part from
 * above (no byteLength pass over every string), one writes it, backfilling each text length.
 */
export function bindChunks(statement: string, values: readonly unknown[]): Buffer[] {
  const n = values.length;
  if (n > 0xffff) throw new RangeError(`${n} parameters: the protocol allows 65,535`);
  // code + length + portal "" NUL + statement NUL + format count + formats + value count + lengths + result format count + result format
  let bound = 1 + 4 + 1 + textBound(statement) + 1 + 2 + 2 * n + 2 + 4 * n + 2 + 2;
  let large = 0;
  for (let i = 0; i < n; i++) {
    const v = values[i];
    if (v === null || v === undefined) continue;
    if (typeof v === 'string') bound += textBound(v);
    else if (typeof v === 'number' || typeof v === 'boolean') bound += MAX_NUMBER_CHARS;
    else if (Buffer.isBuffer(v)) {
      if (v.length >= BY_REFERENCE_BYTES) large += v.length;
      else bound += v.length;
    } else {
      throw new TypeError(`accept parameter $${i + 1}: ${typeof v} is not a string, number, boolean, Buffer or null`);
    }
  }
  const buf = Buffer.allocUnsafe(bound);
  const chunks: Buffer[] = [];
  let at = 0;
  let from = 0;
  buf[at++] = 0x42; // 'B'; its length is backfilled at 1
  at += 4;
  buf[at++] = 0; // portal ""
  at += buf.write(statement, at, 'utf8');
  buf[at++] = 0;
  at = buf.writeInt16BE(n, at);
  // Format codes: binary for Buffers, text for the rest (pg's choice for the same values).
  for (let i = 0; i < n; i++) at = buf.writeInt16BE(Buffer.isBuffer(values[i]) ? 1 : 0, at);
  at = buf.writeInt16BE(n, at);
  for (let i = 0; i < n; i++) {
    const v = values[i];
    if (v === null || v === undefined) {
      at = buf.writeInt32BE(-1, at);
    } else if (Buffer.isBuffer(v)) {
      at = buf.writeInt32BE(v.length, at);
      if (v.length >= BY_REFERENCE_BYTES) {
        chunks.push(buf.subarray(from, at), v);
        from = at;
      } else {
        at += v.copy(buf, at);
      }
    } else {
      // What pg's prepareValue sends for a string, a number or a boolean: val.toString().
      const written = buf.write(typeof v === 'string' ? v : String(v), at + 4, 'utf8');
      buf.writeInt32BE(written, at);
      at += 4 + written;
    }
  }
  at = buf.writeInt16BE(1, at); // one result format code for all columns…
  at = buf.writeInt16BE(0, at); // …text
  buf.writeInt32BE(at + large - 1, 1);
  chunks.push(buf.subarray(from, at));
  return chunks;
}

/** The driver's connection, as far as this file uses it (pg's types leave it out). */
interface Connection {
  readonly stream: { readonly writable: boolean; write(chunk: Buffer): boolean };
  readonly parsedStatements: Record<string, string | undefined>;
  readonly submittedNamedStatements: Record<string, string | undefined>;
  parse(q: { text: string; name: string; types: unknown }): void;
  close(m: { type: 'S'; name: string }): void;
  describe(m: { type: 'P'; name: string }): void;
  execute(m: Record<string, never>): void;
  sync(): void;
}

/** pg's Query, with the members this file overrides or reads (pg's types leave them out). */
const Base = pg.Query as unknown as new (config: pg.QueryConfig) => {
  readonly name: string;
  readonly text: string;
  readonly values: unknown[];
  readonly types: unknown;
  hasBeenParsed(c: Connection): boolean;
  handleError(err: Error, c: Connection): void;
};

/**
 * A named, prepared query that pg runs as any other (its queue, timeouts, result parsing and
 * error handling are pg's Query's), whose Bind is `bindChunks`. pg corks the socket around
 * `prepare`, so the chunks leave in one writev with the messages around them.
 */
export class BindByReferenceQuery extends Base {
  constructor(config: pg.QueryConfig & { name: string }) {
    super(config);
  }

  /** pg's Query.prepare (lib/query.js), but for how the Bind is written. */
  prepare(connection: Connection): void {
    if (!this.hasBeenParsed(connection)) {
      connection.parse({ text: this.text, name: this.name, types: this.types });
      connection.submittedNamedStatements[this.name] = this.text;
    }
    let chunks: Buffer[];
    try {
      chunks = bindChunks(this.name, this.values);
    } catch (err) {
      connection.close({ type: 'S', name: this.name });
      connection.sync();
      this.handleError(err as Error, connection);
      return;
    }
    // As pg's own messages: nothing is written to a socket no longer writable (the query then
    // fails with the connection's error).
    if (connection.stream.writable) for (const c of chunks) connection.stream.write(c);
    connection.describe({ type: 'P', name: '' });
    connection.execute({});
    connection.sync();
  }
}
