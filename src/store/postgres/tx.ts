import pg from 'pg';
import { StorageUnavailableError } from '../../errors.js';
import type { BatchOutcome, EventKey, NewEffect, ProcessedMarker, Row, Settlement, StoreTx } from '../work-port.js';
import * as W from './work-sql.js';

/**
 * A server-reported SQL error (it carries a SQLSTATE) propagates as is, so the engine can tell
 * a deadlock (40P01) or a serialization failure (40001) from a constraint violation. Anything
 * else — connection lost, client-side timeout — means the outcome is unknown: 503 territory.
 * SQLSTATE classes 08 (connection) and 57P (server shutting down) are the connection too.
 */
export function storageError(err: unknown): Error {
  if (err instanceof pg.DatabaseError && !/^(08|57P)/.test(err.code ?? '')) return err;
  if (err instanceof StorageUnavailableError) return err;
  return new StorageUnavailableError(`PostgreSQL: ${(err as Error).message}`, { cause: err });
}

/** One open transaction on one pooled client. */
export class PgTx implements StoreTx {
  readonly kind = 'postgres' as const;
  private depth = 0;

  constructor(private readonly client: pg.PoolClient) {}

  async query<R extends Row = Row>(sql: string, params?: readonly unknown[]): Promise<R[]> {
    return (await this.run<R>(sql, params)).rows;
  }

  private async run<R extends Row = Row>(q: string | W.Statement, values?: readonly unknown[]): Promise<pg.QueryResult<R>> {
    try {
      const config = typeof q === 'string' ? { text: q } : q;
      return await this.client.query<R>({ ...config, values: values as unknown[] | undefined });
    } catch (err) {
      throw storageError(err);
    }
  }

  async savepoint<T>(fn: () => Promise<T>): Promise<T> {
    // Nested savepoints get distinct names by depth; the engine runs them one at a time.
    const name = `sp${++this.depth}`;
    try {
      await this.run(`SAVEPOINT ${name}`);
      let result: T;
      try {
        result = await fn();
      } catch (err) {
        // If this fails too the transaction is unusable: its (storage) error is the one to report.
        await this.run(`ROLLBACK TO SAVEPOINT ${name}; RELEASE SAVEPOINT ${name}`);
        throw err;
      }
      await this.run(`RELEASE SAVEPOINT ${name}`);
      return result;
    } finally {
      this.depth--;
    }
  }

  async isProcessed(key: EventKey, consumer: string): Promise<boolean> {
    const r = await this.run(W.IS_PROCESSED, [key.provider, key.endpointId, key.providerEventId, consumer]);
    return r.rows.length > 0;
  }

  async markProcessed(key: EventKey, consumer: string, inboxId: string, handlerVersion: string | null, nowMs: number): Promise<void> {
    await this.run(W.MARK_PROCESSED, [key.provider, key.endpointId, key.providerEventId, consumer, inboxId, handlerVersion, nowMs]);
  }

  async addEffect(e: NewEffect): Promise<void> {
    await this.run(W.ADD_EFFECT, [e.effectId, e.inboxId, e.name, e.idempotencyKey, e.data, e.nowMs]);
  }

  async settleInbox(inboxId: string, owner: string, s: Settlement): Promise<boolean> {
    const r = await this.run(W.SETTLE_INBOX, [inboxId, owner, ...W.settleInboxValues(s)]);
    return r.rowCount === 1;
  }

  async lockLeased(inboxIds: readonly string[], owner: string): Promise<string[]> {
    return (await this.run<{ inbox_id: string }>(W.LOCK_LEASED, [inboxIds, owner])).rows.map((r) => r.inbox_id);
  }

  async processed(keys: readonly EventKey[]): Promise<ProcessedMarker[]> {
    if (keys.length === 0) return [];
    const r = await this.run<{ provider: string; endpoint_id: string; provider_event_id: string; consumer: string }>(W.PROCESSED_FOR_EVENTS,
      [keys.map((k) => k.provider), keys.map((k) => k.endpointId), keys.map((k) => k.providerEventId)]);
    return r.rows.map((m) => ({ provider: m.provider, endpointId: m.endpoint_id, providerEventId: m.provider_event_id, consumer: m.consumer }));
  }

  async finishBatch(owner: string, outcome: BatchOutcome): Promise<number> {
    return (await this.run<{ settled: number }>(W.FINISH_BATCH, W.finishBatchValues(owner, outcome))).rows[0]!.settled;
  }
}
