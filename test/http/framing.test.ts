import { captureLog } from '../helpers/log.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestApp, STRIPE_SECRET, type TestApp } from '../helpers/app.js';
import { rawConnection, statusOf } from '../helpers/http.js';
import { stripeEvent, stripeHeaders } from '../helpers/events.js';

/**
 * Raw HTTP/1.1 shapes that Node alone answers badly (a bare or silent refusal, a request dropped
 * or committed unanswered, a log line that is not what was sent). Each test states what a careful
 * HTTP/1.1 server (RFC 9110 / 9112) and this project's contract (README "What happens to a
 * request", src/http/linger.ts) require; server.ts does it.
 */
describe('HTTP/1.1 framing edge cases', () => {
  let app: TestApp;
  let port: number;
  const lines: string[] = [];
  beforeAll(async () => {
    app = await startTestApp('sqlite', {
      endpoints: [{ id: 'stripe', provider: 'stripe', secrets: [{ version: 'v1', value: STRIPE_SECRET }], maxBodyBytes: 2048 }],
    }, {}, { logger: captureLog(lines) });
    port = Number(new URL(app.url).port);
  });
  afterAll(async () => { await app?.stop(); });

  /** A correctly signed Stripe delivery of event `id`, as raw bytes. `host: null` leaves Host out. */
  function signed(id: string, o: { host?: string | null; extra?: string; version?: string; length?: string } = {}): string {
    const body = stripeEvent(id);
    const host = o.host === null ? '' : `host: ${o.host ?? 'x'}\r\n`;
    return `POST /webhooks/stripe ${o.version ?? 'HTTP/1.1'}\r\n${host}content-type: application/json\r\n`
      + `stripe-signature: ${stripeHeaders(body)['stripe-signature']}\r\ncontent-length: ${o.length ?? body.length}\r\n${o.extra ?? ''}\r\n${body.toString('latin1')}`;
  }

  /** One connection: `send` writes, `text()` is everything answered so far, `closed()` whether the server closed it. */
  const connection = (allowHalfOpen = false) => rawConnection(port, allowHalfOpen);

  /** Writes `bytes` on a new connection; returns what came back once the server closed or `waitMs` passed. */
  async function exchange(bytes: string, waitMs = 1500, halfClose = false) {
    const c = await connection(halfClose);
    if (halfClose) c.sock.end(bytes);
    else c.sock.write(bytes);
    const until = Date.now() + waitMs;
    while (!c.closed() && Date.now() < until) await new Promise((r) => setTimeout(r, 20));
    c.sock.destroy();
    // Give a commit started by these bytes the time to land before the store is read.
    await new Promise((r) => setTimeout(r, 300));
    return { text: c.text(), closed: c.closed() };
  }

  const statuses = (text: string) => [...text.matchAll(/HTTP\/1\.1 (\d{3})/g)].map((m) => Number(m[1]));
  const inboxIds = (text: string) => [...text.matchAll(/"inbox_id":"([^"]+)"/g)].map((m) => m[1]!);
  async function stored(eventId: string): Promise<boolean> {
    const rows = await Promise.all((await app.store.listInboxIds()).map((id) => app.store.getInbox(id)));
    return rows.some((r) => r?.providerEventId === eventId);
  }
  /** Request log lines (those with a status) written while `fn` ran. */
  async function loggedDuring(fn: () => Promise<unknown>): Promise<Array<Record<string, unknown>>> {
    const from = lines.length;
    await fn();
    await new Promise((r) => setTimeout(r, 100));
    return lines.slice(from).map((l) => JSON.parse(l) as Record<string, unknown>).filter((l) => l.status !== undefined);
  }

  // README: "Every rejection is {"error": "<reason>"}", with its JSON log line. RFC 9112 §3.2: an
  // HTTP/1.1 request without Host MUST get 400. Node's own check (requireHostHeader, on by default)
  // answered a bare 400 with an empty body before the 'request' event: no reason, no log line.
  it('an HTTP/1.1 request without Host gets 400 with a JSON reason and its log line', async () => {
    let r = { text: '', closed: false };
    const logged = await loggedDuring(async () => { r = await exchange(signed('evt_audit_no_host', { host: null })); });
    expect(statusOf(r.text), r.text).toBe(400);
    expect(r.text, 'a machine-readable reason').toMatch(/\r\n\r\n\{"error":"[a-z_]+"/);
    expect(logged.map((l) => l.status), 'one log line for the refusal').toEqual([400]);
    expect(await stored('evt_audit_no_host')).toBe(false);
  });

  // RFC 9112 §9.6: after an answer with `Connection: close` the server "MUST NOT process any further
  // requests received on that connection" (linger.ts applies this to the project's own refusals
  // through isClosing()). Behind Node's own missing-Host 400, the pipelined request was verified
  // and committed, then the socket closed: stored, and its sender never got an answer.
  it('a request pipelined behind a Host-less one is not processed (its answer could never be sent)', async () => {
    const r = await exchange(signed('evt_audit_no_host_first', { host: null }) + signed('evt_audit_behind_no_host'), 3000);
    expect(statuses(r.text), r.text).toEqual([400]);
    expect(r.closed).toBe(true);
    expect(await stored('evt_audit_behind_no_host'), 'stored although never answered').toBe(false);
  });

  // RFC 9112 §3.2: a server MUST answer 400 to a request "that contains more than one Host header
  // field line". Node keeps the first (and the request was accepted).
  it('two Host header lines → 400 with a JSON reason, nothing stored', async () => {
    const r = await exchange(signed('evt_audit_two_hosts', { extra: 'host: other.example\r\nconnection: close\r\n' }));
    expect(statusOf(r.text), r.text).toBe(400);
    expect(r.text).toMatch(/\r\n\r\n\{"error":"[a-z_]+"/);
    expect(await stored('evt_audit_two_hosts')).toBe(false);
  });

  // RFC 9112 §6.1: a server that receives an HTTP/1.0 message with Transfer-Encoding "MUST treat
  // the message as if the framing is faulty … and close the connection after processing the
  // message" (the sender may have framed it differently, a smuggling shape). Node decodes the
  // chunked body and keeps the connection alive, so a request pipelined behind it was accepted.
  it('HTTP/1.0 with Transfer-Encoding: chunked and keep-alive: answered, then closed; nothing behind it is served', async () => {
    const body = stripeEvent('evt_audit_10_chunked');
    const first = `POST /webhooks/stripe HTTP/1.0\r\nhost: x\r\nconnection: keep-alive\r\ncontent-type: application/json\r\n`
      + `stripe-signature: ${stripeHeaders(body)['stripe-signature']}\r\ntransfer-encoding: chunked\r\n\r\n`
      + `${body.length.toString(16)}\r\n${body.toString('latin1')}\r\n0\r\n\r\n`;
    const r = await exchange(first + signed('evt_audit_behind_10_chunked'), 3000);
    expect(statuses(r.text), r.text).toHaveLength(1);
    expect(r.text.toLowerCase()).toContain('connection: close');
    expect(r.closed).toBe(true);
    expect(await stored('evt_audit_behind_10_chunked')).toBe(false);
  });

  // RFC 9110 §15.6.6: a server answers 505 to a major version it does not support. Node's parser
  // took `HTTP/2.0` on this HTTP/1 connection and framed it as HTTP/1.0: no Host rule, and the
  // event was verified and stored.
  // (Other versions, HTTP/1.2 or 3.0, are refused by the parser itself: 400 bad_request.)
  it('a request line naming HTTP/2.0 gets 505 http_version_not_supported, logged and counted, nothing stored, then closed', async () => {
    const id = 'evt_audit_http2';
    let r = { text: '', closed: false };
    const logged = await loggedDuring(async () => { r = await exchange(signed(id, { version: 'HTTP/2.0', extra: 'connection: keep-alive\r\n' }) + signed(`${id}_behind`), 3000); });
    expect(statusOf(r.text), r.text).toBe(505);
    expect(r.text).toMatch(/\r\n\r\n\{"error":"http_version_not_supported"/);
    expect(r.closed).toBe(true);
    expect(logged).toEqual([expect.objectContaining({ endpoint: 'stripe', status: 505, reason: 'http_version_not_supported', outcome: 'malformed' })]);
    expect(await stored(id)).toBe(false);
    expect(await stored(`${id}_behind`)).toBe(false);
    // Off /webhooks/ too: one line, as other malformed HTTP there.
    const logged2 = await loggedDuring(async () => { r = await exchange('GET /healthz HTTP/2.0\r\n\r\n'); });
    expect(statusOf(r.text), r.text).toBe(505);
    expect(logged2).toEqual([expect.objectContaining({ endpoint: '(unparsed)', status: 505, reason: 'http_version_not_supported' })]);
  });

  // The HTTP/2 connection preface (RFC 9113 §3.4: a client speaking HTTP/2 with prior knowledge,
  // e.g. a load balancer set to an h2c backend) is a request line naming HTTP/2.0 too. Node's
  // parser stops at it (HPE_PAUSED_H2_UPGRADE) and server.ts answered it as any malformed bytes:
  // 400 bad_request, so the log and webhook_requests_total said "malformed" with nothing to tell
  // the operator the peer speaks HTTP/2.
  it('the HTTP/2 connection preface gets 505 http_version_not_supported, logged and counted as such, then closed', async () => {
    let r = { text: '', closed: false };
    const logged = await loggedDuring(async () => { r = await exchange('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n'); });
    expect(statusOf(r.text), r.text).toBe(505);
    expect(r.text).toMatch(/\r\n\r\n\{"error":"http_version_not_supported"/);
    expect(r.closed).toBe(true);
    expect(logged).toEqual([expect.objectContaining({ endpoint: '(unparsed)', status: 505, reason: 'http_version_not_supported', outcome: 'malformed' })]);
  });

  // An Upgrade request is served as a plain request (no 'upgrade' listener), which RFC 9110 §7.8
  // allows, but then the rest of that TCP read is dropped by Node (llhttp pauses after an upgrade
  // request; with no listener nobody parses the remaining bytes): the request pipelined behind it
  // was silently lost, with no answer and no close. The next request on the connection is answered,
  // so a pipelining client (or a proxy reusing the connection) pairs that answer with the lost
  // request: a 200 with someone else's inbox_id for an event that was never stored. Either every
  // request is answered in order, or the connection is closed after the upgrade request's answer.
  it('a request pipelined behind an Upgrade request is answered or refused, never dropped with the answers shifted', async () => {
    const c = await connection();
    c.sock.write(signed('evt_audit_upgrade_1', { extra: 'upgrade: websocket\r\nconnection: upgrade\r\n' }) + signed('evt_audit_upgrade_2'));
    await new Promise((r) => setTimeout(r, 1000));
    if (!c.closed()) c.sock.write(signed('evt_audit_upgrade_3'));
    const until = Date.now() + 3000;
    while (!c.closed() && statuses(c.text()).length < 3 && Date.now() < until) await new Promise((r) => setTimeout(r, 20));
    c.sock.destroy();
    const ids = inboxIds(c.text());
    if (ids.length >= 2) {
      // The second answer on the connection must be the second request's.
      expect((await app.store.getInbox(ids[1]!))?.providerEventId, c.text()).toBe('evt_audit_upgrade_2');
    } else {
      expect(c.closed(), `one answer and the connection left open: ${c.text()}`).toBe(true);
    }
  });

  // A client that sends its whole request and then shuts down its sending side (half-close; e.g.
  // `nc -N`, some HTTP/1.0-style clients) is still reading: RFC 9112 §9.6 has the server close only
  // after its answer. Node's default (server.httpAllowHalfOpen = false) aborts the request and ends
  // the socket at the FIN, yet the pipeline went on: the event was committed and logged as
  // "status 200", and the sender got no answer at all.
  it('a complete request followed by the client\'s half-close still gets its 200', async () => {
    let r = { text: '', closed: false };
    const logged = await loggedDuring(async () => { r = await exchange(signed('evt_audit_half_close'), 3000, true); });
    expect(await stored('evt_audit_half_close')).toBe(true);
    expect(logged.map((l) => l.status)).toEqual([200]);
    expect(statusOf(r.text), 'the 200 the log line reports was never sent').toBe(200);
    expect((await app.store.getInbox(inboxIds(r.text)[0]!))?.providerEventId).toBe('evt_audit_half_close');
  });

  // RFC 9110 §8.6: Content-Length = 1*DIGIT; leading zeros do not change the value, and Node's
  // parser frames the body by the value (here the real, small length). Counting the digits before
  // dropping the zeros (16 or more → Infinity) gave a 300-byte body 413 payload_too_large.
  it('a Content-Length written with leading zeros (19 digits) frames a small body: accepted, not 413', async () => {
    const length = String(stripeEvent('evt_audit_cl_zeros').length).padStart(19, '0');
    const r = await exchange(signed('evt_audit_cl_zeros', { length, extra: 'connection: close\r\n' }));
    expect(statusOf(r.text), r.text).toBe(200);
    expect(await stored('evt_audit_cl_zeros')).toBe(true);
  });

  // README: every bad input gets a specific status and a short reason, and every refusal its log
  // line. CONNECT is well-formed HTTP/1.1, but with no 'connect' listener Node destroys the socket:
  // no answer at all, nothing logged or counted. We answer 405 and close.
  it('CONNECT gets an answer with a JSON reason, not a silent close', async () => {
    let r = { text: '', closed: false };
    const logged = await loggedDuring(async () => { r = await exchange('CONNECT 127.0.0.1:443 HTTP/1.1\r\nhost: 127.0.0.1:443\r\n\r\n'); });
    expect(statusOf(r.text), JSON.stringify(r.text)).toBeGreaterThanOrEqual(400);
    expect(r.text).toMatch(/\r\n\r\n\{"error":"[a-z_]+"/);
    expect(logged).toHaveLength(1);
  });

  // RFC 9112 §6.3: Transfer-Encoding in a request whose final coding is not chunked → 400 and close,
  // which is what the wire carries (Node's parser refuses it, server.ts clientError answers 400).
  // But Node first emitted the request, so the ingress also decided 501 unsupported_transfer_encoding;
  // server.ts clientError answers the raw 400 and leaves the logging to the ingress (the request is
  // being read), which logged the 501 it never got onto the wire. The log line must carry the
  // status that was sent.
  it('Transfer-Encoding: gzip (not chunked): the log records the 400 that was sent, not a 501 that never was', async () => {
    const body = stripeEvent('evt_audit_te_gzip');
    const raw = `POST /webhooks/stripe HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n`
      + `stripe-signature: ${stripeHeaders(body)['stripe-signature']}\r\ntransfer-encoding: gzip\r\n\r\n${body.toString('latin1')}`;
    let r = { text: '', closed: false };
    const logged = await loggedDuring(async () => { r = await exchange(raw); });
    expect(statuses(r.text), r.text).toEqual([400]);
    expect(logged.map((l) => l.status), JSON.stringify(logged)).toEqual([400]);
  });

  // RFC 9112 §9.6: after a request with `Connection: close` (or HTTP/1.0 without keep-alive) the
  // server MUST NOT process further requests on the connection. Node's parser refuses the bytes
  // after it (HPE_CLOSED_CONNECTION) and nothing more is sent, which is right; but clientError took
  // that for malformed HTTP, and logged and counted a 400 bad_request that never went out.
  it('a request pipelined behind a Connection: close one is not served, and no 400 is logged for it', async () => {
    for (const [first, second] of [
      [signed('evt_audit_conn_close_1', { extra: 'connection: close\r\n' }), signed('evt_audit_behind_close_1')],
      [signed('evt_audit_conn_close_2', { version: 'HTTP/1.0' }), signed('evt_audit_behind_close_2')],
    ] as const) {
      let r = { text: '', closed: false };
      const logged = await loggedDuring(async () => { r = await exchange(first + second, 3000); });
      expect(statuses(r.text), r.text).toEqual([200]);
      expect(r.closed).toBe(true);
      expect(logged.map((l) => `${String(l.endpoint)} ${String(l.status)}`), 'the log records what was sent').toEqual(['stripe 200']);
    }
    expect(await stored('evt_audit_behind_close_1')).toBe(false);
    expect(await stored('evt_audit_behind_close_2')).toBe(false);
  });
});
