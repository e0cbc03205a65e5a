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
