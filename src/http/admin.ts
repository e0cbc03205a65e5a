import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { Duplex } from 'node:stream';
import { clientErrorReason, endWithRefusal, sentNothing } from './client-error.js';
import { afterRefusal } from './linger.js';
import { sendJson } from './respond.js';

/** What /metrics and /readyz answer with, in `serve` (app.ts) and in `work` (workers.ts). */
export interface AdminHandlers {
  metrics(): Promise<string>;
  /** null when ready; otherwise the reasons it is not. */
  notReady(): Promise<string[] | null>;
  /** A handler above rejected (its request got 503): the place to log why. */
  failed(path: '/metrics' | '/readyz', err: unknown): void;
}

/**
 * The readiness problems every process has (serve's and work's /readyz): secrets not loaded, the
 * engine's own, the caller's `more`, and a database that does not answer with this build's
 * schema, in that order. Empty: none.
 */
export async function commonProblems(keyring: { readonly problems: readonly string[] }, engine: { readonly problems: readonly string[] }, store: { ping(): Promise<void> }, more: readonly string[] = []): Promise<string[]> {
  const problems = [...keyring.problems, ...engine.problems, ...more];
  try {
    await store.ping();
  } catch (err) {
    problems.push(`database: ${(err as Error).message}`);
  }
  return problems;
}

/**
 * Which operational paths a server answers: all three, or (the webhook port of a `serve` whose
 * metrics have a port of their own) only /healthz, which says nothing but "up" and lets a load
 * balancer in front of the webhook port check it. /readyz names config paths and database errors,
 * and /metrics names endpoints and volumes: neither belongs on a port open to the internet.
 */
export type AdminRoutes = 'all' | 'healthz';

/**
 * Answers GET/HEAD /healthz, /readyz and /metrics (405 for another method); false, answering
 * nothing, for any other path (and for /readyz and /metrics when `routes` is 'healthz'). A
 * failing handler answers 503: its rejection must never go unhandled (that ends the process).
 */
export function serveAdmin(path: string, req: IncomingMessage, res: ServerResponse, admin: AdminHandlers, routes: AdminRoutes = 'all'): boolean {
  if (path !== '/healthz' && (routes === 'healthz' || (path !== '/readyz' && path !== '/metrics'))) return false;
  if (req.method !== 'GET' && req.method !== 'HEAD') {
    // As any refusal before the body: a small one is dropped, a large one is not read (linger.ts).
    afterRefusal(req, res, true);
    sendJson(res, 405, '{"error":"method_not_allowed"}', { allow: 'GET, HEAD' });
    return true;
  }
  if (path === '/healthz') {
    sendJson(res, 200, '{"status":"ok"}');
    return true;
  }
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
    return true;
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
  return true;
}

/** `scheme://authority` at the start of an absolute-form target (a proxy's `POST http://host/…`). */
const ABSOLUTE_FORM = /^[A-Za-z][A-Za-z0-9+.-]*:\/\/[^/?#]*/;

/**
 * The request target's path, without its query. An absolute-form target is reduced to its path:
 * RFC 9112 §3.2.2 says a server must accept that form, and some proxies send it. Both servers
 * (server.ts and the operational one below) route by it.
 */
export function pathOf(req: IncomingMessage): string {
  let url = req.url ?? '/';
  if (url.charCodeAt(0) !== 0x2f /* / */) {
    const m = ABSOLUTE_FORM.exec(url);
    if (m) url = url.slice(m[0].length) || '/';
  }
  const q = url.indexOf('?');
  return q < 0 ? url : url.slice(0, q);
}

/**
 * A server with only the operational endpoints (`webhook-inbox work --metrics-port`): 404 for
 * any other path. It takes no webhooks, so it needs none of the ingress server's framing care;
 * only bounded waits for slow clients.
 */
export function createAdminServer(admin: AdminHandlers): Server {
  const server = createServer({ headersTimeout: 10_000, requestTimeout: 10_000, keepAliveTimeout: 5_000, connectionsCheckingInterval: 1_000 });
  server.on('request', (req: IncomingMessage, res: ServerResponse) => {
    if (!serveAdmin(pathOf(req), req, res, admin)) sendJson(res, 404, '{"error":"not_found"}');
  });
  // HTTP that never became a request gets what the webhook port gives it (a status and a JSON
  // reason, then the close), not Node's bare 400; a connection that sent nothing is just closed.
  server.on('clientError', (err: NodeJS.ErrnoException, socket: Duplex) => {
    if (!socket.writable || err.code === 'ECONNRESET' || sentNothing(err, socket)) return socket.destroy();
    endWithRefusal(socket, clientErrorReason(err));
  });
  return server;
}
