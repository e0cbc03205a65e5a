import { request } from 'node:http';
import { connect, type Socket } from 'node:net';

export interface HttpResponse {
  readonly status: number;
  readonly headers: Record<string, string | string[] | undefined>;
  readonly text: string;
  json(): any;
}

/**
 * POSTs exact bytes. `headers` is a list of [name, value] pairs so a test can send a header twice
 * or in any case, exactly as a client on the wire would.
 */
export function post(url: string, body: Buffer | string, headers: [string, string][] | Record<string, string>, method = 'POST'): Promise<HttpResponse> {
  const pairs = Array.isArray(headers) ? headers : Object.entries(headers);
  // With raw header pairs Node adds neither Host nor Content-Length; HTTP/1.1 requires Host.
  if (!pairs.some(([k]) => k.toLowerCase() === 'host')) pairs.unshift(['host', new URL(url).host]);
  const flat = pairs.flat();
  return new Promise((resolve, reject) => {
    const req = request(url, { method, headers: flat as unknown as Record<string, string>, agent: false }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => {
        const text = Buffer.concat(chunks).toString('utf8');
        resolve({ status: res.statusCode!, headers: res.headers, text, json: () => JSON.parse(text) });
      });
      res.on('error', reject);
    });
    req.on('error', reject);
    req.end(body);
  });
}

/** Writes raw bytes to the server and returns everything it answers until it closes or `waitMs` passes. */
export function rawExchange(port: number, bytes: Buffer | string, waitMs = 2000): Promise<{ text: string; closed: boolean }> {
  return new Promise((resolve) => {
    const sock = connect(port, '127.0.0.1');
    const chunks: Buffer[] = [];
    let closed = false;
    sock.on('data', (c) => chunks.push(c));
    sock.on('error', () => undefined);
    sock.on('close', () => {
      closed = true;
      finish();
    });
    const timer = setTimeout(finish, waitMs);
    function finish() {
      clearTimeout(timer);
      sock.destroy();
      resolve({ text: Buffer.concat(chunks).toString('latin1'), closed });
    }
    sock.write(bytes);
  });
}

/** Status code of the first HTTP response in a raw exchange. */
export function statusOf(raw: string): number {
  const m = /^HTTP\/1\.1 (\d{3})/.exec(raw);
  return m ? Number(m[1]) : 0;
}

/** A raw connection that collects what the server sends (latin1) and whether it closed. */
export async function rawConnection(port: number, allowHalfOpen = false): Promise<{ sock: Socket; text: () => string; closed: () => boolean }> {
  const sock = connect({ port, host: '127.0.0.1', allowHalfOpen });
  let text = '';
  let closed = false;
  sock.on('data', (c: Buffer) => { text += c.toString('latin1'); });
  sock.on('error', () => undefined);
  sock.on('close', () => { closed = true; });
  await new Promise((r) => sock.once('connect', r));
  return { sock, text: () => text, closed: () => closed };
}
