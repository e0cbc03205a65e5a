import { connect, type Socket } from 'node:net';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { startTestApp, STRIPE_SECRET, type TestApp } from '../helpers/app.js';
import { stripeEvent, stripeHeaders } from '../helpers/events.js';
import { post, rawExchange, statusOf } from '../helpers/http.js';
import { changes, scrape, series } from '../helpers/metric-samples.js';
import { describeEachStore } from '../helpers/stores.js';

/**
 * `webhook_requests_total{endpoint, outcome}` for the refusals an operator alerts on: 413
 * (oversized), 429 (rate_limited) and 503 (unavailable). Each test reads /metrics before and after
 * and requires the exact change: the refused endpoint's series up by the number of refusals, and
 * no other series of the counter moved (a refusal counted once, under its own outcome).
 */
const MAX = 2048;
const REQUESTS = 'webhook_requests_total';
const requests = (endpoint: string, outcome: string) => series(REQUESTS, { endpoint, outcome });
const endpoint = (id: string, extra: Record<string, unknown> = {}) => ({ id, provider: 'stripe', secrets: [{ version: 'v1', value: STRIPE_SECRET }], maxBodyBytes: MAX, ...extra });

describeEachStore('refusals counted by endpoint and outcome', (kind) => {
  let app: TestApp;
  let port: number;
  beforeAll(async () => {
    app = await startTestApp(kind, {
      endpoints: [
        endpoint('small'),
        endpoint('limited', { rateLimit: { perSecond: 0.01, burst: 2 } }),
        // The environment given to the app (startTestApp's `env`) is empty: this secret never resolves.
        endpoint('broken', { secrets: [{ version: 'v1', value: '${env:WEBHOOK_INBOX_TEST_NEVER_SET}' }] }),
        endpoint('budget'),
        endpoint('holder'),
      ],
      // 6000 bytes hold one 2000-byte body (raw + sealed = 4000) but not two. No pace rule, so a
      // stalled upload holds its share until the test ends it.
      limits: { maxInFlightBodyBytes: 6000, minBodyBytesPerSecond: 0 },
    });
    port = Number(new URL(app.url).port);
  });
  afterAll(async () => {
    await app?.stop();
  });

  const head = (path: string, body: Buffer, lengthHeader: string) =>
    `POST ${path} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\nstripe-signature: ${stripeHeaders(body)['stripe-signature']}\r\n${lengthHeader}\r\n\r\n`;

  it('413: a Content-Length over maxBodyBytes, a 16-digit one, and a chunked body that overflows are each counted once as oversized', async () => {
    const rows = await app.store.countRows();
    const before = await scrape(app.url);

    const over = stripeEvent('evt_rm_over', { size: MAX + 1 });
    const declared = await rawExchange(port, head('/webhooks/small', over, `content-length: ${over.length}`));
    expect(statusOf(declared.text), declared.text).toBe(413);
    expect(declared.text).toContain('payload_too_large');

    const huge = await rawExchange(port, head('/webhooks/small', over, 'content-length: 9999999999999999'));
    expect(statusOf(huge.text), huge.text).toBe(413);

    const chunk = (b: Buffer) => `${b.length.toString(16)}\r\n${b.toString('latin1')}\r\n`;
    const chunked = await rawExchange(port, head('/webhooks/small', over, 'transfer-encoding: chunked') + chunk(over.subarray(0, 1000)) + chunk(over.subarray(1000)) + '0\r\n\r\n');
    expect(statusOf(chunked.text), chunked.text).toBe(413);

    const after = await scrape(app.url);
    expect(changes(before, after, REQUESTS)).toEqual({ [requests('small', 'oversized')]: 3 });
    expect(await app.store.countRows()).toEqual(rows);
  });

  it('429: requests past the endpoint token bucket are counted as rate_limited, the ones within it as accepted', async () => {
    const before = await scrape(app.url);
    const statuses: number[] = [];
    for (let i = 0; i < 5; i++) {
      const body = stripeEvent(`evt_rm_rl_${i}`);
      const r = await post(`${app.url}/webhooks/limited`, body, stripeHeaders(body));
      statuses.push(r.status);
      if (r.status === 429) expect(r.json().error).toBe('rate_limited');
    }
    expect(statuses).toEqual([200, 200, 429, 429, 429]);
    const after = await scrape(app.url);
    expect(changes(before, after, REQUESTS)).toEqual({
      [requests('limited', 'accepted')]: 2,
      [requests('limited', 'rate_limited')]: 3,
    });
  });

  it('503: an endpoint whose secret is unavailable (${env:} not set) and a body past the in-flight budget are each counted as unavailable on their endpoint', async () => {
    const rows = await app.store.countRows();
    const before = await scrape(app.url);

    for (let i = 0; i < 2; i++) {
      const body = stripeEvent(`evt_rm_broken_${i}`);
      const r = await post(`${app.url}/webhooks/broken`, body, stripeHeaders(body));
      expect(r.status, r.text).toBe(503);
      expect(r.json().error).toBe('secrets_unavailable');
    }

    // One 2000-byte upload on another endpoint stalls mid-body, holding 4000 of the 6000 bytes.
    const held = stripeEvent('evt_rm_held', { size: 2000 });
    const stalled: Socket = connect(port, '127.0.0.1');
    stalled.on('error', () => undefined);
    await new Promise((r) => stalled.once('connect', r));
    stalled.write(head('/webhooks/holder', held, `content-length: ${held.length}`));
    stalled.write(held.subarray(0, 1000));
    await new Promise((r) => setTimeout(r, 150));
    try {
      const body = stripeEvent('evt_rm_budget', { size: 2000 });
      const overloaded = await post(`${app.url}/webhooks/budget`, body, { ...stripeHeaders(body), 'content-length': String(body.length) });
      expect(overloaded.status, overloaded.text).toBe(503);
      expect(overloaded.json().error).toBe('overloaded');

      const after = await scrape(app.url);
      expect(changes(before, after, REQUESTS)).toEqual({
        [requests('broken', 'unavailable')]: 2,
        [requests('budget', 'unavailable')]: 1,
      });
      expect(await app.store.countRows()).toEqual(rows);
    } finally {
      stalled.destroy();
    }
    // The aborted upload is counted too (request_aborted → malformed) once the server sees it go:
    // waited for here so it cannot land in another test's before/after window.
    const aborted = requests('holder', 'malformed');
    for (let i = 0; i < 100 && ((await scrape(app.url)).get(aborted) ?? 0) === 0; i++) await new Promise((r) => setTimeout(r, 20));
    expect((await scrape(app.url)).get(aborted)).toBe(1);
  });
});
