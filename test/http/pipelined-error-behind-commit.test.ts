import Database from 'better-sqlite3';
import { captureLog } from '../helpers/log.js';
import { connect } from 'node:net';
import { rawConnection } from '../helpers/http.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { LINGER } from '../../src/http/linger.js';
import { startTestApp, STRIPE_SECRET, type TestApp } from '../helpers/app.js';
import { stripeEvent, stripeHeaders } from '../helpers/events.js';
import { changes, scrape, series } from '../helpers/metric-samples.js';

/**
 * Bad bytes (or a header timeout) behind a complete request whose commit takes a while: server.ts
 * owes that request its 200 first, then answers the error once, logs it once and counts it once
 * (README: "close the connection, after the answers still owed to any complete requests pipelined
 * before the bad bytes"). The commit is held up by another SQLite connection's write lock.
 */
describe('an HTTP error pipelined behind a request still committing', () => {
  const HEADERS_TIMEOUT_MS = 800;
  let app: TestApp;
  let port: number;
  const lines: string[] = [];
  beforeAll(async () => {
    app = await startTestApp('sqlite', {
      endpoints: [{ id: 'stripe', provider: 'stripe', secrets: [{ version: 'v1', value: STRIPE_SECRET }] }],
      limits: { headersTimeoutMs: HEADERS_TIMEOUT_MS, requestTimeoutMs: 5000 },
    }, {}, { logger: captureLog(lines), urlSuffix: '?busyTimeoutMs=8000' });
    port = Number(new URL(app.url).port);
  });
  afterAll(async () => { await app?.stop(); });

  function signed(id: string): string {
    const body = stripeEvent(id);
    return `POST /webhooks/stripe HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n`
      + `stripe-signature: ${stripeHeaders(body)['stripe-signature']}\r\ncontent-length: ${body.length}\r\n\r\n${body.toString('latin1')}`;
  }

  /**
   * Holds the write lock for `lockMs` while `writes` go out on one connection (`gapMs` apart); returns
   * what was answered, the request log lines written meanwhile and the change in webhook_requests_total.
   */
  async function run(writes: string[], lockMs: number, gapMs = 100, halfClose = false) {
    const before = await scrape(app.url);
    const from = lines.length;
    const blocker = new Database(app.db.url.slice('sqlite:'.length));
    blocker.exec('BEGIN IMMEDIATE');
    const release = setTimeout(() => { blocker.exec('ROLLBACK'); blocker.close(); }, lockMs);
    const { sock, text, closed } = await rawConnection(port);
    for (const w of writes) {
      if (!closed()) sock.write(w);
      await new Promise((r) => setTimeout(r, gapMs));
    }
    if (halfClose && !closed()) sock.end();
    const until = Date.now() + lockMs + 3000;
    while (!closed() && Date.now() < until) await new Promise((r) => setTimeout(r, 20));
    sock.destroy();
    clearTimeout(release);
    if (blocker.open) { blocker.exec('ROLLBACK'); blocker.close(); }
    await new Promise((r) => setTimeout(r, 200));
    const logged = lines.slice(from).map((l) => JSON.parse(l) as Record<string, unknown>).filter((l) => l.status !== undefined);
    return {
      statuses: [...text().matchAll(/HTTP\/1\.1 (\d{3})/g)].map((m) => Number(m[1])),
      closed: closed(),
      logged: logged.map((l) => `${String(l.endpoint)} ${String(l.status)}`).sort(),
      counted: changes(before, await scrape(app.url), 'webhook_requests_total'),
    };
  }

  // Node's parser, once in error, fails again on every later read of the connection, and each
  // failure is another 'clientError': each was logged and counted, one more per TCP read, while
  // the answer owed before them waited for its commit.
  it('bad bytes, then more bytes while the 200 before them is owed: 200, then one 400, one log line, one count', async () => {
    const r = await run([signed('evt_behind_commit_1') + 'GARBAGE\r\n\r\n', 'more\r\n', 'more\r\n', 'more\r\n'], 600);
    expect(r.statuses).toEqual([200, 400]);
    expect(r.closed).toBe(true);
    expect(r.logged).toEqual(['(unparsed) 400', 'stripe 200']);
    expect(r.counted).toEqual({
      [series('webhook_requests_total', { endpoint: 'stripe', outcome: 'accepted' })]: 1,
      [series('webhook_requests_total', { endpoint: '(unparsed)', outcome: 'malformed' })]: 1,
    });
  });

  // A pipelined request whose header block is not finished within headersTimeout is answered 408,
  // but not before the 200 owed to the request before it: sent at once, the 408 was read as that
  // request's answer (it was stored, and logged as the 200 that never went out).
  it('a pipelined request whose headers time out while the one before it commits: the 200 first, then 408', async () => {
    const r = await run([signed('evt_behind_commit_2') + 'POST /webhooks/stripe HTTP/1.1\r\nhost: x\r\n'], HEADERS_TIMEOUT_MS + 1200);
    expect(r.statuses).toEqual([200, 408]);
    expect(r.closed).toBe(true);
    expect(r.logged).toEqual(['(unparsed) 408', 'stripe 200']);
  });

  // The same timeout after bad bytes already refused: the 400 stands (one answer, one log line).
  it('bad bytes whose answer waits past the header timeout: 200, then the 400 alone', async () => {
    const r = await run([signed('evt_behind_commit_3') + 'GARBAGE\r\n\r\n'], HEADERS_TIMEOUT_MS + 1200);
    expect(r.statuses).toEqual([200, 400]);
    expect(r.closed).toBe(true);
    expect(r.logged).toEqual(['(unparsed) 400', 'stripe 200']);
  });

  // CONNECT is handed over by Node as a raw socket ('connect'), and its 405 was written there at
  // once: ahead of the 200 still owed to the request before it, which then never went out (stored,
  // logged as 200; the sender read 405 as its answer). The 405 waits for the answers owed, as the
  // 400 of bad bytes does, also when the sender half-closes after the CONNECT.
  it('CONNECT behind a request still committing: the 200 first, then the 405', async () => {
    const connectReq = 'CONNECT 127.0.0.1:443 HTTP/1.1\r\nhost: 127.0.0.1:443\r\n\r\n';
    for (const [i, halfClose] of [[4, false], [5, true]] as const) {
      const r = await run([signed(`evt_behind_commit_${i}`) + connectReq], 600, 100, halfClose);
      expect(r.statuses, `half-close: ${halfClose}`).toEqual([200, 405]);
      expect(r.closed).toBe(true);
      expect(r.logged).toEqual(['(unparsed) 405', 'stripe 200']);
    }
  });

  // A refusal from before the body (405, 404…) keeps the connection and drops the small body left,
  // bounded at LINGER.maxMs (linger.ts afterRefusal). That bound was counted from when the refusal
  // was decided, not from when it was written: pipelined behind a commit that took longer than it
  // (a database stall, SQLite's busy timeout), the connection was destroyed before either answer
  // went out, so the sender of the request committing lost its 200 too.
  it('a 405 and a 404 pipelined behind a commit slower than the linger limit: 200, 405, 404, all answered', async () => {
    const get = 'GET /webhooks/stripe HTTP/1.1\r\nhost: x\r\n\r\n';
    const unknown = 'POST /webhooks/nope HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}';
    const r = await run([signed('evt_behind_slow_commit') + get + unknown], LINGER.maxMs + 1500);
    expect(r.statuses).toEqual([200, 405, 404]);
    expect(r.logged).toEqual(['(unknown) 404', 'stripe 200', 'stripe 405']);
  }, 20_000);

  // Not an error, but the same wait: a pipelined request with `Expect: 100-continue` is invited
  // only once the answer before it is written (Node queues the 100 behind it), and its sender sends
  // the body only then. The body's pace (limits.minBodyBytesPerSecond, 1 s grace) was counted from
  // when the 100 was queued, so behind a commit of a second or two the body was cut off with 408
  // body_too_slow, though it came at once when invited.
  it('Expect: 100-continue behind a request still committing: the body sent on the 100 is accepted, not 408', async () => {
    const body = stripeEvent('evt_behind_commit_expect');
    const head = `POST /webhooks/stripe HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n`
      + `stripe-signature: ${stripeHeaders(body)['stripe-signature']}\r\ncontent-length: ${body.length}\r\nexpect: 100-continue\r\n\r\n`;
    const blocker = new Database(app.db.url.slice('sqlite:'.length));
    blocker.exec('BEGIN IMMEDIATE');
    const release = setTimeout(() => { blocker.exec('ROLLBACK'); blocker.close(); }, 2500);
    const sock = connect({ port, host: '127.0.0.1' });
    let text = '';
    sock.on('error', () => undefined);
    sock.on('data', (c) => {
      const invited = !text.includes(' 100 ');
      text += c.toString('latin1');
      if (invited && text.includes(' 100 ')) sock.write(body);
    });
    await new Promise((r) => sock.once('connect', r));
    sock.write(signed('evt_behind_commit_before_expect') + head);
    const until = Date.now() + 6000;
    while ([...text.matchAll(/HTTP\/1\.1 \d{3}/g)].length < 3 && Date.now() < until) await new Promise((r) => setTimeout(r, 20));
    sock.destroy();
    clearTimeout(release);
    if (blocker.open) { blocker.exec('ROLLBACK'); blocker.close(); }
    expect([...text.matchAll(/HTTP\/1\.1 (\d{3})/g)].map((m) => Number(m[1])), text).toEqual([200, 100, 200]);
    const ids = [...text.matchAll(/"inbox_id":"([^"]+)"/g)].map((m) => m[1]!);
    expect((await app.store.getInbox(ids[1]!))?.providerEventId).toBe('evt_behind_commit_expect');
  });
});
