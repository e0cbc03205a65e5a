import pg from 'pg';
import { closedWithin } from './client-guard.js';

const MIN_BACKOFF_MS = 100;
const MAX_BACKOFF_MS = 5000;

/**
 * After this long with nothing heard, the listener sends a `SELECT 1` on its connection and waits
 * as long again for the answer. A connection that died without a FIN or RST (a NAT or firewall
 * dropped its state, the server's host vanished) is thus noticed within ~20 s instead of
 * at TCP keepalive's ~2 h, while the workers are woken only by their poll. A query, not TCP
 * keepalive: it asks the server itself, so it also sees a hop that still ACKs but no longer
 * forwards (a proxy, a pooler, a stalled backend), and an answer every 10 s costs nothing.
 */
export const LIVENESS_MS = 10_000;

interface Subscriber {
  readonly wake: () => void;
  readonly lost?: (reason: Error) => void;
}

/**
 * LISTEN on one channel over a dedicated connection (a pooled client would be handed to other
 * queries, and its LISTEN with it). Opened on the first subscriber; after a drop it reconnects
 * with a doubling backoff and wakes every subscriber once, since notifications sent while it
 * was away are lost. Best effort by design: the engine also polls.
 */
export class PgListener {
  private readonly subscribers = new Set<Subscriber>();
  private client: pg.Client | undefined;
  private timer: NodeJS.Timeout | undefined;
  private backoffMs = MIN_BACKOFF_MS;
  private closed = false;

  /** livenessMs: see LIVENESS_MS (tests shorten it). */
  constructor(private readonly config: pg.ClientConfig, private readonly channel: string, private readonly livenessMs = LIVENESS_MS) {}

  /** `lost` is told when a listening connection is lost (not when a reconnect attempt fails). */
  subscribe(wake: () => void, lost?: (reason: Error) => void): () => void {
    const s: Subscriber = { wake, lost };
    this.subscribers.add(s);
    if (!this.client && !this.timer && !this.closed) void this.connect(false);
    return () => void this.subscribers.delete(s);
  }

  private tell(call: (s: Subscriber) => void): void {
    for (const s of this.subscribers) {
      try {
        call(s);
      } catch {
        // One subscriber's bug must not starve the others of wake-ups.
      }
    }
  }

  private async connect(reconnecting: boolean): Promise<void> {
    this.timer = undefined;
    // Every statement here (the LISTEN, the liveness check) is bounded: one the server never
    // answers would otherwise leave this connection in place, silent, for good.
    const client = new pg.Client({ ...this.config, query_timeout: this.livenessMs });
    this.client = client;
    let dropped = false;
    let listening = false;
    let heardAt = 0; // performance.now() of the last answer or notification
    let check: NodeJS.Timeout | undefined;
    const drop = (reason: Error) => {
      if (dropped) return;
      dropped = true;
      clearTimeout(check);
      if (this.client === client) this.client = undefined;
      client.end().catch(() => undefined); // a statement still awaiting its answer: this destroys the socket
      if (this.closed) return;
      if (listening) this.tell((s) => s.lost?.(reason));
      this.timer = setTimeout(() => void this.connect(true), this.backoffMs);
      this.timer.unref();
      this.backoffMs = Math.min(this.backoffMs * 2, MAX_BACKOFF_MS);
    };
    // Asks only after livenessMs of silence: a notification proves the connection alive, so under
    // load no check is sent, and a dead one is noticed ≤ 2 × livenessMs after it was last heard.
    const checkLiveness = async () => {
      const quietMs = performance.now() - heardAt;
      if (quietMs >= this.livenessMs) {
        try {
          await client.query('SELECT 1');
        } catch (err) {
          return drop(new Error(`liveness check failed: ${(err as Error).message}`, { cause: err }));
        }
        heardAt = performance.now();
      }
      if (!dropped) check = setTimeout(() => void checkLiveness(), heardAt + this.livenessMs - performance.now()).unref();
    };
    client.on('error', drop);
    client.on('end', () => drop(new Error('connection ended')));
    client.on('notification', () => {
      heardAt = performance.now();
      this.tell((s) => s.wake());
    });
    try {
      await client.connect();
      // Listening from the moment the answer is read (the driver calls back as it reads it), not
      // from the await's later turn: an error read in the same chunk (the backend terminated
      // right after answering) is then reported as a lost listener, not as a failed attempt.
      await new Promise<void>((resolve, reject) => {
        client.query(`LISTEN ${pg.escapeIdentifier(this.channel)}`, (err) => {
          if (err) return reject(err);
          listening = true;
          resolve();
        });
      });
    } catch (err) {
      drop(err as Error);
      return;
    }
    if (this.closed) return void client.end().catch(() => undefined);
    if (dropped) return; // lost once its LISTEN was answered: reported, and the reconnect is already scheduled
    this.backoffMs = MIN_BACKOFF_MS;
    heardAt = performance.now();
    void checkLiveness();
    if (reconnecting) this.tell((s) => s.wake());
  }

  async close(): Promise<void> {
    this.closed = true;
    clearTimeout(this.timer);
    const c = this.client;
    this.client = undefined;
    if (!c) return;
    void c.end().catch(() => undefined);
    await closedWithin(c); // its end waits for the server to close the connection: a hung one never does
  }
}
