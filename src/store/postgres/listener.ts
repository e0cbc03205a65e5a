import pg from 'pg';

const MIN_BACKOFF_MS = 100;
const MAX_BACKOFF_MS = 5000;

/**
 * LISTEN on one channel over a dedicated connection (a pooled client would be handed to other
 * queries, and its LISTEN with it). Opened on the first subscriber; after a drop it reconnects
 * with a doubling backoff and wakes every subscriber once, since notifications sent while it
 * was away are lost. Best effort by design: the engine also polls.
 */
export class PgListener {
  private readonly subscribers = new Set<() => void>();
  private client: pg.Client | undefined;
  private timer: NodeJS.Timeout | undefined;
  private backoffMs = MIN_BACKOFF_MS;
  private closed = false;

  constructor(private readonly config: pg.ClientConfig, private readonly channel: string) {}

  subscribe(fn: () => void): () => void {
    this.subscribers.add(fn);
    if (!this.client && !this.timer && !this.closed) void this.connect(false);
    return () => void this.subscribers.delete(fn);
  }

  private wake(): void {
    for (const fn of this.subscribers) {
      try {
        fn();
      } catch {
        // One subscriber's bug must not starve the others of wake-ups.
      }
    }
  }

  private async connect(reconnecting: boolean): Promise<void> {
    this.timer = undefined;
    const client = new pg.Client(this.config);
    this.client = client;
    let dropped = false;
    const drop = () => {
      if (dropped) return;
      dropped = true;
      if (this.client === client) this.client = undefined;
      client.end().catch(() => undefined);
      if (this.closed) return;
      this.timer = setTimeout(() => void this.connect(true), this.backoffMs);
      this.timer.unref();
      this.backoffMs = Math.min(this.backoffMs * 2, MAX_BACKOFF_MS);
    };
    client.on('error', drop);
    client.on('end', drop);
    client.on('notification', () => this.wake());
    try {
      await client.connect();
      await client.query(`LISTEN ${pg.escapeIdentifier(this.channel)}`);
    } catch {
      drop();
      return;
    }
    if (this.closed) return void client.end().catch(() => undefined);
    this.backoffMs = MIN_BACKOFF_MS;
    if (reconnecting) this.wake();
  }

  async close(): Promise<void> {
    this.closed = true;
    clearTimeout(this.timer);
    const c = this.client;
    this.client = undefined;
    await c?.end().catch(() => undefined);
  }
}
