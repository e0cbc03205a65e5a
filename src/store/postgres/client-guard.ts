import type pg from 'pg';

/**
 * Keeps a checked-out client's lost connection from being an unhandled 'error' event (a crash
 * of the whole server): the pool watches idle clients only. The query in flight fails with it,
 * and checkIn then discards the client; `onLost` is told too. Returns the function that removes
 * the guard (checkIn calls it when the client goes back to the pool, which adds its own).
 */
export function guardCheckedOut(client: pg.PoolClient, onLost: () => void = () => undefined): () => void {
  client.on('error', onLost);
  return () => void client.off('error', onLost);
}

/**
 * Returns a guarded client to the pool, or discards it (`discard` truthy: an Error or true). A
 * discarded client keeps its guard: its connection may report an error after the release has
 * begun to close it (a terminated backend's socket closing), and with no listener that error
 * would crash the process. Back in the pool, the guard goes, or each checkout would add one.
 */
export function checkIn(client: pg.PoolClient, unguard: () => void, discard?: Error | boolean): void {
  if (!discard) unguard();
  client.release(discard);
}

/**
 * Our backends whose client we gave up on: one of ours (this database, this role), not the asker.
 * pg_terminate_backend needs no privilege for a backend of one's own role.
 */
const TERMINATE = `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
  WHERE pid = $1 AND datname = current_database() AND usename = current_user AND pid <> pg_backend_pid()`;

/**
 * Asks the server, on another connection, to end the backend of a client discarded mid-transaction
 * (best effort, not awaited). A link that died without a FIN or RST (a NAT or firewall dropped it)
 * is given up by the client (its query timeout), but the server never hears: the backend stayed
 * "idle in transaction" with its locks until TCP keepalive noticed (~2 h by default), and the
 * event's retry waited all that time on its own uncommitted ledger row. A server-side idle
 * timeout cannot do this: a live settle transaction may pause for several handlers in a row.
 */
export function endBackendOf(pool: pg.Pool, client: pg.PoolClient): void {
  const pid = (client as unknown as { processID?: number | null }).processID;
  if (typeof pid !== 'number') return;
  pool.query(TERMINATE, [pid]).catch(() => undefined);
}

/**
 * How long a closing store waits for the server to close a connection after the goodbye
 * (Terminate, then our FIN) before cutting it. A server whose processes hang (a stuck disk) while
 * its host's TCP still acknowledges never closes it: the half-closed socket then kept the process
 * alive for good after a SIGTERM (no exit, until the supervisor's SIGKILL).
 */
export const GOODBYE_WAIT_MS = 2000;

/** Resolves once `client`'s socket has closed, destroying it if the server has not closed it within `waitMs`. */
export function closedWithin(client: pg.Client, waitMs = GOODBYE_WAIT_MS): Promise<void> {
  const socket = client.connection.stream;
  if (socket.destroyed) return Promise.resolve();
  return new Promise((resolve) => {
    const cut = setTimeout(() => socket.destroy(), waitMs);
    socket.once('close', () => {
      clearTimeout(cut);
      resolve();
    });
  });
}
