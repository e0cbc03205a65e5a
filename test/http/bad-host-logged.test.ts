import { captureLog } from '../helpers/log.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestApp, type TestApp } from '../helpers/app.js';
import { post, rawExchange, statusOf } from '../helpers/http.js';

/**
 * A request without exactly one Host (RFC 9112 §3.2: 400, then the connection closes) is
 * malformed HTTP whatever its path. On /webhooks/… it was logged and counted under its endpoint,
 * and HTTP the parser refused is logged and counted as `(unparsed)` on any path; but on any other
 * path (`/`, a mistyped `/webhook/stripe`, `/healthz`) the 400 bad_host went out with no log
 * line and no count: a sender or proxy dropping Host was invisible unless it aimed at a webhook path.
 */
describe('a 400 bad_host outside /webhooks/ is logged and counted like other malformed HTTP', () => {
  let app: TestApp;
  const lines: string[] = [];
  beforeAll(async () => {
    app = await startTestApp('sqlite', {}, {}, { logger: captureLog(lines) });
  });
  afterAll(async () => {
    await app?.stop();
  });

  it('no Host, two Hosts, and two Hosts with an Expect: each one 400, one log line, one (unparsed) malformed count', async () => {
    const port = Number(new URL(app.url).port);
    const answers = [
      await rawExchange(port, 'GET / HTTP/1.1\r\n\r\n'),
      await rawExchange(port, 'POST /webhook/stripe HTTP/1.1\r\nhost: a\r\nhost: b\r\ncontent-length: 0\r\n\r\n'),
      await rawExchange(port, 'POST /somewhere HTTP/1.1\r\nhost: a\r\nhost: b\r\nexpect: x-other\r\ncontent-length: 0\r\n\r\n'),
    ];
    for (const a of answers) {
      expect(statusOf(a.text), a.text).toBe(400);
      expect(a.text).toContain('bad_host');
    }
    const metrics = (await post(`${app.url}/metrics`, '', {}, 'GET')).text;
    app.log.flush();
    await new Promise((r) => setTimeout(r, 50));
    const logged = lines.map((l) => JSON.parse(l) as Record<string, unknown>).filter((l) => l.reason === 'bad_host');
    expect(logged).toEqual([0, 1, 2].map(() => expect.objectContaining({ endpoint: '(unparsed)', outcome: 'malformed', reason: 'bad_host', status: 400 })));
    expect(metrics).toContain('webhook_requests_total{endpoint="(unparsed)",outcome="malformed"} 3');
  });
});
