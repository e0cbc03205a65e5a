import { STATUS_CODES } from 'node:http';
import type { Duplex } from 'node:stream';
import { REASONS, type Reason } from '../errors.js';
import { LINGER } from './linger.js';

/**
 * Node's `clientError` (HTTP that never became a request, or a request timed out), as both
 * servers answer it: the webhook port (server.ts) and the operational one (admin.ts).
 */

/**
 * A connection that sent nothing at all before its timeout is no request: an idle pre-opened
 * connection, a TCP health check, a port scan. It is closed without an answer, a count or a log
 * line: counted, it showed as malformed requests, and a pooling client could read an unasked 408
 * as the answer to the request it sends next.
 */
export function sentNothing(err: NodeJS.ErrnoException, socket: Duplex): boolean {
  return err.code === 'ERR_HTTP_REQUEST_TIMEOUT' && (socket as Duplex & { bytesRead?: number }).bytesRead === 0;
}

/** The reason a clientError is answered with. */
export function clientErrorReason(err: NodeJS.ErrnoException): Reason {
  if (err.code === 'HPE_HEADER_OVERFLOW') return 'headers_too_large';
  // The HTTP/2 connection preface (`PRI * HTTP/2.0`, a client with prior knowledge): a request
  // line naming HTTP/2.0, answered as framingRefusal answers one the parser lets through.
  if (err.code === 'HPE_PAUSED_H2_UPGRADE') return 'http_version_not_supported';
  return err.code === 'ERR_HTTP_REQUEST_TIMEOUT' ? 'request_timeout' : 'bad_request';
}

/**
 * Writes `reason`'s status and `{"error": reason}` on the raw socket and ends it. The client has
 * LINGER.maxMs to close its side: one that never does held the connection for good, and with it
 * the body budget of a request timed out mid-body (released at its close).
 */
export function endWithRefusal(socket: Duplex, reason: Reason): void {
  const status = REASONS[reason].status;
  const body = `{"error":"${reason}"}`;
  const cut = setTimeout(() => socket.destroy(), LINGER.maxMs);
  socket.once('close', () => clearTimeout(cut));
  socket.end(`HTTP/1.1 ${status} ${STATUS_CODES[status]}\r\ncontent-type: application/json\r\ncontent-length: ${body.length}\r\nconnection: close\r\n\r\n${body}`);
}
