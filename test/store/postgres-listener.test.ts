import { createServer, connect, type Server, type Socket } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { PgListener } from '../../src/store/postgres/listener.js';
import { waitFor } from '../helpers/engine.js';
import { PG_ADMIN_URL, pgAvailable } from '../helpers/pg.js';

/**
 * A proxy in front of the real PostgreSQL that, once the client has sent its LISTEN, holds what
 * the server answers and then hands it over in one chunk with a backend termination's FATAL
 * error after it: the client reads the LISTEN's answer and the loss in one turn of its event
 * loop, as it does when the backend is terminated right after answering while the client's loop
 * was busy (seen in CI: the loss then went unreported).
 */
/** What a backend ended by pg_terminate_backend() sends: an ErrorResponse, FATAL 57P01. */
const TERMINATED = (() => {
  const fields = Buffer.from('SFATAL\0VFATAL\0C57P01\0Mterminating connection due to administrator command\0\0', 'latin1');
  const head = Buffer.alloc(5);
  head[0] = 0x45; // 'E'
  head.writeInt32BE(4 + fields.length, 1);
  return Buffer.concat([head, fields]);
})();

class AnswerThenCut {
  private server: Server | undefined;
  private readonly sockets = new Set<Socket>();
  cut = 0;

  async start(): Promise<number> {
    const target = new URL(PG_ADMIN_URL);
    this.server = createServer((client) => {
      const upstream = connect(Number(target.port || 5432), target.hostname);
      for (const s of [client, upstream]) {
        this.sockets.add(s);
        s.on('error', () => undefined);
        s.on('close', () => this.sockets.delete(s));
      }
      let listenSent = false;
      let held: Buffer[] = [];
      client.on('data', (chunk: Buffer) => {
        if (chunk.includes('LISTEN')) listenSent = true;
        upstream.write(chunk);
      });
      upstream.on('data', (chunk: Buffer) => {
        if (!listenSent) return void client.write(chunk);
        held.push(chunk);
        // ReadyForQuery ('Z') ends the LISTEN's answer: deliver it and the end of the connection at once.
        if (chunk.includes(0x5a)) {
          this.cut++;
          client.end(Buffer.concat([...held, TERMINATED]));
          held = [];
          upstream.destroy();
        }
      });
    });
    await new Promise<void>((resolve) => this.server!.listen(0, '127.0.0.1', resolve));
    return (this.server!.address() as { port: number }).port;
  }

  async stop(): Promise<void> {
    for (const s of this.sockets) s.destroy();
    await new Promise<void>((resolve) => (this.server ? this.server.close(() => resolve()) : resolve()));
  }
}

describe.runIf(await pgAvailable())('PostgreSQL new-work listener [postgres]', () => {
  const cleanups: (() => Promise<void>)[] = [];
  afterEach(async () => {
    for (const c of cleanups.splice(0).reverse()) await c();
  });

  it('a connection lost in the same read as its LISTEN answer is reported as a lost listener (it was listening), and reconnects', async () => {
    const proxy = new AnswerThenCut();
    const port = await proxy.start();
    cleanups.push(() => proxy.stop());
    const url = new URL(PG_ADMIN_URL);
    url.host = `127.0.0.1:${port}`;
    const listener = new PgListener({ connectionString: url.toString() }, 'wi_listener_test');
    cleanups.push(() => listener.close());
    const lost: string[] = [];
    listener.subscribe(() => undefined, (reason) => lost.push(reason.message));
    // Every connection through this proxy is cut as its LISTEN is answered; each is one loss.
    await waitFor(() => lost.length >= 2, 10_000, 'two lost listeners');
    expect(lost[0]).toMatch(/terminating connection/);
    expect(proxy.cut).toBeGreaterThanOrEqual(2);
    expect(lost.length).toBeLessThanOrEqual(proxy.cut);
  });
});
