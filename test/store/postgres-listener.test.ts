import { afterEach, describe, expect, it } from 'vitest';
import { PgListener } from '../../src/store/postgres/listener.js';
import { waitFor } from '../helpers/engine.js';
import { PG_ADMIN_URL, pgAvailable, PG_REQUIRED } from '../helpers/pg.js';
import { TcpProxy } from '../helpers/tcp-proxy.js';

/** What a backend ended by pg_terminate_backend() sends: an ErrorResponse, FATAL 57P01. */
const TERMINATED = (() => {
  const fields = Buffer.from('SFATAL\0VFATAL\0C57P01\0Mterminating connection due to administrator command\0\0', 'latin1');
  const head = Buffer.alloc(5);
  head[0] = 0x45; // 'E'
  head.writeInt32BE(4 + fields.length, 1);
  return Buffer.concat([head, fields]);
})();

// CI (WEBHOOK_INBOX_REQUIRE_PG=1) runs it even when PostgreSQL is unreachable, so that it fails there instead of skipping.
describe.runIf(PG_REQUIRED || (await pgAvailable()))('PostgreSQL new-work listener [postgres]', () => {
  const cleanups: (() => Promise<void>)[] = [];
  afterEach(async () => {
    for (const c of cleanups.splice(0).reverse()) await c();
  });

  it('a connection lost in the same read as its LISTEN answer is reported as a lost listener (it was listening), and reconnects', async () => {
    // In front of the real PostgreSQL: once the client has sent its LISTEN, the server's answer
    // (through ReadyForQuery, 'Z') reaches it in one chunk with a backend termination's FATAL
    // error after it, as when the backend is terminated right after answering while the client's
    // loop was busy (seen in CI: the loss then went unreported).
    const target = new URL(PG_ADMIN_URL);
    const proxy = new TcpProxy(Number(target.port || 5432), target.hostname);
    proxy.cutAfterAnswer((c) => c.includes('LISTEN'), (c) => c.includes(0x5a), TERMINATED);
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
    expect(proxy.cuts).toBeGreaterThanOrEqual(2);
    expect(lost.length).toBeLessThanOrEqual(proxy.cuts);
  });
});
