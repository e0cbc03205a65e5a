import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Socket } from 'node:net';

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
