import { createServer, connect, type Server, type Socket } from 'node:net';
import { Transform } from 'node:stream';

/**
 * A loopback TCP proxy in front of a real server, so a test can make the database truly
 * unreachable (connections cut, port closed) and bring it back — no mocks.
 */
export class TcpProxy {
  private server: Server | null = null;
  private sockets = new Set<Socket>();
  /** Open connections as [client, upstream] pairs, for freeze(). */
  private pairs = new Set<[Socket, Socket]>();
  /** Set by silenceAt(); disarmed by the chunk it matches. */
  private trap: ((clientChunk: Buffer) => boolean) | undefined;
  port = 0;

  constructor(private readonly targetPort: number, private readonly targetHost = '127.0.0.1') {}

  async start(port = this.port): Promise<number> {
    this.server = createServer((client) => {
      const upstream = connect(this.targetPort, this.targetHost);
      const pair: [Socket, Socket] = [client, upstream];
      this.pairs.add(pair);
      for (const s of pair) {
        this.sockets.add(s);
        s.on('close', () => { this.sockets.delete(s); this.pairs.delete(pair); });
        s.on('error', () => { client.destroy(); upstream.destroy(); });
      }
      client.pipe(this.gate()).pipe(upstream);
      upstream.pipe(client);
    });
    await new Promise<void>((resolve) => this.server!.listen(port, '127.0.0.1', resolve));
    this.port = (this.server.address() as { port: number }).port;
    return this.port;
  }

  /**
   * Every connection open now goes silent both ways, its sockets left open: a link that died
   * without a FIN or RST (a NAT or firewall dropped it). New connections still pass.
   */
  freeze(): void {
    for (const [client, upstream] of this.pairs) {
      client.unpipe(); // stops feeding its gate
      upstream.unpipe();
      // Read and discard, so neither side's writes ever block or fail.
      for (const s of [client, upstream]) {
        s.removeAllListeners('data');
        s.on('data', () => undefined);
        s.resume();
      }
    }
    this.pairs.clear();
  }

  /**
   * The next chunk a client sends that `match`es, and all it sends after it on that connection,
   * never reach the server: a link that died mid-conversation (the server never answers that request).
   */
  silenceAt(match: (clientChunk: Buffer) => boolean): void {
    this.trap = match;
  }

  /** Passes a client's bytes on until silenceAt()'s trap matches one of its chunks. */
  private gate(): Transform {
    let silent = false;
    return new Transform({
      transform: (chunk: Buffer, _encoding, done) => {
        if (!silent && this.trap?.(chunk)) {
          this.trap = undefined;
          silent = true;
        }
        done(null, silent ? undefined : chunk);
      },
    });
  }

  /** Closes the port and cuts every open connection. */
  async stop(): Promise<void> {
    for (const s of this.sockets) s.destroy();
    this.sockets.clear();
    await new Promise<void>((resolve) => (this.server ? this.server.close(() => resolve()) : resolve()));
    this.server = null;
  }
}
