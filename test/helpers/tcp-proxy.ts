import pg from 'pg';
import { createServer, connect, type Server, type Socket } from 'node:net';
import { Transform } from 'node:stream';
import { freshDatabase, type TestDatabase } from './stores.js';

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
  /** Set by cutAfterAnswer(); applies to every connection made after it. */
  private cut: { readonly ask: (clientChunk: Buffer) => boolean; readonly answered: (serverChunk: Buffer) => boolean; readonly tail: Buffer } | undefined;
  /** Set by muteAnswersAfter(); applies to every connection made after it. */
  private mute: ((clientChunk: Buffer) => boolean) | undefined;
  /** Set by hold(): what clients send is kept back (not forwarded) until release(). */
  private holding = false;
  private held: { readonly out: Transform; readonly chunks: Buffer[] }[] = [];
  /** Set by holdAnswers(): what servers send that it matches is kept back until releaseAnswers(). */
  private answerHold: ((serverChunk: Buffer) => boolean) | undefined;
  private heldAnswers: { readonly out: Transform; readonly chunks: Buffer[] }[] = [];
  /** Connections cutAfterAnswer() has cut. */
  cuts = 0;
  /** Connections accepted so far (a client that reconnects counts again). */
  accepted = 0;
  port = 0;

  constructor(private readonly targetPort: number, private readonly targetHost = '127.0.0.1') {}

  async start(port = this.port): Promise<number> {
    this.server = createServer((client) => {
      this.accepted++;
      const upstream = connect(this.targetPort, this.targetHost);
      const pair: [Socket, Socket] = [client, upstream];
      this.pairs.add(pair);
      for (const s of pair) {
        this.sockets.add(s);
        s.on('close', () => { this.sockets.delete(s); this.pairs.delete(pair); });
        s.on('error', () => { client.destroy(); upstream.destroy(); });
      }
      let asked = false;
      let muted = false;
      client.on('data', (chunk: Buffer) => {
        if (!asked && this.cut?.ask(chunk)) asked = true;
        if (!muted && this.mute?.(chunk)) muted = true;
      });
      client.pipe(this.gate()).pipe(upstream);
      upstream.pipe(this.answers(() => asked, () => muted, upstream)).pipe(client);
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
   * As freeze(), and the connections are never closed from the server's side, not even once a
   * client closes its own (its goodbye and FIN are acknowledged, nothing follows): a database
   * whose processes are stuck (a hung disk) while its host's TCP still answers. New connections pass.
   */
  hang(): void {
    for (const [client] of this.pairs) (client as { allowHalfOpen: boolean }).allowHalfOpen = true;
    this.freeze();
  }

  /**
   * The next chunk a client sends that `match`es, and all it sends after it on that connection,
   * never reach the server: a link that died mid-conversation (the server never answers that request).
   */
  silenceAt(match: (clientChunk: Buffer) => boolean): void {
    this.trap = match;
  }

  /** Whether silenceAt()'s trap is still waiting for its chunk. */
  get trapArmed(): boolean {
    return this.trap !== undefined;
  }

  /**
   * On every connection from now on: once the client sends a chunk that `ask` matches, what the
   * server answers is held until a chunk `answered` matches, then handed over in one chunk with
   * `tail` after it, and the connection is closed. The client reads the answer and what follows
   * in one turn of its event loop: a server that answered and failed at once while the client
   * was busy.
   */
  cutAfterAnswer(ask: (clientChunk: Buffer) => boolean, answered: (serverChunk: Buffer) => boolean, tail: Buffer): void {
    this.cut = { ask, answered, tail };
  }

  /**
   * On every connection from now on: once the client sends a chunk `ask` matches, that request
   * reaches the server but nothing the server answers reaches the client (a reply lost with its
   * link); stop() then cuts the connection.
   */
  muteAnswersAfter(ask: (clientChunk: Buffer) => boolean): void {
    this.mute = ask;
  }

  /** Passes the server's bytes on, but for cutAfterAnswer()'s hold-and-cut once the client has asked, and muteAnswersAfter(). */
  private answers(asked: () => boolean, muted: () => boolean, upstream: Socket): Transform {
    const held: Buffer[] = [];
    const late = { out: undefined as unknown as Transform, chunks: [] as Buffer[] };
    const t = new Transform({
      transform: (chunk: Buffer, _encoding, done) => {
        if (muted()) return done();
        if (this.answerHold?.(chunk)) {
          late.chunks.push(chunk);
          return done();
        }
        const cut = this.cut;
        if (!cut || !asked()) return done(null, chunk);
        held.push(chunk);
        if (!cut.answered(chunk)) return done();
        this.cuts++;
        done(null, Buffer.concat([...held, cut.tail]));
        upstream.unpipe(t);
        upstream.destroy();
        t.end();
      },
    });
    late.out = t;
    this.heldAnswers.push(late);
    return t;
  }

  /**
   * From now on the chunks servers send that `match` are kept back (in order, per connection)
   * until releaseAnswers(), and the rest pass: a server slow with some answers (RabbitMQ's
   * publisher confirms behind a busy disk) that still answers others at once.
   */
  holdAnswers(match: (serverChunk: Buffer) => boolean): void {
    this.answerHold = match;
  }

  /** Ends holdAnswers(): what was kept back reaches the clients, in order. */
  releaseAnswers(): void {
    this.answerHold = undefined;
    for (const h of this.heldAnswers) for (const c of h.chunks.splice(0)) h.out.push(c);
  }

  /**
   * From now on what clients send is kept back, not forwarded (kept in order, per connection):
   * a server that stopped reading its sockets, as RabbitMQ does from a publisher it has blocked.
   * The server's side still reaches the clients. release() forwards what was kept.
   */
  hold(): void {
    this.holding = true;
  }

  /** Ends hold(): what was kept back goes to the server, in order, and later bytes pass again. */
  release(): void {
    this.holding = false;
    for (const h of this.held) for (const c of h.chunks.splice(0)) h.out.push(c);
  }

  /** Bytes kept back by hold() so far, over every connection. */
  heldBytes(): number {
    return this.held.reduce((n, h) => n + h.chunks.reduce((m, c) => m + c.length, 0), 0);
  }

  /** Writes `bytes` to every open client as if the server had sent them (e.g. an AMQP frame). */
  inject(bytes: Buffer): void {
    for (const [client] of this.pairs) client.write(bytes);
  }

  /** Passes a client's bytes on until silenceAt()'s trap matches one of its chunks. */
  private gate(): Transform {
    let silent = false;
    const h = { out: undefined as unknown as Transform, chunks: [] as Buffer[] };
    const t = new Transform({
      transform: (chunk: Buffer, _encoding, done) => {
        if (!silent && this.trap?.(chunk)) {
          this.trap = undefined;
          silent = true;
        }
        if (!silent && this.holding) {
          h.chunks.push(chunk);
          return done();
        }
        done(null, silent ? undefined : chunk);
      },
    });
    h.out = t;
    this.held.push(h);
    return t;
  }

  /** Closes the port and cuts every open connection. */
  async stop(): Promise<void> {
    for (const s of this.sockets) s.destroy();
    this.sockets.clear();
    await new Promise<void>((resolve) => (this.server ? this.server.close(() => resolve()) : resolve()));
    this.server = null;
  }
}

/**
 * A fresh PostgreSQL database reached through a TcpProxy: `db` (its direct URL among it), `url`,
 * the proxied one to give the app, and `direct`, a client connected past the proxy. All are undone
 * by `cleanups`, the client and proxy first.
 */
export async function proxiedPostgres(cleanups: (() => Promise<void>)[]): Promise<{ db: TestDatabase; proxy: TcpProxy; url: string; direct: pg.Client }> {
  const db = await freshDatabase('postgres');
  cleanups.push(() => db.cleanup());
  const proxy = new TcpProxy(5432);
  await proxy.start();
  cleanups.push(() => proxy.stop());
  const url = new URL(db.url);
  url.port = String(proxy.port);
  // The test's own view of the database, past the proxy (it stays up whatever the proxy does).
  const direct = new pg.Client({ connectionString: db.url });
  await direct.connect();
  cleanups.push(() => direct.end());
  return { db, proxy, url: url.toString(), direct };
}
