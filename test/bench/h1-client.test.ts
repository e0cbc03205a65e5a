import { createHash } from 'node:crypto';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { H1Pool } from '../../bench/h1-client.js';

/** The bench's numbers are only as true as its client: it must report exactly what the server answered. */
describe('bench load generator HTTP/1.1 client', () => {
  let server: Server | undefined;
  let pool: H1Pool | undefined;
  afterEach(async () => {
    pool?.destroy();
    await new Promise((r) => (server ? server.close(r) : r(undefined)));
    server = pool = undefined;
  });

  async function serve(handler: (req: IncomingMessage, res: ServerResponse, body: Buffer) => void): Promise<{ url: string; sockets: Set<Socket> }> {
    const sockets = new Set<Socket>();
    server = createServer((req, res) => {
      const parts: Buffer[] = [];
      req.on('data', (c: Buffer) => parts.push(c));
      req.on('end', () => handler(req, res, Buffer.concat(parts)));
    });
    server.on('connection', (s: Socket) => sockets.add(s));
    await new Promise<void>((r) => server!.listen(0, '127.0.0.1', r));
    return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, sockets };
  }

  it('sends the exact body and headers, reports status and body, and keeps to its connection cap', async () => {
    const { url, sockets } = await serve((req, res, body) => {
      const reply = JSON.stringify({ path: req.url, sig: req.headers['stripe-signature'], len: req.headers['content-length'], sha: createHash('sha256').update(body).digest('hex') });
      res.writeHead(req.url === '/missing' ? 404 : 200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(reply) });
      res.end(reply);
    });
    pool = new H1Pool(url, 3);
    const bodies = Array.from({ length: 40 }, (_, i) => Buffer.alloc(1000 + i * 997, i));
    const answers = await Promise.all(bodies.map((b, i) => pool!.post(i === 7 ? '/missing' : '/hook', ['content-type: application/json', `stripe-signature: t=1,v1=${i}`], b)));
    answers.forEach((a, i) => {
      expect(a.status).toBe(i === 7 ? 404 : 200);
      expect(JSON.parse(a.body)).toEqual({
        path: i === 7 ? '/missing' : '/hook', sig: `t=1,v1=${i}`, len: String(bodies[i]!.length), sha: createHash('sha256').update(bodies[i]!).digest('hex'),
      });
    });
    expect(sockets.size).toBe(3);
  });

  it('a response with Connection: close is reported, and the next request goes out on a new connection', async () => {
    let n = 0;
    const { url, sockets } = await serve((_req, res) => {
      if (n++ === 0) {
        const reply = '{"error":"payload_too_large"}';
        res.writeHead(413, { connection: 'close', 'content-type': 'application/json', 'content-length': reply.length });
        res.end(reply);
      } else res.end('{"ok":true}');
    });
    pool = new H1Pool(url, 1);
    expect(await pool.post('/', [], Buffer.from('x'))).toEqual({ status: 413, body: '{"error":"payload_too_large"}' });
    expect(await pool.post('/', [], Buffer.from('y'))).toEqual({ status: 200, body: '{"ok":true}' });
    expect(sockets.size).toBe(2);
  });

  it('refuses a response it cannot frame (chunked) rather than guess, and a dropped connection fails only its own request', async () => {
    let n = 0;
    const { url } = await serve((req, res) => {
      n++;
      if (req.url === '/chunked') {
        res.write('{"part":1');
        res.end('}');
      } else if (req.url === '/drop') req.socket.destroy();
      else res.end(`{"n":${n}}`);
    });
    pool = new H1Pool(url, 2);
    await expect(pool.post('/chunked', [], Buffer.from('a'))).rejects.toMatchObject({ code: 'EH1PROTO' });
    await expect(pool.post('/drop', [], Buffer.from('b'))).rejects.toMatchObject({ code: 'ECONNRESET' });
    const ok = await pool.post('/fine', [], Buffer.from('c'));
    expect(ok.status).toBe(200);
    expect(JSON.parse(ok.body)).toEqual({ n: 3 });
  });
});
