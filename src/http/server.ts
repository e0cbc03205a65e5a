import { createServer, ServerResponse, type IncomingMessage, type Server } from 'node:http';
import type { Socket } from 'node:net';
import type { Duplex } from 'node:stream';
import type { Config } from '../config/schema.js';
import { IngressError } from '../errors.js';
import { pathOf, serveAdmin, type AdminHandlers, type AdminRoutes } from './admin.js';
import { clientErrorReason, endWithRefusal, sentNothing } from './client-error.js';
import type { Ingress } from './ingress.js';
import { afterRefusal, closeAfterAnswer, ignoreOnClosing, isClosing, LINGER } from './linger.js';
import { markAnsweredRaw, markAwaitingContinue, sendError, sendJson } from './respond.js';

export type { AdminHandlers } from './admin.js';

const WEBHOOK_PREFIX = '/webhooks/';

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
 * A request this server cannot frame safely, answered and then closed:
 * - its Host is missing (HTTP/1.1) or repeated: RFC 9112 §3.2 asks for 400. Checked here rather
 *   than by Node (requireHostHeader), whose bare 400 had no reason, no log line, and did not stop a
 *   request pipelined behind it from being committed, unanswered;
 * - its version is not HTTP/1.x: Node's parser takes `HTTP/2.0` (other versions it refuses) on an
 *   HTTP/1 connection and frames it as 1.0, without the Host rule; 505 (RFC 9110 §15.6.6).
 */
function framingRefusal(req: IncomingMessage): IngressError | undefined {
  if (req.httpVersionMajor !== 1) return new IngressError('http_version_not_supported', `HTTP/${req.httpVersion} is not HTTP/1.0 or 1.1`);
  const hosts = req.headersDistinct.host?.length ?? 0;
  if (hosts > 1) return new IngressError('bad_host', 'Host is sent more than once');
  if (hosts === 0 && req.httpVersionMajor === 1 && req.httpVersionMinor >= 1) return new IngressError('bad_host', 'an HTTP/1.1 request needs a Host');
  return undefined;
}

/**
 * Requests after which nothing more on the connection can be read safely, answered and then closed:
 * - an Upgrade request (we never upgrade): Node's parser stops after it and drops the rest of that
 *   read, so a request pipelined behind it would go unanswered and the next answer on the
 *   connection would be taken for its answer;
 * - HTTP/1.0 with Transfer-Encoding: RFC 9112 §6.1 says its framing is to be treated as faulty
 *   (a smuggling shape: another hop may have framed it otherwise).
 */
function endsConnection(req: IncomingMessage): boolean {
  if (req.httpVersionMinor === 0 && req.headers['transfer-encoding'] !== undefined) return true;
  return req.headers.upgrade !== undefined && /(?:^|,)\s*upgrade\s*(?:,|$)/i.test(req.headers.connection ?? '');
}

/**
 * The HTTP front: bounded header size and timeouts (Node enforces them before we see a
 * request), then routing to the ingress pipeline or the operational endpoints.
 */
export function createHttpServer(config: Config, ingress: Ingress, admin: AdminHandlers, adminRoutes: AdminRoutes = 'all'): Server {
  const answers = new OwedAnswers();
  // Closing: it listened, and listens no more (server.close(), a shutdown).
  let listened = false;
  const closing = () => listened && !server.listening;
  /**
   * Once the server is closing, every answer says `Connection: close` and its connection ends
   * after it (lingering, linger.ts), so the sender sends nothing more on it. Left to keep-alive, a
   * sender busy with back-to-back requests (a provider's burst) went on sending on it, and it was
   * closed under one of them (idle between two, or cut at the end of the grace), unanswered.
   */
  class Response extends ServerResponse {
    override writeHead(statusCode: number, ...rest: [any?, any?]): this {
      if (closing() && !this.headersSent) closeAfterAnswer(this.req, this);
      return super.writeHead(statusCode, ...rest);
    }
  }
  const server = createServer({
    ServerResponse: Response,
    maxHeaderSize: config.limits.maxHeaderBytes,
    headersTimeout: config.limits.headersTimeoutMs,
    requestTimeout: config.limits.requestTimeoutMs,
    keepAliveTimeout: config.limits.keepAliveTimeoutMs,
    // How often Node checks the two timeouts above (default 30 s would let slow senders linger).
    connectionsCheckingInterval: Math.min(1000, config.limits.headersTimeoutMs),
    noDelay: true,
    requireHostHeader: false, // hostRefusal answers it instead
  });
  // A sender that shuts down its side after its request still reads the answer (Node's default
  // aborts the request at the FIN while the pipeline goes on to commit it: stored, never answered).
  // An undocumented but long-standing property of http.Server (Node 20 and later too).
  (server as Server & { httpAllowHalfOpen: boolean }).httpAllowHalfOpen = true;
  // Count is checked by the pipeline (431); 0 = Node must not silently drop extra headers.
  server.maxHeadersCount = 0;
  server.once('listening', () => (listened = true));
  const open = new Map<Socket, number>();
  acceptedAt.set(server, open);
  server.on('connection', (socket: Socket) => {
    open.set(socket, performance.now());
    socket.once('close', () => open.delete(socket));
  });

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
    const bad = framingRefusal(req);
    if (bad || endsConnection(req)) closeAfterAnswer(req, res);
    const refusal = bad ?? new IngressError('expectation_failed', 'only 100-continue is supported');
    const endpointId = endpointIdOf(pathOf(req));
    // On a webhook path it is logged and counted like any refusal there; elsewhere a bad Host is
    // malformed HTTP, logged and counted as such.
    if (endpointId !== undefined) void ingress.handle(req, res, endpointId, performance.now(), refusal);
    else {
      if (bad) ingress.refusedConnection(bad.reason);
      sendError(req, res, refusal);
    }
  });
  server.on('request', (req: IncomingMessage, res: ServerResponse) => {
    // Behind a refusal that closes the connection (it came in the same bytes): not served.
    if (isClosing(req.socket)) return ignoreOnClosing(req);
    const startedAt = performance.now();
    answers.opened(req, res);
    const path = pathOf(req);
    const bad = framingRefusal(req);
    if (bad || endsConnection(req)) closeAfterAnswer(req, res);

    const endpointId = endpointIdOf(path);
    if (endpointId !== undefined) {
      const refusal = bad ?? (req.method === 'POST' ? undefined : new IngressError('method_not_allowed', 'webhooks are POSTed'));
      void ingress.handle(req, res, endpointId, startedAt, refusal);
      return;
    }
    if (bad) {
      // Malformed HTTP on any path: logged and counted, as on a webhook path or as the parser's refusals.
      ingress.refusedConnection(bad.reason);
      return sendError(req, res, bad);
    }
    if (serveAdmin(path, req, res, admin, adminRoutes)) return;
    afterRefusal(req, res, true);
    sendJson(res, 404, '{"error":"not_found"}');
  });

  // Malformed HTTP, oversized header blocks and requests too slow to arrive: answer plainly and
  // close. A request pipelined before the bad bytes (or the late request) may still be committing:
  // its answer goes out first (its 200 must not be replaced by the 400 or 408 of what followed it).
  // Anything else (a reset connection) ends the connection at once.
  // Only a connection's first error is answered, logged and counted: once in error, Node's parser
  // fails again on every later read, and the timeout check fires again, while that answer waits.
  const erred = new WeakSet<Duplex>();
  server.on('clientError', (err: NodeJS.ErrnoException, socket: Duplex) => {
    if (!socket.writable || err.code === 'ECONNRESET') return socket.destroy();
    // The request was refused before its body and answered, and the rest of its body, being
    // dropped (linger.ts afterRefusal), stopped coming: nothing is owed, and a second answer,
    // log line and count for the same request would be wrong.
    if (answers.answeredMidBody(socket)) return socket.destroy();
    // Bytes after a request that closes the connection (`Connection: close`, HTTP/1.0 without
    // keep-alive): RFC 9112 §9.6, no further request is processed, so none is answered, logged or
    // counted; the connection closes once the answers owed are written.
    if (err.code === 'HPE_CLOSED_CONNECTION') return;
    if (erred.has(socket)) return;
    erred.add(socket);
    if (sentNothing(err, socket)) return socket.destroy();
    const reason = clientErrorReason(err);
    // A request the ingress is reading logs itself, with this answer (markAnsweredRaw): it is what
    // the sender got. HTTP that never became a request is logged here.
    const reading = answers.reading(socket);
    if (!reading) ingress.refusedConnection(reason);
    const answer = () => {
      if (!socket.writable) return socket.destroy();
      // Marked only when sent: one deferred behind earlier answers may be overtaken by the
      // request's own handler (its body too slow), whose answer then stands.
      if (reading) markAnsweredRaw(reading, reason);
      endWithRefusal(socket, reason);
    };
    if (err.code?.startsWith('HPE_') || err.code === 'ERR_HTTP_REQUEST_TIMEOUT') answers.afterPending(socket, answer);
    else answer();
  });

  // CONNECT (a proxy tunnel; never ours): Node would drop the connection without a word. A request
  // pipelined before it may still be committing: its answer goes out first (Node hands over the
  // socket at once, and a 405 written then would take that request's place).
  server.on('connect', (_req: IncomingMessage, socket: Duplex) => {
    ingress.refusedConnection('method_not_allowed');
    const body = '{"error":"method_not_allowed"}';
    socket.on('error', () => socket.destroy());
    // Whatever the client sends after is dropped.
    socket.resume();
    answers.afterPending(socket, () => {
      if (!socket.writable) return socket.destroy();
      // The client has LINGER.maxMs to close its side; if it already has, the socket closes once the answer is written.
      const cut = setTimeout(() => socket.destroy(), LINGER.maxMs);
      socket.once('close', () => clearTimeout(cut));
      socket.once('end', () => socket.destroy());
      socket.end(`HTTP/1.1 405 Method Not Allowed\r\nallow: POST\r\ncontent-type: application/json\r\ncontent-length: ${body.length}\r\nconnection: close\r\n\r\n${body}`, () => {
        if (socket.readableEnded) socket.destroy();
      });
    });
  });
  return server;
}

/** When each open connection of a server was accepted (performance.now()), for closeSilentConnections. */
const acceptedAt = new WeakMap<Server, Map<Socket, number>>();

/** A connection silent this long since it was accepted is not about to send its request. */
export const SILENT_MS = 1000;

/**
 * Closes a closing server's connections that have sent nothing for `silentMs` since they were
 * accepted (pre-opened by a client or a proxy, a TCP check). Node counts them as requests under
 * way, not idle, so closeIdleConnections left them open, and the shutdown waited out its whole
 * grace period for them (headersTimeoutMs, longer, would have ended them). A younger one is left:
 * its request may be on its way.
 */
export function closeSilentConnections(server: Server, silentMs = SILENT_MS): void {
  const open = acceptedAt.get(server);
  if (!open) return;
  const now = performance.now();
  for (const [socket, at] of open) {
    if (socket.bytesRead > 0) open.delete(socket);
    else if (now - at >= silentMs) socket.destroy();
  }
}

/**
 * The answers still owed on each connection (pipelined requests are answered in order), so a
 * parse error in bytes that followed complete requests can wait until those are answered.
 */
class OwedAnswers {
  /** Per connection: answers owed, the latest request's response (its `req` is that request), what runs when they are written. */
  private readonly bySocket = new WeakMap<Duplex, { owed: number; last?: ServerResponse; then?: () => void; until: number }>();

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
      // Nothing owed, nothing waiting, and the request all read: let the request go. Kept as
      // `last`, an answered request (its body, its handler's closures) lived as long as its
      // keep-alive connection idled, up to maxBodyBytes per idle connection outside the in-flight
      // body budget (test/http/idle-connection-memory.test.ts).
      if (--s.owed === 0 && !s.then && s.last?.req.complete) return void (s.last = undefined);
      if (s.owed > s.until || !s.then) return;
      const next = s.then;
      s.then = undefined;
      // The request in error was answered by its own handler meanwhile (its body too slow): that
      // answer stands; the connection only closes after it.
      if (s.until === 1 && s.last?.writableEnded) return void socket.end();
      next();
    });
  }

  /** The latest request on `socket` if it is still arriving, its answer owed (a handler is reading it). */
  reading(socket: Duplex): IncomingMessage | undefined {
    const state = this.bySocket.get(socket);
    return state?.last !== undefined && state.owed > 0 && !state.last.req.complete ? state.last.req : undefined;
  }

  /**
   * Whether the latest request on `socket` is still arriving though every answer, its own too, has
   * been written (a refusal before its body). An answer written but queued behind an earlier one
   * still owed is not: destroying the socket would lose that earlier answer (afterPending waits).
   */
  answeredMidBody(socket: Duplex): boolean {
    const state = this.bySocket.get(socket);
    return state?.last !== undefined && state.owed === 0 && !state.last.req.complete;
  }

  /**
   * Runs `fn` once every answer owed on `socket` before the request in error is written. If the
   * latest request is still arriving, the error is in it (a malformed chunk): `fn` answers it, so
   * only the answers owed before it are waited for (an earlier request may still be committing,
   * and its 200 must go out first). Only the first call counts.
   */
  afterPending(socket: Duplex, fn: () => void): void {
    const state = this.bySocket.get(socket);
    const until = this.reading(socket) !== undefined ? 1 : 0;
    if (!state || state.owed <= until) return fn();
    state.until = until;
    state.then ??= fn;
  }
}
