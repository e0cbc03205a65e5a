import { request } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import Database from 'better-sqlite3';
import { startTestApp, type TestApp } from '../helpers/app.js';
import { post, rawExchange, statusOf } from '../helpers/http.js';
import { stripeEvent, stripeHeaders } from '../helpers/events.js';

/**
 * Opens an upload of a correctly signed 2000-byte event to `port`, sending its head and the first
 * `sent` body bytes. `answer`: the first whole JSON answer, or what came before the server closed.
 */
async function openUpload(port: number, id: string, sent: number) {
  const { connect } = await import('node:net');
  const body = stripeEvent(id, { size: 2000 });
  const sock = connect(port, '127.0.0.1');
  const answer = new Promise<string>((resolve) => {
    let text = '';
    // A 200 keeps the connection open: the answer is complete at its JSON body's end.
    sock.on('data', (c) => {
      text += c.toString('latin1');
      if (/\r\n\r\n\{.*\}$/s.test(text)) resolve(text);
    });
    sock.on('close', () => resolve(text));
    sock.on('error', () => undefined);
  });
  await new Promise((r) => sock.once('connect', r));
  sock.write(`POST /webhooks/stripe HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\nstripe-signature: ${stripeHeaders(body)['stripe-signature']}\r\ncontent-length: ${body.length}\r\n\r\n`);
  sock.write(body.subarray(0, sent));
  return { sock, body, answer, started: Date.now() };
}

/** Bounds applied before any body byte is trusted — independent of the store, so SQLite only. */
describe('ingress bounds', () => {
  let app: TestApp;
  let port: number;
  const MAX = 2048;
  beforeAll(async () => {
    app = await startTestApp('sqlite', {
      endpoints: [
        { id: 'stripe', provider: 'stripe', secrets: [{ version: 'v1', value: 'whsec_test_secret_for_webhook_inbox' }], maxBodyBytes: MAX },
        { id: 'limited', provider: 'stripe', secrets: [{ version: 'v1', value: 'whsec_test_secret_for_webhook_inbox' }], rateLimit: { perSecond: 0.01, burst: 2 }, maxBodyBytes: MAX },
      ],
      limits: { maxHeaders: 30, maxHeaderBytes: 4096, headersTimeoutMs: 500, requestTimeoutMs: 1000, maxInFlightBodyBytes: 6000 },
    });
    port = Number(new URL(app.url).port);
  });
  afterAll(async () => { await app?.stop(); });
  const url = () => `${app.url}/webhooks/stripe`;

  it('answers 405 with Allow: POST for other methods', async () => {
    const r = await post(url(), '', {}, 'GET');
    expect(r.status).toBe(405);
    expect(r.headers.allow).toBe('POST');
    expect(r.json().error).toBe('method_not_allowed');
  });

  it('answers 404 for an unknown endpoint id', async () => {
    const body = stripeEvent('evt_404');
    const r = await post(`${app.url}/webhooks/nope`, body, stripeHeaders(body));
    expect(r.status).toBe(404);
    expect(r.json().error).toBe('unknown_endpoint');
  });

  it('finds the endpoint from an absolute-form target and from percent-encoded id characters', async () => {
    const send = async (target: string, id: string) => {
      const body = stripeEvent(id);
      const head = `POST ${target} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\nstripe-signature: ${stripeHeaders(body)['stripe-signature']}\r\ncontent-length: ${body.length}\r\nconnection: close\r\n\r\n`;
      const { text } = await rawExchange(port, Buffer.concat([Buffer.from(head), body]));
      return { status: statusOf(text), body: text.slice(text.indexOf('\r\n\r\n') + 4) };
    };
    // RFC 9112 §3.2.2: a server must accept the absolute form (some proxies send it).
    const absolute = await send(`http://127.0.0.1:${port}/webhooks/stripe?x=1`, 'evt_absolute_form');
    expect(absolute.status).toBe(200);
    expect(JSON.parse(absolute.body)).toMatchObject({ duplicate: false });
    // %73 is "s": an escaped unreserved character is the character itself (RFC 3986 §6.2.2.2).
    const escaped = await send('/webhooks/%73tripe', 'evt_escaped_id');
    expect(escaped.status).toBe(200);
    // The same event again by the plain path: one row, the second a duplicate.
    const again = await send('/webhooks/stripe', 'evt_escaped_id');
    expect(JSON.parse(again.body)).toMatchObject({ duplicate: true });
    // Any other escape names no endpoint.
    expect((await send('/webhooks/stri%2Fpe', 'evt_escaped_slash')).status).toBe(404);
  });

  it('answers 429 with Retry-After past the endpoint rate limit', async () => {
    const statuses: number[] = [];
    let retryAfter: unknown;
    for (let i = 0; i < 3; i++) {
      const body = stripeEvent(`evt_rl_${i}`);
      const r = await post(`${app.url}/webhooks/limited`, body, stripeHeaders(body));
      statuses.push(r.status);
      if (r.status === 429) retryAfter = r.headers['retry-after'];
    }
    expect(statuses).toEqual([200, 200, 429]);
    // The bucket (burst 2, 0.01 token/s) is empty: the next token is ~100 s away, and the header says when.
    expect(Number(retryAfter)).toBeGreaterThanOrEqual(95);
    expect(Number(retryAfter)).toBeLessThanOrEqual(100);
  });

  it('answers 415 for a content type the adapter does not accept', async () => {
    const body = stripeEvent('evt_415');
    const r = await post(url(), body, { ...stripeHeaders(body), 'content-type': 'text/plain' });
    expect(r.status).toBe(415);
    expect(r.json().error).toBe('unsupported_media_type');
  });

  it('answers 415 with Accept-Encoding: identity for a compressed body (it would only fail its signature); identity passes', async () => {
    const body = stripeEvent('evt_gzip');
    const { gzipSync } = await import('node:zlib');
    const r = await post(url(), gzipSync(body), { ...stripeHeaders(body), 'content-encoding': 'gzip' });
    expect(r.status, r.text).toBe(415);
    expect(r.json().error).toBe('unsupported_content_encoding');
    expect(r.headers['accept-encoding']).toBe('identity');
    const plain = await post(url(), body, { ...stripeHeaders(body), 'content-encoding': 'identity' });
    expect(plain.status, plain.text).toBe(200);
  });

  it('answers 501 for a transfer coding besides chunked (Node would pass its coded bytes on as the body) and closes', async () => {
    const body = stripeEvent('evt_te_gzip');
    const { gzipSync } = await import('node:zlib');
    const coded = gzipSync(body);
    const head = `POST /webhooks/stripe HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\nstripe-signature: ${stripeHeaders(body)['stripe-signature']}\r\ntransfer-encoding: gzip, chunked\r\n\r\n`;
    const { text, closed } = await rawExchange(port, Buffer.concat([Buffer.from(`${head}${coded.length.toString(16)}\r\n`), coded, Buffer.from('\r\n0\r\n\r\n')]));
    expect(statusOf(text), text).toBe(501);
    expect(text).toContain('"error":"unsupported_transfer_encoding"');
    expect(closed).toBe(true);
  });

  it('answers 415 for a repeated Content-Type, whichever comes first', async () => {
    for (const pair of [['application/json', 'text/plain'], ['text/plain', 'application/json']]) {
      const body = stripeEvent(`evt_two_types_${pair[0]!.length}`);
      const r = await post(url(), body, [['content-type', pair[0]!], ['content-type', pair[1]!], ['stripe-signature', stripeHeaders(body)['stripe-signature']!]]);
      expect(r.status, r.text).toBe(415);
      expect(r.json()).toMatchObject({ error: 'unsupported_media_type', detail: 'Content-Type appears 2 times' });
    }
  });

  it('Expect: 100-continue: a request refused before its body gets the refusal, not an invitation to send it', async () => {
    const body = stripeEvent('evt_expect_no');
    const head = (contentType: string, length: number) =>
      `POST /webhooks/stripe HTTP/1.1\r\nHost: x\r\nContent-Type: ${contentType}\r\nContent-Length: ${length}\r\nExpect: 100-continue\r\n\r\n`;
    const wrongType = await rawExchange(port, head('text/plain', body.length), 500);
    expect(statusOf(wrongType.text)).toBe(415);
    expect(wrongType.text).not.toContain('100 Continue');
    const tooLong = await rawExchange(port, head('application/json', MAX + 1), 500);
    expect(statusOf(tooLong.text)).toBe(413);
    expect(tooLong.text).not.toContain('100 Continue');
  });

  it('Expect: 100-continue: a request that passes the checks before the body is invited, then accepted', async () => {
    const body = stripeEvent('evt_expect_yes');
    const { status, continued } = await new Promise<{ status: number; continued: boolean }>((resolve, reject) => {
      let continued = false;
      const req = request(url(), { method: 'POST', headers: { ...stripeHeaders(body), 'content-length': body.length, expect: '100-continue' } });
      req.on('continue', () => {
        continued = true;
        req.end(body); // the body goes only after the invitation
      });
      req.on('response', (res) => {
        res.resume();
        res.on('end', () => resolve({ status: res.statusCode!, continued }));
      });
      req.on('error', reject);
      req.flushHeaders();
    });
    expect([continued, status]).toEqual([true, 200]);
  });

  it('accepts a body of exactly maxBodyBytes', async () => {
    const body = stripeEvent('evt_exact', { size: MAX });
    expect(body.length).toBe(MAX);
    const r = await post(url(), body, { ...stripeHeaders(body), 'content-length': String(body.length) });
    expect(r.status).toBe(200);
    expect(r.json().duplicate).toBe(false);
  });

  it('answers 413 before reading the body when Content-Length is one byte over, and closes', async () => {
    const body = stripeEvent('evt_over', { size: MAX + 1 });
    const head = `POST /webhooks/stripe HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\nstripe-signature: ${stripeHeaders(body)['stripe-signature']}\r\ncontent-length: ${body.length}\r\n\r\n`;
    // Only the head is sent: the answer must not wait for the body.
    const r = await rawExchange(port, head);
    expect(statusOf(r.text)).toBe(413);
    expect(r.text).toContain('payload_too_large');
    expect(r.closed).toBe(true);
  });

  it('answers 413 (not 400) for a Content-Length of more digits than any limit (16; past 2^64 the HTTP parser answers 400 itself)', async () => {
    const r = await rawExchange(port, `POST /webhooks/stripe HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\nstripe-signature: t=1,v1=${'0'.repeat(64)}\r\ncontent-length: 9999999999999999\r\n\r\n`);
    expect(statusOf(r.text)).toBe(413);
    expect(r.text).toContain('payload_too_large');
  });

  it('answers 413 for a chunked body that overflows while streaming, and closes', async () => {
    const body = stripeEvent('evt_chunked', { size: MAX + 1 });
    const chunk = (b: Buffer) => `${b.length.toString(16)}\r\n${b.toString('latin1')}\r\n`;
    const raw = `POST /webhooks/stripe HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\nstripe-signature: ${stripeHeaders(body)['stripe-signature']}\r\ntransfer-encoding: chunked\r\n\r\n`
      + chunk(body.subarray(0, 1000)) + chunk(body.subarray(1000)) + '0\r\n\r\n';
    const r = await rawExchange(port, raw);
    expect(statusOf(r.text)).toBe(413);
    expect(r.closed).toBe(true);
  });

  it('accepts a chunked body within the limit', async () => {
    const body = stripeEvent('evt_chunked_ok', { size: MAX });
    const r = await post(url(), body, [['content-type', 'application/json'], ['stripe-signature', stripeHeaders(body)['stripe-signature']!]]);
    expect(r.status).toBe(200);
  });

  it('answers 431 for too many headers', async () => {
    const body = stripeEvent('evt_431');
    const pairs: [string, string][] = Object.entries(stripeHeaders(body));
    for (let i = 0; i < 40; i++) pairs.push([`x-h${i}`, 'v']);
    const r = await post(url(), body, pairs);
    expect(r.status).toBe(431);
  });

  it('answers 431 for a header block over maxHeaderBytes', async () => {
    const raw = `POST /webhooks/stripe HTTP/1.1\r\nhost: x\r\nx-big: ${'a'.repeat(5000)}\r\ncontent-length: 0\r\n\r\n`;
    const r = await rawExchange(port, raw);
    expect(statusOf(r.text)).toBe(431);
  });

  it('cuts off a sender that never finishes its headers', async () => {
    const started = Date.now();
    const r = await rawExchange(port, 'POST /webhooks/stripe HTTP/1.1\r\nhost: x\r\n', 5000);
    expect(r.closed).toBe(true);
    expect(Date.now() - started).toBeLessThan(4000);
  });

  it('cuts off a sender that stalls mid-body', async () => {
    const started = Date.now();
    const r = await rawExchange(port, 'POST /webhooks/stripe HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\nstripe-signature: t=1,v1=00\r\ncontent-length: 100\r\n\r\n{"id":', 5000);
    expect(r.closed).toBe(true);
    expect(Date.now() - started).toBeLessThan(4000);
  });

  /** An upload of a 2000-byte event that sends `sent` bytes of it and stalls, given 100 ms to reach the server. */
  async function stalledUpload(sent: number) {
    const { sock } = await openUpload(port, `evt_stalled_${sent}_${Math.random()}`, sent);
    await new Promise((r) => setTimeout(r, 100));
    return sock;
  }

  it('answers 503 overloaded with Retry-After when in-flight body bytes pass the cap', async () => {
    // The first request holds 2 × 2000 (raw + ciphertext, reserved for its Content-Length) of the 6000-byte budget and stalls mid-body.
    const stalled = await stalledUpload(1600);
    const body = stripeEvent('evt_budget', { size: 2000 });
    const r = await post(url(), body, { ...stripeHeaders(body), 'content-length': String(body.length) });
    expect(r.status).toBe(503);
    expect(r.json().error).toBe('overloaded');
    expect(r.headers['retry-after']).toBe('1');
    stalled.destroy();
    // Budget is released when the stalled request dies: the same event is then accepted.
    await new Promise((res) => setTimeout(res, 100));
    const again = await post(url(), body, { ...stripeHeaders(body), 'content-length': String(body.length) });
    expect(again.status).toBe(200);
  });

  it('Expect: 100-continue: a body that would not fit in the budget now gets 503, not an invitation', async () => {
    const stalled = await stalledUpload(1600);
    const body = stripeEvent('evt_expect_full', { size: 2000 });
    const head = `POST /webhooks/stripe HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\nstripe-signature: ${stripeHeaders(body)['stripe-signature']}\r\ncontent-length: ${body.length}\r\nexpect: 100-continue\r\n\r\n`;
    const r = await rawExchange(port, head, 500);
    stalled.destroy();
    expect(statusOf(r.text)).toBe(503);
    expect(r.text).toContain('overloaded');
    expect(r.text).not.toContain('100 Continue');
  });

  it('Expect: a list naming 100-continue is invited; HTTP/1.0 is not (its Expect is ignored); another expectation → 417 expectation_failed', async () => {
    const body = stripeEvent('evt_expect_list');
    const head = (version: string, expectation: string) =>
      `POST /webhooks/stripe ${version}\r\nhost: x\r\ncontent-type: application/json\r\nstripe-signature: ${stripeHeaders(body)['stripe-signature']}\r\ncontent-length: ${body.length}\r\nexpect: ${expectation}\r\n\r\n`;
    const listed = await rawExchange(port, head('HTTP/1.1', '100-continue, x-other'), 500);
    expect(listed.text.startsWith('HTTP/1.1 100 Continue')).toBe(true);
    const old = await rawExchange(port, head('HTTP/1.0', '100-continue'), 500);
    expect(old.text).toBe(''); // still waiting for the body, uninvited
    const other = await rawExchange(port, head('HTTP/1.1', 'x-something'), 500);
    expect(statusOf(other.text)).toBe(417);
    expect(other.text).toContain('{"error":"expectation_failed"');
  });

  it('a malformed request pipelined behind one still committing does not take its answer: 200 first, then 400 and close', async () => {
    const body = stripeEvent('evt_pipelined_then_garbage');
    const valid = `POST /webhooks/stripe HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\nstripe-signature: ${stripeHeaders(body)['stripe-signature']}\r\ncontent-length: ${body.length}\r\n\r\n${body.toString('latin1')}`;
    const r = await rawExchange(port, valid + 'XYZ\r\n\r\n');
    expect(statusOf(r.text)).toBe(200);
    const second = r.text.indexOf('HTTP/1.1 ', 1);
    expect(second).toBeGreaterThan(0);
    expect(statusOf(r.text.slice(second))).toBe(400);
    expect(r.text.slice(second)).toContain('{"error":"bad_request"}');
    expect(r.closed).toBe(true);
    const inboxId = JSON.parse(r.text.slice(r.text.indexOf('\r\n\r\n') + 4, second)).inbox_id as string;
    expect((await app.store.getInbox(inboxId))?.providerEventId).toBe('evt_pipelined_then_garbage');
  });

  it('a pipelined request whose own body is malformed (a bad chunk) waits for the answer owed before it: 200 first, then its 400 and close', async () => {
    const body = stripeEvent('evt_pipelined_then_bad_chunk');
    const valid = `POST /webhooks/stripe HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\nstripe-signature: ${stripeHeaders(body)['stripe-signature']}\r\ncontent-length: ${body.length}\r\n\r\n${body.toString('latin1')}`;
    const next = stripeEvent('evt_chunked_next');
    const badChunk = `POST /webhooks/stripe HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\nstripe-signature: ${stripeHeaders(next)['stripe-signature']}\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n`;
    const r = await rawExchange(port, valid + badChunk);
    expect(statusOf(r.text), r.text).toBe(200);
    const second = r.text.indexOf('HTTP/1.1 ', 1);
    expect(second).toBeGreaterThan(0);
    expect(statusOf(r.text.slice(second))).toBe(400);
    expect(r.text.slice(second)).toContain('{"error":"bad_request"}');
    expect(r.text.indexOf('HTTP/1.1 ', second + 1), 'a third answer').toBe(-1);
    expect(r.closed).toBe(true);
    const inboxId = JSON.parse(r.text.slice(r.text.indexOf('\r\n\r\n') + 4, second)).inbox_id as string;
    expect((await app.store.getInbox(inboxId))?.providerEventId).toBe('evt_pipelined_then_bad_chunk');
  });
});

/** Pipelined answers stay in order even when the request in error is answered by its own handler first. */
describe('pipelined answers', () => {
  it('a bad-chunk request answered by its handler (408 body_too_slow) while an earlier one commits: 200, 408, close, and no third answer', async () => {
    const app = await startTestApp('sqlite', {}, {}, { urlSuffix: '?busyTimeoutMs=5000' });
    const blocker = new Database(app.db.url.slice('sqlite:'.length));
    try {
      const port = Number(new URL(app.url).port);
      // The first request's commit waits on another connection's write lock for ~2 s; the second
      // request's body stops at a malformed chunk, so after its first second its handler answers 408.
      blocker.exec('BEGIN IMMEDIATE');
      setTimeout(() => blocker.exec('ROLLBACK'), 2000);
      const body = stripeEvent('evt_pipelined_slow_commit');
      const valid = `POST /webhooks/stripe HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\nstripe-signature: ${stripeHeaders(body)['stripe-signature']}\r\ncontent-length: ${body.length}\r\n\r\n${body.toString('latin1')}`;
      const next = stripeEvent('evt_pipelined_slow_next');
      const badChunk = `POST /webhooks/stripe HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\nstripe-signature: ${stripeHeaders(next)['stripe-signature']}\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n`;
      const r = await rawExchange(port, valid + badChunk, 6000);
      const starts = [...r.text.matchAll(/HTTP\/1\.1 (\d{3})/g)].map((m) => Number(m[1]));
      expect(starts, r.text).toEqual([200, 408]);
      expect(r.text).toContain('{"error":"body_too_slow"');
      expect(r.closed).toBe(true);
      expect((await app.store.countRows()).inbox).toBe(1);
    } finally {
      blocker.close();
      await app.stop();
    }
  });
});

/**
 * A reservation is paid for in bytes: an upload that declared a body and does not send it at
 * `limits.minBodyBytesPerSecond` (after its first second) is cut off, freeing the budget. Without
 * the rule, two idle connections declaring large bodies held the whole budget until the request
 * timeout, and every other sender got 503 meanwhile.
 */
describe('ingress bounds: the pace a body holding budget must keep', () => {
  let app: TestApp;
  let port: number;
  beforeAll(async () => {
    app = await startTestApp('sqlite', {
      endpoints: [{ id: 'stripe', provider: 'stripe', secrets: [{ version: 'v1', value: 'whsec_test_secret_for_webhook_inbox' }], maxBodyBytes: 2048 }],
      // The request timeout is long: only the pace rule can end an idle upload within these tests.
      limits: { requestTimeoutMs: 60_000, maxInFlightBodyBytes: 6000, minBodyBytesPerSecond: 1000 },
    });
    port = Number(new URL(app.url).port);
  });
  afterAll(async () => { await app?.stop(); });
  const url = () => `${app.url}/webhooks/stripe`;

  it('an idle upload holds the budget only for its first second or so: then 408 body_too_slow, and others are accepted again', async () => {
    const idle = await openUpload(port, 'evt_pace_idle', 0);
    await new Promise((r) => setTimeout(r, 100));
    const body = stripeEvent('evt_pace_blocked', { size: 2000 });
    const blocked = await post(url(), body, { ...stripeHeaders(body), 'content-length': String(body.length) });
    expect(blocked.status).toBe(503); // 2 × 2000 held by the idle upload + 2 × 2000 > 6000
    const text = await idle.answer;
    expect(statusOf(text)).toBe(408);
    expect(text).toContain('{"error":"body_too_slow"');
    expect(Date.now() - idle.started).toBeLessThan(5000);
    const again = await post(url(), body, { ...stripeHeaders(body), 'content-length': String(body.length) });
    expect(again.status).toBe(200);
  });

  it('a trickling upload (50 bytes/s against 1000) is cut off too; one that keeps the pace is accepted', async () => {
    const slow = await openUpload(port, 'evt_pace_trickle', 10);
    const trickle = setInterval(() => { if (slow.sock.writable) slow.sock.write('x'); }, 20);
    const text = await slow.answer;
    clearInterval(trickle);
    expect(statusOf(text)).toBe(408);
    expect(text).toContain('body_too_slow');

    // ~1,330 bytes/s: 2000 bytes in four parts over 1.5 s.
    const steady = await openUpload(port, 'evt_pace_steady', 500);
    for (let i = 1; i < 4; i++) {
      await new Promise((r) => setTimeout(r, 500));
      steady.sock.write(steady.body.subarray(i * 500, (i + 1) * 500));
    }
    const answer = await steady.answer;
    steady.sock.destroy();
    expect(statusOf(answer)).toBe(200);
    expect(answer).toContain('"duplicate":false');
  });
});

/**
 * A request timed out mid-body gets its 408 straight from server.ts (clientError) with our FIN,
 * and the server then waited for the sender's FIN without a bound. A sender that never closes
 * its side (a client hung after writing, a NAT that dropped the FIN) held the connection for
 * good, and with it the body budget its Content-Length reserved: the reservation is released
 * when the request's connection closes. Without the pace rule nothing else freed it, so a few
 * such senders left every later body answered 503 overloaded, for as long as the process ran.
 */
describe('ingress bounds: a request timed out mid-body, its sender never closing', () => {
  let app: TestApp;
  let port: number;
  beforeAll(async () => {
    app = await startTestApp('sqlite', {
      endpoints: [{ id: 'stripe', provider: 'stripe', secrets: [{ version: 'v1', value: 'whsec_test_secret_for_webhook_inbox' }], maxBodyBytes: 2048 }],
      // No pace rule: the request timeout alone bounds a stalled upload.
      limits: { headersTimeoutMs: 300, requestTimeoutMs: 500, maxInFlightBodyBytes: 6000, minBodyBytesPerSecond: 0 },
    });
    port = Number(new URL(app.url).port);
  });
  afterAll(async () => { await app?.stop(); });

  it('gives the connection and the budget back within the linger limit after the 408', async () => {
    const { connect } = await import('node:net');
    const { LINGER } = await import('../../src/http/linger.js');
    const stalled = stripeEvent('evt_timeout_half_open', { size: 2000 });
    // Half-open allowed: the server's FIN does not make this socket close its own side.
    const sock = connect({ port, host: '127.0.0.1', allowHalfOpen: true });
    let text = '';
    sock.on('data', (c: Buffer) => { text += c.toString('latin1'); });
    sock.on('error', () => undefined);
    await new Promise((r) => sock.once('connect', r));
    sock.write(`POST /webhooks/stripe HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\nstripe-signature: ${stripeHeaders(stalled)['stripe-signature']}\r\ncontent-length: ${stalled.length}\r\n\r\n`);
    sock.write(stalled.subarray(0, 500));
    try {
      const timedOut = Date.now() + 5000;
      while (statusOf(text) !== 408 && Date.now() < timedOut) await new Promise((r) => setTimeout(r, 50));
      expect(statusOf(text)).toBe(408);
      const answeredAt = Date.now();

      // 2 × 2000 held by the stalled upload + 2 × 2000 > 6000: refused while its connection stays.
      const body = stripeEvent('evt_after_half_open', { size: 2000 });
      const send = () => post(`${app.url}/webhooks/stripe`, body, { ...stripeHeaders(body), 'content-length': String(body.length) });
      let status = (await send()).status;
      const deadline = answeredAt + LINGER.maxMs + 3000;
      while (status !== 200 && Date.now() < deadline) {
        await new Promise((r) => setTimeout(r, 250));
        status = (await send()).status;
      }
      expect(status).toBe(200);
      // The requests above close their own connections (agent: false) a moment after their answers.
      const connections = () => new Promise<number>((resolve, reject) => app.server.getConnections((err, n) => (err ? reject(err) : resolve(n))));
      let open = await connections();
      while (open > 0 && Date.now() < deadline + 2000) {
        await new Promise((r) => setTimeout(r, 50));
        open = await connections();
      }
      expect(open).toBe(0);
    } finally {
      sock.destroy();
    }
  }, 20_000);
});
