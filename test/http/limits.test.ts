import { request } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestApp, type TestApp } from '../helpers/app.js';
import { post, rawExchange, statusOf } from '../helpers/http.js';
import { stripeEvent, stripeHeaders } from '../helpers/events.js';

/** Bounds applied before any body byte is trusted — independent of the store, so SQLite only. */
describe('ingress bounds', () => {
  let app: TestApp;
  let port: number;
  const MAX = 2048;
  beforeAll(async () => {
    app = await startTestApp('sqlite', {
      endpoints: [
        { id: 'stripe', provider: 'stripe', secrets: [{ version: 'v1', value: 'whsec_test_secret_for_webhook_inbox' }], maxBodyBytes: MAX },
        { id: 'limited', provider: 'stripe', secrets: [{ version: 'v1', value: 'whsec_test_secret_for_webhook_inbox' }], rateLimit: { perSecond: 0.01, burst: 2 } },
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
    expect(Number(retryAfter)).toBeGreaterThanOrEqual(1);
  });

  it('answers 415 for a content type the adapter does not accept', async () => {
    const body = stripeEvent('evt_415');
    const r = await post(url(), body, { ...stripeHeaders(body), 'content-type': 'text/plain' });
    expect(r.status).toBe(415);
    expect(r.json().error).toBe('unsupported_media_type');
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

  it('answers 503 overloaded with Retry-After when in-flight body bytes pass the cap', async () => {
    // The first request reserves 2 × 2000 (raw + ciphertext) of the 6000-byte budget and stalls mid-body.
    const { connect } = await import('node:net');
    const stalled = connect(port, '127.0.0.1');
    await new Promise((r) => stalled.once('connect', r));
    stalled.write(`POST /webhooks/stripe HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\nstripe-signature: t=1,v1=${'0'.repeat(64)}\r\ncontent-length: 2000\r\n\r\n{"id":`);
    await new Promise((r) => setTimeout(r, 100));
    const body = stripeEvent('evt_budget', { size: 2000 });
    const r = await post(url(), body, { ...stripeHeaders(body), 'content-length': String(body.length) });
    expect(r.status).toBe(503);
    expect(r.json().error).toBe('overloaded');
    expect(r.headers['retry-after']).toBeDefined();
    stalled.destroy();
    // Budget is released when the stalled request dies: the same event is then accepted.
    await new Promise((res) => setTimeout(res, 100));
    const again = await post(url(), body, { ...stripeHeaders(body), 'content-length': String(body.length) });
    expect(again.status).toBe(200);
  });
});
