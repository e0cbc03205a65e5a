/**
 * A minimal HTTP/1.1 client for the rate load generator: keep-alive connections to one host, one
 * request at a time on each (like a provider's sender), Content-Length framing only.
 *
 * Why not undici: the load generator shares the two cores with the server it measures, so its
 * CPU is interference. At 2,000 req/s undici's pool spent ~0.45–0.55 of a core (dispatcher
 * machinery, llhttp, per-request objects); this writes one pre-formatted head plus the body and
 * reads a status line and a Content-Length. A response it cannot frame (chunked, no length, a
 * malformed head) fails that request loudly and drops the connection; it never guesses.
 */
import { connect, type Socket } from 'node:net';

export interface H1Response {
  readonly status: number;
  readonly body: string;
}

interface Pending {
  readonly head: Buffer;
  readonly body: Buffer;
  resolve(r: H1Response): void;
  reject(e: Error): void;
}

const CRLF2 = Buffer.from('\r\n\r\n');

/** A response this client will not frame; counted by the loadgen as `err:EH1PROTO`. */
const protocolError = (message: string) => Object.assign(new Error(message), { code: 'EH1PROTO' });
const MAX_HEAD_BYTES = 16 * 1024;

class H1Connection {
  private readonly socket: Socket;
  private current: Pending | null = null;
  private buf: Buffer = Buffer.alloc(0);
  /** Once the head is parsed: status, body length, and whether the server will close. */
  private status = 0;
  private bodyAt = -1;
  private bodyLength = 0;
  private closeAfter = false;
  dead = false;

  constructor(host: string, port: number, private readonly onIdle: (c: H1Connection) => void, private readonly onDead: (c: H1Connection) => void) {
    this.socket = connect({ host, port, noDelay: true });
    this.socket.on('data', (chunk: Buffer) => this.onData(chunk));
    this.socket.on('error', (err) => this.fail(err));
    this.socket.on('close', () => this.fail(Object.assign(new Error('connection closed'), { code: 'ECONNRESET' })));
  }

  send(p: Pending): void {
    this.current = p;
    this.socket.cork();
    this.socket.write(p.head);
    this.socket.write(p.body);
    this.socket.uncork();
  }

  private onData(chunk: Buffer): void {
    if (!this.current) return this.fail(protocolError('data with no request outstanding'));
    this.buf = this.buf.length === 0 ? chunk : Buffer.concat([this.buf, chunk]);
    if (this.bodyAt < 0 && !this.parseHead()) return;
    if (this.buf.length < this.bodyAt + this.bodyLength) return;
    if (this.buf.length > this.bodyAt + this.bodyLength) return this.fail(protocolError('bytes after the response (pipelining is off)'));
    const done = this.current;
    const res = { status: this.status, body: this.buf.toString('utf8', this.bodyAt, this.bodyAt + this.bodyLength) };
    this.current = null;
    this.buf = Buffer.alloc(0);
    this.bodyAt = -1;
    if (this.closeAfter) this.retire();
    done.resolve(res);
    if (!this.dead) this.onIdle(this);
  }

  /** Parses the status line and headers once they are all in; false while incomplete. */
  private parseHead(): boolean {
    const end = this.buf.indexOf(CRLF2);
    if (end < 0) {
      if (this.buf.length > MAX_HEAD_BYTES) this.fail(protocolError('response head too large'));
      return false;
    }
    const lines = this.buf.toString('latin1', 0, end).split('\r\n');
    const m = /^HTTP\/1\.[01] (\d{3})/.exec(lines[0]!);
    if (!m) {
      this.fail(protocolError(`malformed status line: ${JSON.stringify(lines[0]!.slice(0, 40))}`));
      return false;
    }
    let length = -1;
    this.closeAfter = false;
    for (let i = 1; i < lines.length; i++) {
      const line = lines[i]!;
      const colon = line.indexOf(':');
      const name = line.slice(0, colon).trim().toLowerCase();
      const value = line.slice(colon + 1).trim();
      if (name === 'content-length') length = Number(value);
      else if (name === 'transfer-encoding') length = -2;
      else if (name === 'connection' && value.toLowerCase() === 'close') this.closeAfter = true;
    }
    if (!Number.isSafeInteger(length) || length < 0) {
      this.fail(protocolError('response without a Content-Length (chunked framing is not supported here)'));
      return false;
    }
    this.status = Number(m[1]);
    this.bodyAt = end + CRLF2.length;
    this.bodyLength = length;
    return true;
  }

  private retire(): void {
    if (this.dead) return;
    this.dead = true;
    this.socket.destroy();
    this.onDead(this);
  }

  private fail(err: Error): void {
    const p = this.current;
    this.current = null;
    this.retire();
    p?.reject(err);
  }

  close(): void {
    this.retire();
  }
}

/** Up to `connections` keep-alive connections; requests beyond that wait in order. */
export class H1Pool {
  private readonly idle: H1Connection[] = [];
  private readonly all = new Set<H1Connection>();
  private readonly waiting: Pending[] = [];
  private readonly host: string;
  private readonly port: number;
  private readonly prefix: string;

  constructor(url: string, private readonly connections: number) {
    const u = new URL(url);
    this.host = u.hostname;
    this.port = Number(u.port || 80);
    this.prefix = `Host: ${u.host}\r\n`;
  }

  /** POST `body` to `path` with these extra header lines (each "name: value"). */
  post(path: string, headers: readonly string[], body: Buffer): Promise<H1Response> {
    return this.send(this.head(path, headers, body.length), body);
  }

  /** The request head of a POST to `path` with these header lines and a body of `length` bytes. */
  head(path: string, headers: readonly string[], length: number): Buffer {
    let lines = '';
    for (const h of headers) lines += `${h}\r\n`;
    return Buffer.from(`POST ${path} HTTP/1.1\r\n${this.prefix}${lines}content-length: ${length}\r\n\r\n`, 'latin1');
  }

  /** Sends a request whose head was built by `head` (so a load generator can build them ahead). */
  send(head: Buffer, body: Buffer): Promise<H1Response> {
    return new Promise((resolve, reject) => {
      const p: Pending = { head, body, resolve, reject };
      const c = this.idle.pop() ?? (this.all.size < this.connections ? this.open() : undefined);
      if (c) c.send(p);
      else this.waiting.push(p);
    });
  }

  private open(): H1Connection {
    const c = new H1Connection(this.host, this.port, (conn) => this.release(conn), (conn) => this.forget(conn));
    this.all.add(c);
    return c;
  }

  private release(c: H1Connection): void {
    const next = this.waiting.shift();
    if (next) c.send(next);
    else this.idle.push(c);
  }

  private forget(c: H1Connection): void {
    this.all.delete(c);
    const i = this.idle.indexOf(c);
    if (i >= 0) this.idle.splice(i, 1);
    // A waiting request takes the freed slot on a new connection.
    const next = this.waiting.shift();
    if (next) this.open().send(next);
  }

  destroy(): void {
    for (const c of [...this.all]) c.close();
    for (const p of this.waiting.splice(0)) p.reject(new Error('pool destroyed'));
  }
}
