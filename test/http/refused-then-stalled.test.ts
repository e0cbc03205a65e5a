import { captureLog } from '../helpers/log.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestApp, STRIPE_SECRET, type TestApp } from '../helpers/app.js';
import { rawExchange } from '../helpers/http.js';
import { scrape } from '../helpers/metric-samples.js';

/**
 * A request refused before its body (404, 405, 415, 429, 503 secrets_unavailable) whose small
 * declared body is then drained (linger.ts afterRefusal) is answered, logged and counted once by
 * the ingress. If that body stalls until `limits.requestTimeoutMs` fires (possible when it is under
 * the drain's 5 s cut), Node reports the timeout on a request whose answer is no longer owed:
 * server.ts clientError must close the connection silently, not log and count a second,
 * `(unparsed)` request_timeout and write a raw 408 after the first answer.
 */
describe('a refusal whose drained body then hits the request timeout', () => {
  let app: TestApp;
  let port: number;
  const lines: string[] = [];
  beforeAll(async () => {
    app = await startTestApp('sqlite', {
      endpoints: [{ id: 'stripe', provider: 'stripe', secrets: [{ version: 'v1', value: STRIPE_SECRET }] }],
      limits: { requestTimeoutMs: 1000, headersTimeoutMs: 1000 },
    }, {}, { logger: captureLog(lines) });
    port = Number(new URL(app.url).port);
  });
  afterAll(async () => {
    await app?.stop();
  });

  const requestLines = () => lines.map((l) => JSON.parse(l) as Record<string, unknown>).filter((l) => l.outcome !== undefined);
  const totalRequests = (s: ReadonlyMap<string, number>) =>
    [...s].filter(([k]) => k.startsWith('webhook_requests_total{')).reduce((n, [, v]) => n + v, 0);

  it.each([
    ['415 wrong content type', '/webhooks/stripe', 'text/plain'],
    ['404 unknown endpoint', '/webhooks/no-such-endpoint', 'application/json'],
  ])('%s: one HTTP answer, one log line and one count per request (no second raw 408 "(unparsed)" for the same request)', async (_name, path, type) => {
    const before = await scrape(app.url);
    const linesBefore = requestLines().length;
    // Content-Length 100, only 6 body bytes sent: the refusal is answered at once, the rest never comes.
    const raw = await rawExchange(port, `POST ${path} HTTP/1.1\r\nhost: x\r\ncontent-type: ${type}\r\ncontent-length: 100\r\n\r\n{"id":`, 3000);
    app.log.flush();
    await new Promise((r) => setTimeout(r, 100));
    const after = await scrape(app.url);
    // Expected: one request gets exactly one HTTP response (RFC 9112: no unsolicited response), one log line, one count.
    expect(raw.text.match(/HTTP\/1\.1 \d{3} /g)).toHaveLength(1);
    expect(requestLines().slice(linesBefore)).toHaveLength(1);
    expect(totalRequests(after) - totalRequests(before)).toBe(1);
    expect(after.get('webhook_requests_total{endpoint="(unparsed)",outcome="malformed"}') ?? 0)
      .toBe(before.get('webhook_requests_total{endpoint="(unparsed)",outcome="malformed"}') ?? 0);
  });
});
