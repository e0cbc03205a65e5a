import Database from 'better-sqlite3';
import { describe, expect, it } from 'vitest';
import { MIGRATIONS } from '../../src/store/migrations.js';
import {
  BACKLOG, LIST_FAILED_EFFECTS, listEventsSql, PAYLOADS_TO_RESEAL, QUEUE_STATS, REQUEUE_FAILED, REQUEUE_FAILED_CHUNK, REQUEUE_PARKED_OUTBOX, REQUEUE_PARKED_OUTBOX_CHUNK,
  RETRY_FAILED_EFFECTS, RETRY_FAILED_EFFECTS_CHUNK,
} from '../../src/store/sqlite/work-sql.js';

/** SQLite's query plan of `sql` on a freshly migrated database, one line per step. */
function planOf(sql: string, params: Record<string, unknown> = {}): string[] {
  const db = new Database(':memory:');
  try {
    for (const m of MIGRATIONS) db.exec(m.sqlite);
    return (db.prepare(`EXPLAIN QUERY PLAN ${sql}`).all(params) as { detail: string }[]).map((r) => r.detail);
  } finally {
    db.close();
  }
}

describe('SQLite plans', () => {
  it('the /metrics backlog reads the partial index of the rows still to do, not the whole inbox', () => {
    const plan = planOf(BACKLOG);
    expect(plan).toContain('SCAN webhook_inbox USING INDEX webhook_inbox_due');
    expect(plan).not.toContain('SCAN webhook_inbox');
  });

  it('the /metrics queue stats count the FAILED inbox rows from a partial index alone (no row read: they pile up), the unpublished (and parked) outbox and the effects still to do or FAILED, not every DONE effect', () => {
    const plan = planOf(QUEUE_STATS);
    // Either partial index of the FAILED rows (webhook_inbox_failed, webhook_inbox_failed_recent), covering.
    expect(plan.some((step) => /^SCAN webhook_inbox USING COVERING INDEX webhook_inbox_failed(_recent)?$/.test(step)), plan.join(' / ')).toBe(true);
    expect(plan).not.toContain('SCAN webhook_inbox');
    expect(plan).toContain('SCAN webhook_outbox USING INDEX webhook_outbox_due');
    expect(plan).toContain('SEARCH webhook_outbox USING INDEX webhook_outbox_parked (failure_reason>?)');
    expect(plan).toContain('SCAN webhook_effects USING INDEX webhook_effects_due');
    expect(plan).toContain('SCAN webhook_effects USING COVERING INDEX webhook_effects_failed');
    expect(plan).not.toContain('SCAN webhook_effects');
  });

  /** Where a requeue's chunk begins (work-sql.ts CHUNK_AFTER). */
  const chunk = { afterReason: 'retries_exhausted', afterRowid: 42, chunk: 1000 };

  it('effects failed and effects retry read the FAILED effects\' index, not every DONE effect ever recorded', () => {
    expect(planOf(LIST_FAILED_EFFECTS, { limit: 100 })).toContain('SCAN webhook_effects USING INDEX webhook_effects_failed');
    for (const plan of [planOf(RETRY_FAILED_EFFECTS_CHUNK, { ids: '["x"]', ...chunk }), planOf(RETRY_FAILED_EFFECTS_CHUNK, { ids: null, ...chunk })]) {
      expect(plan, plan.join(' / ')).toContain('SEARCH webhook_effects USING INDEX webhook_effects_failed (failure_reason>?)');
      expect(plan.join(' / ')).not.toMatch(/SCAN webhook_effects|TEMP B-TREE/);
    }
    expect(planOf(RETRY_FAILED_EFFECTS, { rows: '[1]', now: 1 })).toContain('SEARCH webhook_effects USING INTEGER PRIMARY KEY (rowid=?)');
  });

  it('each chunk of an operator\'s requeue finds its rows by the FAILED / parked rows\' index, in its order, and updates them by key', () => {
    const inbox = planOf(REQUEUE_FAILED_CHUNK, { reasons: '["retries_exhausted"]', ...chunk });
    expect(inbox).toContain('SEARCH webhook_inbox USING COVERING INDEX webhook_inbox_failed (failure_reason=?)');
    expect(inbox.join(' / ')).not.toMatch(/SCAN webhook_inbox|TEMP B-TREE/);
    expect(planOf(REQUEUE_FAILED, { rows: '[1]', now: 1 })).toContain('SEARCH webhook_inbox USING INTEGER PRIMARY KEY (rowid=?)');
    const outbox = planOf(REQUEUE_PARKED_OUTBOX_CHUNK, { ids: null, ...chunk });
    expect(outbox).toContain('SEARCH webhook_outbox USING INDEX webhook_outbox_parked (failure_reason>?)');
    expect(outbox.join(' / ')).not.toMatch(/SCAN webhook_outbox|TEMP B-TREE/);
    expect(planOf(REQUEUE_PARKED_OUTBOX, { rows: '[1]', now: 1 })).toContain('SEARCH webhook_outbox USING INTEGER PRIMARY KEY (rowid=?)');
  });

  it('events list --status failed (newest first) reads the FAILED rows\' index, not the whole inbox from its newest row down', () => {
    // With fewer FAILED rows than the page, as usual, the generic statement walked every row.
    const byStatus = planOf(listEventsSql({ status: 'FAILED' }), { limit: 50 });
    expect(byStatus).toEqual(['SCAN webhook_inbox USING INDEX webhook_inbox_failed_recent']);
    const nextPage = planOf(listEventsSql({ status: 'FAILED', endpointId: 'shop', before: '0190a0a0-0000-7000-8000-000000000000' }), { endpointId: 'shop', before: '0190a0a0-0000-7000-8000-000000000000', limit: 50 });
    expect(nextPage).toEqual(['SEARCH webhook_inbox USING INDEX webhook_inbox_failed_recent (inbox_id<?)']);
    const byReason = planOf(listEventsSql({ failureReason: 'retries_exhausted' }), { failureReason: 'retries_exhausted', limit: 50 });
    expect(byReason[0]).toBe('SEARCH webhook_inbox USING INDEX webhook_inbox_failed (failure_reason=?)');
  });

  it('a keys reseal page starts at its cursor in the payload key, not at the first payload of the table every page', () => {
    // `@after IS NULL OR payload_id > @after` was a scan of the whole key from its start on every
    // page: quadratic in the payloads (at 200,000 of them, 14 ms a page near the end against 1 ms).
    const plan = planOf(PAYLOADS_TO_RESEAL, { keyId: 'k2', after: '0190a0a0-0000-7000-8000-000000000000', limit: 500 });
    expect(plan).toContain('SEARCH p USING INDEX sqlite_autoindex_webhook_payload_1 (payload_id>?)');
    expect(plan.filter((step) => step.startsWith('SCAN'))).toEqual([]);
  });
});
