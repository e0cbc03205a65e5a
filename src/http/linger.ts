import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import { declaredContentLength } from './body.js';

/**
 * How a connection ends after a refusal sent before its request's body had all arrived (a body
 * past the limit, a Content-Length refused unread, 503 overloaded, 404…).
 *
 * Why not close at once: the sender is usually still writing its body (most clients write it
 * all, then read). Bytes that reach a closed socket are answered with a reset, and a reset can
 * destroy the refusal in the sender's receive buffer before it is read: the sender sees EPIPE or
 * ECONNRESET instead of its 413 (RFC 9112 §9.6). So the close happens in stages: the answer, then
 * our FIN; then what still arrives is read and dropped until the sender's FIN, and only then is
 * the socket closed. Bounded three ways, so a sender cannot hold the connection or make us read
 * without end: `idleMs` without a byte, `maxMs` in all, `maxBytes` dropped.
 *
 * No further request on the connection is served (§9.6: after a `Connection: close` answer the
 * server MUST NOT process further requests): one already parsed behind the refused request is
 * ignored (server.ts asks `isClosing`), and the HTTP parser is detached when the linger starts.
 */
export const LINGER = { idleMs: 1000, maxMs: 5000, maxBytes: 16 * 1024 * 1024 } as const;

const closing = new WeakSet<object>();

/** Whether the connection has answered a refusal with `Connection: close` (no further request is served on it). */
export function isClosing(socket: object): boolean {
  return closing.has(socket);
}

/**
 * Makes the answer about to be written on `res` say `Connection: close`, and marks `req`'s
 * connection as closing after it, with a lingering close. Node ends a connection whose answer
 * says `Connection: close` by calling the socket's `destroySoon()` once the answer is written;
 * this socket's own `destroySoon` lingers instead.
 */
export function closeAfterAnswer(req: IncomingMessage, res: ServerResponse): void {
  res.setHeader('connection', 'close');
  const socket = req.socket as Socket;
  if (closing.has(socket)) return;
  closing.add(socket);
  socket.destroySoon = () => linger(socket);
}

/**
 * Declared body bytes up to which a refusal sent before the body was read keeps the connection:
 * Node reads and drops the rest of the body once the answer is written (as nginx discards a
 * refused request's body), where a close would cost the sender a reconnect (often a TLS
 * handshake) per refusal — one per request under a rate limit. Past it, or for a body of
 * unknown length (chunked), the refusal closes with a lingering close.
 */
export const DRAIN_MAX_BYTES = 64 * 1024;

/**
 * Called with every refusal: decides how the connection goes on when the request's body has not
 * all arrived. A request that has no body, or whose body is complete, keeps its connection.
 * `drainable`: the refusal came before the body was read, and the sender may send its next
 * request (not a 413 or 503 overloaded, whose point is not to take the body; not a body cut off
 * mid-stream). Then a small declared body is dropped (bounded: a sender that does not finish it
 * within `LINGER.maxMs` is cut off); anything else closes after the answer.
 */
export function afterRefusal(req: IncomingMessage, res: ServerResponse, drainable: boolean): void {
  if (req.complete) return;
  if (!drainable || !smallBodyToCome(req)) return closeAfterAnswer(req, res);
  // Counted from when the answer is written (Node drops the body only then): behind an answer
  // still owed on the connection (a pipelined request committing) it waits, and a cut counted from
  // now destroyed the connection before that earlier answer went out.
  let cut: NodeJS.Timeout | undefined;
  const done = () => clearTimeout(cut);
  res.once('finish', () => {
    if (!req.readableEnded && !req.destroyed) cut = setTimeout(() => req.socket.destroy(), LINGER.maxMs);
  });
  req.once('end', done);
  req.once('close', done);
}

/**
 * Whether what is left of the request is a body of at most DRAIN_MAX_BYTES declared bytes (or
 * none at all: without Content-Length and Transfer-Encoding a request has no body, RFC 9112 §6.3).
 * Not with `Expect`: a sender waiting for 100 Continue may never send the body it declared, and
 * its next request would be read as that body.
 */
function smallBodyToCome(req: IncomingMessage): boolean {
  const h = req.headers;
  if (h['transfer-encoding'] !== undefined || h.expect !== undefined) return false;
  try {
    const declared = declaredContentLength(req);
    return declared === null || declared <= DRAIN_MAX_BYTES;
  } catch {
    return false; // a malformed Content-Length: no telling where the next request starts
  }
}

/** A request parsed behind a refused one on a closing connection: not served, its body dropped. */
export function ignoreOnClosing(req: IncomingMessage): void {
  req.resume();
}

function linger(socket: Socket): void {
  if (socket.destroyed) return;
  let dropped = 0;
  const close = () => socket.destroy();
  const idle = setTimeout(close, LINGER.idleMs);
  const whole = setTimeout(close, LINGER.maxMs);
  const drop = (chunk: Buffer) => {
    dropped += chunk.length;
    if (dropped > LINGER.maxBytes) return close();
    idle.refresh();
  };
  // Adding a 'data' listener also moves the bytes off Node's native parser path onto 'data'
  // events; the parser's own listener is then removed, so nothing after this is parsed.
  socket.on('data', drop);
  for (const l of socket.listeners('data')) if (l !== drop) socket.off('data', l as (c: Buffer) => void);
  socket.once('end', close);
  socket.once('close', () => {
    clearTimeout(idle);
    clearTimeout(whole);
  });
  if (socket.writable) socket.end();
  socket.resume();
}
