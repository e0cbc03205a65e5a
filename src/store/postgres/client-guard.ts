import type pg from 'pg';

/**
 * Keeps a checked-out client's lost connection from being an unhandled 'error' event (a crash
 * of the whole server): the pool watches idle clients only. The query in flight fails with it,
 * and release() then discards the client; `onLost` is told too. Returns the function that
 * removes the guard (before release: the pool adds its own again).
 */
export function guardCheckedOut(client: pg.PoolClient, onLost: () => void = () => undefined): () => void {
  client.on('error', onLost);
  return () => void client.off('error', onLost);
}
