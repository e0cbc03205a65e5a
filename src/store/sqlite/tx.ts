import { bytes } from '../rows.js';
import type { BatchOutcome, EventKey, NewEffect, ProcessedMarker, Row, Settlement, StoreTx } from '../work-port.js';

/** Posts one op of this transaction to the writer thread (the message carries the tx id). */
export type TxSend = <T>(op: string, arg?: unknown) => Promise<T>;

/** Blobs cross the thread as plain Uint8Arrays; hand the handler Buffers, as PostgreSQL does. */
function withBuffers<R extends Row>(row: R): R {
  for (const k of Object.keys(row)) if (row[k] instanceof Uint8Array) (row as Row)[k] = bytes(row[k]);
  return row;
}

/** The main side of a handler transaction on SQLite; tx-gate.ts is the thread side. */
export class SqliteTx implements StoreTx {
  readonly kind = 'sqlite' as const;

  constructor(private readonly send: TxSend) {}

  async query<R extends Row = Row>(sql: string, params: readonly unknown[] = []): Promise<R[]> {
    return (await this.send<R[]>('query', { sql, params })).map(withBuffers);
  }

  async savepoint<T>(fn: () => Promise<T>): Promise<T> {
    await this.send('savepoint');
    let result: T;
    try {
      result = await fn();
    } catch (err) {
      await this.send('rollbackTo');
      throw err;
    }
    await this.send('release');
    return result;
  }

  isProcessed(key: EventKey, consumer: string): Promise<boolean> {
    return this.send('isProcessed', { key, consumer });
  }

  markProcessed(key: EventKey, consumer: string, inboxId: string, handlerVersion: string | null, nowMs: number): Promise<void> {
    return this.send('markProcessed', { key, consumer, inboxId, handlerVersion, nowMs });
  }

  addEffect(effect: NewEffect): Promise<void> {
    return this.send('addEffect', effect);
  }

  settleInbox(inboxId: string, owner: string, s: Settlement): Promise<boolean> {
    return this.send('settleInbox', { id: inboxId, owner, s });
  }

  lockLeased(inboxIds: readonly string[], owner: string): Promise<string[]> {
    return this.send('lockLeased', { ids: inboxIds, owner });
  }

  processed(keys: readonly EventKey[]): Promise<ProcessedMarker[]> {
    return this.send('processed', keys);
  }

  finishBatch(owner: string, outcome: BatchOutcome): Promise<number> {
    return this.send('finishBatch', { owner, outcome });
  }
}
