import { createServer, STATUS_CODES, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { Duplex } from 'node:stream';
import type { Config } from '../config/schema.js';
import { IngressError, REASONS } from '../errors.js';
import type { Ingress } from './ingress.js';
import { afterRefusal, ignoreOnClosing, isClosing } from './linger.js';
import { markAwaitingContinue, markTimedOut, sendError, sendJson } from './respond.js';

export interface AdminHandlers {
  metrics(): Promise<string>;
  /** null when ready; otherwise the reasons it is not. */
  notReady(): Promise<string[] | null>;
  /** A handler above rejected (its request got 503): the place to log why. */
  failed(path: '/metrics' | '/readyz', err: unknown): void;
}

const WEBHOOK_PREFIX = '/webhooks/';

/** `scheme://authority` at the start of an absolute-form target (a proxy's `POST http://host/…`). */
const ABSOLUTE_FORM = /^[A-Za-z][A-Za-z0-9+.-]*:\/\/[^/?#]*/;

/**
 * The request target's path, without its query. An absolute-form target is reduced to its path:
 * RFC 9112 §3.2.2 says a server must accept that form, and some proxies send it.
 */
function pathOf(req: IncomingMessage): string {
  let url = req.url ?? '/';
  if (url.charCodeAt(0) !== 0x2f /* / */) {
    const m = ABSOLUTE_FORM.exec(url);
    if (m) url = url.slice(m[0].length) || '/';
  }
  const q = url.indexOf('?');
  return q < 0 ? url : url.slice(0, q);
}

/**
 * The endpoint id of a webhook path (undefined for any other path). Percent-encoded unreserved
 * characters mean the characters themselves (RFC 3986 §6.2.2.2), and an id is made of nothing
 * else, so `%2D` finds the same endpoint as `-`; any other escape is left as it is (no endpoint has it).
 */
function endpointIdOf(path: string): string | undefined {
  if (!path.startsWith(WEBHOOK_PREFIX)) return undefined;
  const id = path.slice(WEBHOOK_PREFIX.length);
  if (!id.includes('%')) return id;
  return id.replace(/%([0-9A-Fa-f]{2})/g, (escape, hex: string) => {
    const c = String.fromCharCode(parseInt(hex, 16));
    return /[A-Za-z0-9._~-]/.test(c) ? c : escape;
  });
}

/**
 * The HTTP front: bounded header size and timeouts (Node enforces them before we see a
 * request), then routing to the ingress pipeline or the operational endpoints.
 */
export function createHttpServer(config: Config, ingress: Ingress, admin: AdminHandlers): Server {
  const answers = new OwedAnswers();
  const server = createServer({
    maxHeaderSize: config.limits.maxHeaderBytes,
    headersTimeout: config.limits.headersTimeoutMs,
    requestTimeout: config.limits.requestTimeoutMs,
    keepAliveTimeout: config.limits.keepAliveTimeoutMs,
    // How often Node checks the two timeouts above (default 30 s would let slow senders linger).
    connectionsCheckingInterval: Math.min(1000, config.limits.headersTimeoutMs),
    noDelay: true,
  });
  // Count is checked by the pipeline (431); 0 = Node must not silently drop extra headers.
  server.maxHeadersCount = 0;

  // `Expect: 100-continue`: Node would invite the body at once; the request handler decides instead
  // (the ingress sends 100 Continue only once every check before the body has passed).
  server.on('checkContinue', (req: IncomingMessage, res: ServerResponse) => {
    markAwaitingContinue(res);
    server.emit('request', req, res);
  });
  // Any other expectation cannot be met (Node's own answer would be a bare 417 without our JSON).
  server.on('checkExpectation', (req: IncomingMessage, res: ServerResponse) => {
    if (isClosing(req.socket)) return ignoreOnClosing(req);
    answers.opened(req, res);
    const refusal = new IngressError('expectation_failed', 'only 100-continue is supported');
    const endpointId = endpointIdOf(pathOf(req));
    // On a webhook path it is logged and counted like any refusal there.
    if (endpointId !== undefined) void ingress.handle(req, res, endpointId, performance.now(), refusal);
    else sendError(req, res, refusal);
  });
  server.on('request', (req: IncomingMessage, res: ServerResponse) => {
    // Behind a refusal that closes the connection (it came in the same bytes): not served.
    if (isClosing(req.socket)) return ignoreOnClosing(req);
    const startedAt = performance.now();
    answers.opened(req, res);
    const path = pathOf(req);

    const endpointId = endpointIdOf(path);
    if (endpointId !== undefined) {
      const refusal = req.method === 'POST' ? undefined : new IngressError('method_not_allowed', 'webhooks are POSTed');
      void ingress.handle(req, res, endpointId, startedAt, refusal);
      return;
    }
    if (path === '/healthz' || path === '/readyz' || path === '/metrics') {
      if (req.method !== 'GET' && req.method !== 'HEAD') {
        res.writeHead(405, { allow: 'GET, HEAD', 'content-type': 'application/json' });
        return void res.end('{"error":"method_not_allowed"}');
      }
      if (path === '/healthz') return sendJson(res, 200, '{"status":"ok"}');
      // A failing admin handler answers 503; its rejection must never go unhandled (that ends the process).
      if (path === '/metrics') {
        void admin.metrics().then(
          (text) => {
            res.writeHead(200, { 'content-type': 'text/plain; version=0.0.4; charset=utf-8' });
            res.end(text);
          },
          (err: unknown) => {
            admin.failed(path, err);
            sendJson(res, 503, '{"error":"metrics_unavailable"}', { 'retry-after': 5 });
          },
        );
        return;
      }
      void admin.notReady().then(
        (problems) => {
          if (problems === null) sendJson(res, 200, '{"status":"ready"}');
          else sendJson(res, 503, JSON.stringify({ status: 'not_ready', problems }), { 'retry-after': 5 });
        },
        (err: unknown) => {
          admin.failed('/readyz', err);
          sendJson(res, 503, '{"status":"not_ready","problems":["readiness check failed"]}', { 'retry-after': 5 });
        },
      );
      return;
    }
    afterRefusal(req, res, true);
    sendJson(res, 404, '{"error":"not_found"}');
  });

  // Malformed HTTP and oversized header blocks: answer plainly and close. A request pipelined
  // before the bad bytes may still be committing: its answer goes out first (its 200 must not be
  // replaced by the 400 of the bytes that followed it). Anything else (a timeout: the request in
  // progress is itself too slow; a reset connection) ends the connection at once, which is also
  // what aborts a body still being read and frees its budget.
  server.on('clientError', (err: NodeJS.ErrnoException, socket: Duplex) => {
    if (!socket.writable || err.code === 'ECONNRESET') return socket.destroy();
    const timeout = err.code === 'ERR_HTTP_REQUEST_TIMEOUT';
    const reason = err.code === 'HPE_HEADER_OVERFLOW' ? 'headers_too_large' : timeout ? 'request_timeout' : 'bad_request';
    const status = `${REASONS[reason].status} ${STATUS_CODES[REASONS[reason].status]}`;
    const body = `{"error":"${reason}"}`;
    // A request the ingress is reading logs itself (a timeout as request_timeout: markTimedOut, the
    // 408 it got); HTTP that never became a request is logged here.
    if (!answers.reading(socket)) ingress.refusedConnection(reason);
    else if (timeout) markTimedOut(socket);
    const answer = () => {
      if (!socket.writable) return socket.destroy();
      socket.end(`HTTP/1.1 ${status}\r\ncontent-type: application/json\r\ncontent-length: ${body.length}\r\nconnection: close\r\n\r\n${body}`);
    };
    if (err.code?.startsWith('HPE_')) answers.afterPending(socket, answer);
    else answer();
  });
  return server;
}

/**
 * The answers still owed on each connection (pipelined requests are answered in order), so a
 * parse error in bytes that followed complete requests can wait until those are answered.
 */
class OwedAnswers {
  /** Per connection: answers owed, the latest request's response (its `req` is that request), what runs when they are written. */
  private readonly bySocket = new WeakMap<Duplex, { owed: number; last: ServerResponse; then?: () => void; until: number }>();

  opened(req: IncomingMessage, res: ServerResponse): void {
    const socket = req.socket;
    let state = this.bySocket.get(socket);
    if (state) {
      state.owed++;
      state.last = res;
    } else {
      state = { owed: 1, last: res, until: 0 };
      this.bySocket.set(socket, state);
    }
    const s = state;
    // 'close' comes after the answer is written, or when the connection dies: either way it is no longer owed.
    res.once('close', () => {
      if (--s.owed > s.until || !s.then) return;
      const next = s.then;
      s.then = undefined;
      // The request in error was answered by its own handler meanwhile (its body too slow): that
      // answer stands; the connection only closes after it.
      if (s.until === 1 && s.last.writableEnded) return void socket.end();
      next();
    });
  }

  /** Whether the latest request on `socket` is still arriving, its answer owed (a handler is reading it). */
  reading(socket: Duplex): boolean {
    const state = this.bySocket.get(socket);
    return state !== undefined && state.owed > 0 && !state.last.req.complete;
  }

  /**
   * Runs `fn` once every answer owed on `socket` before the request in error is written. If the
   * latest request is still arriving, the error is in it (a malformed chunk): `fn` answers it, so
   * only the answers owed before it are waited for (an earlier request may still be committing,
   * and its 200 must go out first). Only the first call counts.
   */
  afterPending(socket: Duplex, fn: () => void): void {
    const state = this.bySocket.get(socket);
    const until = this.reading(socket) ? 1 : 0;
    if (!state || state.owed <= until) return fn();
    state.until = until;
    state.then ??= fn;
  }
}
