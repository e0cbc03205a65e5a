/**
 * The bench's read-only view of an inbox database (SQLite file or PostgreSQL), on a connection of
 * its own: unfinished rows, status counts, processed_at span and latency, event ids. Used by the
 * engine scenarios (bench/engine.ts) and the soak (bench/soak.ts).
 */
import Database from 'better-sqlite3';
import pg from 'pg';
import { nearestRank } from './rank.js';

export type StoreKind = 'sqlite' | 'postgres';

const POLL_MS = 250;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export interface Latency {
  readonly rows: number;
  readonly processed: number;
  readonly p50: number;
  readonly p95: number;
  readonly p99: number;
  readonly max: number;
}

/** The bench's own read-only view of the inbox, on a connection of its own. */
export interface Probe {
  /** Rows not yet terminal (PENDING / PROCESSING): the partial due index answers it. */
  unfinished(): Promise<number>;
  statusCounts(): Promise<Record<string, number>>;
  /** First and last processed_at, Unix ms. */
  processedSpan(): Promise<{ first: number; last: number } | null>;
  outboxUnpublished(): Promise<number>;
  /** provider_event_id of every row of `endpointId`. */
  eventIds(endpointId: string): Promise<string[]>;
  /** processed_at - received_at, ms, of the rows received in [fromMs, toMs); nearest-rank percentiles like the loadgen's. */
  latency(fromMs: number, toMs: number): Promise<Latency>;
  close(): Promise<void>;
}


export function sqliteProbe(url: string): Probe {
  const db = new Database(url.slice('sqlite:'.length), { fileMustExist: true });
  db.pragma('busy_timeout = 5000');
  const one = <T>(sql: string, ...p: unknown[]) => db.prepare(sql).get(...p) as T;
  return {
    async unfinished() {
      return one<{ n: number }>(`SELECT count(*) AS n FROM webhook_inbox WHERE status IN ('PENDING', 'PROCESSING')`).n;
    },
    async statusCounts() {
      const rows = db.prepare('SELECT status, count(*) AS n FROM webhook_inbox GROUP BY status').all() as { status: string; n: number }[];
      return Object.fromEntries(rows.map((r) => [r.status, r.n]));
    },
    async processedSpan() {
      const r = one<{ first: number | null; last: number | null }>('SELECT min(processed_at) AS first, max(processed_at) AS last FROM webhook_inbox');
      return r.first === null || r.last === null ? null : { first: r.first, last: r.last };
    },
    async outboxUnpublished() {
      return one<{ n: number }>('SELECT count(*) AS n FROM webhook_outbox WHERE published_at IS NULL').n;
    },
    async eventIds(endpointId) {
      return db.prepare('SELECT provider_event_id FROM webhook_inbox WHERE endpoint_id = ?').pluck().all(endpointId) as string[];
    },
    async latency(fromMs, toMs) {
      const window = 'FROM webhook_inbox WHERE received_at >= ? AND received_at < ?';
      const a = one<{ rows: number; processed: number; max: number | null }>(
        `SELECT count(*) AS rows, count(processed_at) AS processed, max(processed_at - received_at) AS max ${window}`, fromMs, toMs);
      const at = db.prepare(`SELECT processed_at - received_at AS d ${window} AND processed_at IS NOT NULL ORDER BY d LIMIT 1 OFFSET ?`).pluck();
      const q = (p: number) => (a.processed ? (at.get(fromMs, toMs, nearestRank(p, a.processed)) as number) : NaN);
      return { rows: a.rows, processed: a.processed, p50: q(0.5), p95: q(0.95), p99: q(0.99), max: a.max ?? NaN };
    },
    async close() {
      db.close();
    },
  };
}

export async function pgProbe(url: string): Promise<Probe> {
  const c = new pg.Client({ connectionString: url, application_name: 'wi-bench-probe' });
  await c.connect();
  const one = async <T>(sql: string, p: unknown[] = []) => (await c.query(sql, p)).rows[0] as T;
  const epoch = (col: string) => `(extract(epoch FROM ${col}) * 1000)::float8`;
  return {
    async unfinished() {
      return Number((await one<{ n: string }>(`SELECT count(*) AS n FROM webhook_inbox WHERE status IN ('PENDING', 'PROCESSING')`)).n);
    },
    async statusCounts() {
      const { rows } = await c.query<{ status: string; n: string }>('SELECT status, count(*) AS n FROM webhook_inbox GROUP BY status');
      return Object.fromEntries(rows.map((r) => [r.status, Number(r.n)]));
    },
    async processedSpan() {
      const r = await one<{ first: number | null; last: number | null }>(`SELECT ${epoch('min(processed_at)')} AS first, ${epoch('max(processed_at)')} AS last FROM webhook_inbox`);
      return r.first === null || r.last === null ? null : { first: r.first, last: r.last };
    },
    async outboxUnpublished() {
      return Number((await one<{ n: string }>('SELECT count(*) AS n FROM webhook_outbox WHERE published_at IS NULL')).n);
    },
    async eventIds(endpointId) {
      const { rows } = await c.query<{ id: string }>({ text: 'SELECT provider_event_id AS id FROM webhook_inbox WHERE endpoint_id = $1', values: [endpointId] });
      return rows.map((r) => r.id);
    },
    async latency(fromMs, toMs) {
      // percentile_disc(q) is the nearest-rank value a[ceil(q·n) − 1], as the loadgen computes; NULLs (unprocessed) are skipped.
      const r = await one<{ rows: string; processed: string; p50: number | null; p95: number | null; p99: number | null; max: number | null }>(`
        SELECT count(*) AS rows, count(d) AS processed, percentile_disc(0.5) WITHIN GROUP (ORDER BY d) AS p50,
          percentile_disc(0.95) WITHIN GROUP (ORDER BY d) AS p95, percentile_disc(0.99) WITHIN GROUP (ORDER BY d) AS p99, max(d) AS max
        FROM (SELECT ${epoch('processed_at - received_at')} AS d FROM webhook_inbox
              WHERE received_at >= to_timestamp($1 / 1000.0) AND received_at < to_timestamp($2 / 1000.0)) x`, [fromMs, toMs]);
      return { rows: Number(r.rows), processed: Number(r.processed), p50: r.p50 ?? NaN, p95: r.p95 ?? NaN, p99: r.p99 ?? NaN, max: r.max ?? NaN };
    },
    async close() {
      await c.end().catch(() => undefined);
    },
  };
}

export const openProbe = (store: StoreKind, url: string): Promise<Probe> => (store === 'sqlite' ? Promise.resolve(sqliteProbe(url)) : pgProbe(url));

/** Polls until no row is PENDING/PROCESSING (or the limit passes); calls `tick` on every poll. */
export async function waitDrained(probe: Probe, limitMs: number, tick: (unfinished: number) => void = () => undefined): Promise<{ done: boolean; atMs: number }> {
  const deadline = Date.now() + limitMs;
  for (;;) {
    const n = await probe.unfinished();
    tick(n);
    if (n === 0) return { done: true, atMs: Date.now() };
    if (Date.now() > deadline) return { done: false, atMs: Date.now() };
    await sleep(POLL_MS);
  }
}
