import { connect, type Socket } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DRAIN_MAX_BYTES, LINGER } from '../../src/http/linger.js';
import { startTestApp, STRIPE_SECRET, type TestApp } from '../helpers/app.js';
import { post, statusOf } from '../helpers/http.js';
import { stripeEvent, stripeHeaders } from '../helpers/events.js';

/**
 * A refusal sent before the request's body has all arrived (413 for a body past the limit, 503
 * overloaded, 404, 415…) closes the connection. Closing at once while the sender is still
 * writing makes the kernel answer its next bytes with a reset, and a reset can destroy the
 * answer in the sender's receive buffer before it is read (RFC 9112 §9.6): the sender sees
 * EPIPE/ECONNRESET instead of its 413. These tests play a sender that writes its whole body
 * before it reads, as most HTTP clients do.
 */
describe('lingering close: a refused sender still writing its body reads the refusal', () => {
  let app: TestApp;
  let port: number;
  const MAX = 2048;
  beforeAll(async () => {
    app = await startTestApp('sqlite', {
      endpoints: [{ id: 'stripe', provider: 'stripe', secrets: [{ version: 'v1', value: STRIPE_SECRET }], maxBodyBytes: MAX }],
    });
    port = Number(new URL(app.url).port);
  });
  afterAll(async () => { await app?.stop(); });

  interface Upload {
    /** Everything the server sent, until it closed. */
    answer: Promise<string>;
    /** The first error the sender's socket saw (EPIPE, ECONNRESET), if any. */
    error: () => NodeJS.ErrnoException | undefined;
    /** Bytes the sender's socket accepted. */
    written: () => number;
    closedAt: Promise<number>;
    sock: Socket;
  }

  function open(head: string): Upload {
    // Half-open allowed: the server's FIN after its answer must not stop the sender's body (most clients write it all, then read).
    const sock = connect({ port, host: '127.0.0.1', allowHalfOpen: true });
    let error: NodeJS.ErrnoException | undefined;
    let written = 0;
    const chunks: Buffer[] = [];
    sock.on('data', (c) => chunks.push(c));
    sock.on('error', (e) => { error ??= e; });
    const closedAt = new Promise<number>((r) => sock.once('close', () => r(Date.now())));
    const answer = closedAt.then(() => Buffer.concat(chunks).toString('latin1'));
    const write = sock.write.bind(sock);
    sock.write = ((data: Buffer | string, ...rest: never[]) => {
      written += Buffer.byteLength(data);
      return write(data, ...rest);
    }) as typeof sock.write;
    sock.write(head);
    return { answer, error: () => error, written: () => written, closedAt, sock };
  }

  /**
   * Writes `total` bytes in 16 KiB pieces (each through `frame`), a millisecond apart as a sender
   * on a real network would be (on loopback the kernel would otherwise take megabytes before the
   * server reads any); waits for drain; stops at the first error.
   */
  async function pump(u: Upload, total: number, frame: (b: Buffer) => Buffer, gapMs = 1): Promise<void> {
    const piece = Buffer.alloc(16 * 1024, 0x61);
    for (let sent = 0; sent < total && !u.sock.destroyed && !u.error(); sent += piece.length) {
      if (!u.sock.write(frame(piece))) await new Promise((r) => { u.sock.once('drain', r); u.sock.once('close', r); });
      if (gapMs > 0) await new Promise((r) => setTimeout(r, gapMs));
    }
  }

  const chunked = (b: Buffer) => Buffer.concat([Buffer.from(`${b.length.toString(16)}\r\n`), b, Buffer.from('\r\n')]);
  const signedHead = (extra: string) => {
    const body = stripeEvent(`evt_linger_${Math.random()}`);
    return `POST /webhooks/stripe HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\nstripe-signature: ${stripeHeaders(body)['stripe-signature']}\r\n${extra}\r\n`;
  };

  it('a chunked body that passes the limit: the sender writes its 1 MiB, then reads 413 payload_too_large; then the connection closes', async () => {
    const u = open(signedHead('transfer-encoding: chunked\r\n'));
    await pump(u, 1024 * 1024, chunked);
    if (!u.error()) u.sock.end('0\r\n\r\n');
    const text = await u.answer;
    expect(u.error()?.code).toBeUndefined();
    expect(u.written()).toBeGreaterThan(1024 * 1024);
    expect(statusOf(text)).toBe(413);
    expect(text).toContain('{"error":"payload_too_large"');
    expect(text.toLowerCase()).toContain('connection: close');
  });

  it('a Content-Length past the limit is refused before the body; a sender that writes it anyway reads its 413', async () => {
    const declared = 1024 * 1024;
    const u = open(signedHead(`content-length: ${declared}\r\n`));
    await pump(u, declared, (b) => b);
    u.sock.end();
    const text = await u.answer;
    expect(u.error()?.code).toBeUndefined();
    expect(u.written()).toBeGreaterThan(declared);
    expect(statusOf(text)).toBe(413);
    expect(text).toContain('payload_too_large');
  });

  it('nothing after the refused request is served: a request pipelined behind it is not accepted', async () => {
    const next = stripeEvent('evt_linger_pipelined');
    const pipelined = `POST /webhooks/stripe HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\nstripe-signature: ${stripeHeaders(next)['stripe-signature']}\r\ncontent-length: ${next.length}\r\n\r\n${next.toString('latin1')}`;
    // All in one write, so the server's parser holds the pipelined request when it refuses the first.
    const u = open(signedHead('transfer-encoding: chunked\r\n') + chunked(Buffer.alloc(MAX + 1, 0x61)).toString('latin1') + `0\r\n\r\n${pipelined}`);
    u.sock.end();
    const text = await u.answer;
    expect(statusOf(text)).toBe(413);
    expect(text.indexOf('HTTP/1.1 ', 1)).toBe(-1); // one answer only
    // Had the pipelined event been accepted on the closing connection, this would be its duplicate.
    const r = await post(`${app.url}/webhooks/stripe`, next, stripeHeaders(next));
    expect(r.status).toBe(200);
    expect(r.json().duplicate).toBe(false);
  });

  it('the linger is bounded: a sender that idles after its refusal finds the connection closed after the idle limit', async () => {
    const u = open(signedHead(`content-length: ${MAX + 1}\r\n`)); // the head only, then nothing
    const fin = new Promise((r) => u.sock.once('end', r));
    await fin; // the answer, then the server's FIN
    const poke = async () => {
      // The first byte to a closed socket draws a reset; the next write sees it.
      u.sock.write('x');
      await new Promise((r) => setTimeout(r, 100));
      if (!u.sock.destroyed) u.sock.write('y');
      await new Promise((r) => setTimeout(r, 100));
    };
    await new Promise((r) => setTimeout(r, LINGER.idleMs / 2));
    await poke(); // still lingering: dropped, no reset
    expect(u.error()).toBeUndefined();
    await new Promise((r) => setTimeout(r, LINGER.idleMs + 500));
    await poke();
    expect(u.error()?.code).toMatch(/ECONNRESET|EPIPE/);
    expect(statusOf(await u.answer)).toBe(413);
  });

  it('the linger is bounded: a sender that never stops is cut off once the discard limit has passed', async () => {
    const u = open(signedHead('transfer-encoding: chunked\r\n'));
    // Far more than the discard limit; the server must reset the connection long before.
    await pump(u, LINGER.maxBytes * 4, chunked, 0);
    if (!u.sock.destroyed) u.sock.end();
    const text = await u.answer;
    expect(statusOf(text)).toBe(413);
    expect(u.error()).toBeDefined();
    expect(u.written()).toBeLessThan(LINGER.maxBytes * 2);
  });

  it('the linger is bounded: a sender that trickles a byte at a time (never idle long enough) is cut off after the linger\'s whole limit', async () => {
    const u = open(signedHead('transfer-encoding: chunked\r\n'));
    const started = Date.now();
    await pump(u, MAX * 2, chunked, 0); // past the limit: refused
    let lastOk = Date.now();
    while (!u.error() && !u.sock.destroyed && Date.now() - started < LINGER.maxMs + 3000) {
      u.sock.write('a');
      await new Promise((r) => setTimeout(r, LINGER.idleMs / 4));
      if (!u.error()) lastOk = Date.now();
    }
    expect(u.error()?.code).toMatch(/ECONNRESET|EPIPE/);
    // Kept open well past the idle limit by the trickle, then closed at the whole limit.
    expect(lastOk - started).toBeGreaterThan(LINGER.maxMs - 1000);
    expect(lastOk - started).toBeLessThan(LINGER.maxMs + 1000);
  });

  it('a path that is no endpoint, with a body on its way: 404 not_found with Connection: close, read by a sender that writes its 1 MiB', async () => {
    const declared = 1024 * 1024;
    const u = open(`POST /nope HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: ${declared}\r\n\r\n`);
    await pump(u, declared, (b) => b);
    u.sock.end();
    const text = await u.answer;
    expect(u.error()?.code).toBeUndefined();
    expect(statusOf(text)).toBe(404);
    expect(text).toContain('{"error":"not_found"}');
    expect(text.toLowerCase()).toContain('connection: close');
  });

  // The operational paths' 405 (admin.ts) went by none of this: Node kept the connection and read
  // the whole declared body, of any size, for as long as the request timeout (30 s by default), as
  // the answer to a POST /healthz declaring 1 GiB said keep-alive.
  it('POST /healthz with a large body on its way: 405 with Connection: close, and the connection does not wait for the body', async () => {
    const u = open(`POST /healthz HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: ${1024 ** 3}\r\n\r\n`);
    let text = '';
    const ended = new Promise<boolean>((r) => {
      u.sock.on('data', (c: Buffer) => { text += c.toString('latin1'); });
      u.sock.once('end', () => r(true));
      setTimeout(() => r(false), LINGER.maxMs + 2000);
    });
    u.sock.write(Buffer.alloc(100 * 1024, 0x61));
    // Our FIN after the answer, and then no connection left on the server (the sender never sends the rest).
    const fin = await ended;
    u.sock.destroy();
    expect(statusOf(text), text).toBe(405);
    expect(text).toContain('{"error":"method_not_allowed"}');
    expect(text.toLowerCase()).toContain('connection: close');
    expect(fin, 'the server kept the connection, waiting for the 1 GiB body').toBe(true);
  }, LINGER.maxMs + 5000);
});

/**
 * A refusal that comes before the body (405, 404, 429, 415…) of a request whose body is small or
 * absent keeps the connection: the rest of the body is read and dropped (as nginx does), since a
 * close costs the sender a reconnect — under a rate limit, one per refused request.
 */
describe('a refusal before a small body keeps the connection', () => {
  let app: TestApp;
  let port: number;
  beforeAll(async () => {
    app = await startTestApp('sqlite', {
      endpoints: [
        { id: 'stripe', provider: 'stripe', secrets: [{ version: 'v1', value: STRIPE_SECRET }] },
        { id: 'limited', provider: 'stripe', secrets: [{ version: 'v1', value: STRIPE_SECRET }], rateLimit: { perSecond: 0.01, burst: 1 } },
      ],
    });
    port = Number(new URL(app.url).port);
  });
  afterAll(async () => { await app?.stop(); });

  /** One keep-alive connection; `next()` resolves with the next whole answer (head + Content-Length body). */
  async function connection() {
    const sock = connect(port, '127.0.0.1');
    sock.on('error', () => undefined);
    let buf = '';
    let closed = false;
    const waiters: (() => void)[] = [];
    const wake = () => { for (const w of waiters.splice(0)) w(); };
    sock.on('data', (c) => { buf += c.toString('latin1'); wake(); });
    sock.on('close', () => { closed = true; wake(); });
    await new Promise((r) => sock.once('connect', r));
    const next = async (): Promise<string> => {
      for (;;) {
        const end = buf.indexOf('\r\n\r\n');
        const len = end < 0 ? NaN : Number(/content-length: (\d+)/i.exec(buf.slice(0, end))?.[1] ?? 0);
        if (end >= 0 && buf.length >= end + 4 + len) {
          const answer = buf.slice(0, end + 4 + len);
          buf = buf.slice(end + 4 + len);
          return answer;
        }
        if (closed) throw new Error(`connection closed; had: ${JSON.stringify(buf)}`);
        await new Promise<void>((r) => waiters.push(r));
      }
    };
    return { sock, next, closed: () => closed };
  }

  const signed = (id: string, path = '/webhooks/stripe') => {
    const body = stripeEvent(id);
    return `POST ${path} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\nstripe-signature: ${stripeHeaders(body)['stripe-signature']}\r\ncontent-length: ${body.length}\r\n\r\n${body.toString('latin1')}`;
  };

  it('405, 404 with a body, 415 with a body and 429 with a signed body, then a signed event: all on one connection, none says Connection: close', async () => {
    const c = await connection();
    try {
      const answers: string[] = [];
      c.sock.write('GET /webhooks/stripe HTTP/1.1\r\nhost: x\r\n\r\n');
      answers.push(await c.next());
      c.sock.write(`POST /elsewhere HTTP/1.1\r\nhost: x\r\ncontent-length: 1000\r\n\r\n${'a'.repeat(1000)}`);
      answers.push(await c.next());
      c.sock.write(`POST /webhooks/stripe HTTP/1.1\r\nhost: x\r\ncontent-type: text/plain\r\ncontent-length: 5\r\n\r\nhello`);
      answers.push(await c.next());
      c.sock.write(signed('evt_keep_limited_1', '/webhooks/limited'));
      answers.push(await c.next());
      c.sock.write(signed('evt_keep_limited_2', '/webhooks/limited')); // past the burst of 1
      answers.push(await c.next());
      c.sock.write(signed('evt_keep_after'));
      answers.push(await c.next());
      expect(answers.map(statusOf)).toEqual([405, 404, 415, 200, 429, 200]);
      for (const a of answers) expect(a.toLowerCase()).not.toContain('connection: close');
      expect(answers[5]).toContain('"duplicate":false');
      expect(c.closed()).toBe(false);
    } finally {
      c.sock.destroy();
    }
  });

  it('the same refusals pipelined in one write: each answered in order, the signed event behind them accepted', async () => {
    const c = await connection();
    try {
      c.sock.write('GET /webhooks/stripe HTTP/1.1\r\nhost: x\r\n\r\n'
        + `POST /elsewhere HTTP/1.1\r\nhost: x\r\ncontent-length: 3000\r\n\r\n${'b'.repeat(3000)}`
        + signed('evt_keep_pipelined'));
      const answers = [await c.next(), await c.next(), await c.next()];
      expect(answers.map(statusOf)).toEqual([405, 404, 200]);
      expect(answers[2]).toContain('"duplicate":false');
    } finally {
      c.sock.destroy();
    }
  });

  it('a body over 64 KiB, a chunked body or an Expect: 100-continue still closes after the refusal (the body is not read)', async () => {
    for (const head of [
      `POST /elsewhere HTTP/1.1\r\nhost: x\r\ncontent-length: ${DRAIN_MAX_BYTES + 1}\r\n\r\n`,
      'POST /elsewhere HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n',
      'POST /elsewhere HTTP/1.1\r\nhost: x\r\ncontent-length: 10\r\nexpect: 100-continue\r\n\r\n',
    ]) {
      const c = await connection();
      c.sock.write(head);
      const a = await c.next();
      expect(statusOf(a), head).toBe(404);
      expect(a.toLowerCase(), head).toContain('connection: close');
    }
  });

  it('a small body that never finishes is not waited for without end: the connection is cut off after the linger\'s whole limit', async () => {
    const c = await connection();
    const started = Date.now();
    c.sock.write('POST /elsewhere HTTP/1.1\r\nhost: x\r\ncontent-length: 1000\r\n\r\nonly this');
    expect(statusOf(await c.next())).toBe(404);
    await new Promise<void>((r) => (c.closed() ? r() : c.sock.once('close', () => r())));
    const took = Date.now() - started;
    expect(took).toBeGreaterThanOrEqual(LINGER.maxMs - 100);
    expect(took).toBeLessThan(LINGER.maxMs + 2000);
  }, LINGER.maxMs + 5000);
});
