import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { Config } from '../config/schema.js';
import { IngressError } from '../errors.js';
import type { Ingress } from './ingress.js';
import { sendError, sendJson } from './respond.js';

export interface AdminHandlers {
  metrics(): Promise<string>;
  /** null when ready; otherwise the reasons it is not. */
  notReady(): Promise<string[] | null>;
  /** A handler above rejected (its request got 503): the place to log why. */
  failed(path: '/metrics' | '/readyz', err: unknown): void;
}

const WEBHOOK_PREFIX = '/webhooks/';

/**
 * The HTTP front: bounded header size and timeouts (Node enforces them before we see a
 * request), then routing to the ingress pipeline or the operational endpoints.
 */
export function createHttpServer(config: Config, ingress: Ingress, admin: AdminHandlers): Server {
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
  server.on('checkContinue', (req: IncomingMessage, res: ServerResponse) => server.emit('request', req, res));
  server.on('request', (req: IncomingMessage, res: ServerResponse) => {
    const startedAt = performance.now();
    const url = req.url ?? '/';
    const q = url.indexOf('?');
    const path = q < 0 ? url : url.slice(0, q);

    if (path.startsWith(WEBHOOK_PREFIX)) {
      if (req.method !== 'POST') return sendError(req, res, new IngressError('method_not_allowed', 'webhooks are POSTed'));
      void ingress.handle(req, res, path.slice(WEBHOOK_PREFIX.length), startedAt);
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
    sendJson(res, 404, '{"error":"not_found"}', req.complete ? {} : { connection: 'close' });
  });

  // Malformed HTTP and oversized header blocks: answer plainly and close.
  server.on('clientError', (err: NodeJS.ErrnoException, socket) => {
    if (!socket.writable) return socket.destroy();
    const status = err.code === 'HPE_HEADER_OVERFLOW' ? '431 Request Header Fields Too Large' : err.code === 'ERR_HTTP_REQUEST_TIMEOUT' ? '408 Request Timeout' : '400 Bad Request';
    const reason = err.code === 'HPE_HEADER_OVERFLOW' ? 'headers_too_large' : err.code === 'ERR_HTTP_REQUEST_TIMEOUT' ? 'request_timeout' : 'bad_request';
    const body = `{"error":"${reason}"}`;
    socket.end(`HTTP/1.1 ${status}\r\ncontent-type: application/json\r\ncontent-length: ${body.length}\r\nconnection: close\r\n\r\n${body}`);
  });
  return server;
}
