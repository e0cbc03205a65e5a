import Database from 'better-sqlite3';
import { describe, expect, it } from 'vitest';
import { MIGRATIONS } from '../../src/store/migrations.js';
import { BACKLOG, QUEUE_STATS } from '../../src/store/sqlite/work-sql.js';

/** SQLite's query plan of `sql` on a freshly migrated database, one line per step. */
function planOf(sql: string): string[] {
  const db = new Database(':memory:');
  try {
    for (const m of MIGRATIONS) db.exec(m.sqlite);
    return (db.prepare(`EXPLAIN QUERY PLAN ${sql}`).all() as { detail: string }[]).map((r) => r.detail);
  } finally {
    db.close();
  }
}

describe('SQLite plans', () => {
  it('the /metrics backlog reads the partial indexes of the rows still to do, not the whole inbox', () => {
    const plan = planOf(BACKLOG);
    expect(plan).toContain('SCAN webhook_inbox USING INDEX webhook_inbox_due');
    expect(plan).toContain('SCAN webhook_inbox USING INDEX webhook_inbox_failed');
    expect(plan).not.toContain('SCAN webhook_inbox');
  });

  it('the /metrics queue stats read the unpublished (and parked) outbox and the effects still to do or FAILED, not every DONE effect', () => {
    const plan = planOf(QUEUE_STATS);
    expect(plan).toContain('SCAN webhook_outbox USING INDEX webhook_outbox_due');
    expect(plan).toContain('SEARCH webhook_outbox USING INDEX webhook_outbox_parked (failure_reason>?)');
    expect(plan).toContain('SCAN webhook_effects USING INDEX webhook_effects_due');
    expect(plan).toContain('SCAN webhook_effects USING COVERING INDEX webhook_effects_failed');
    expect(plan).not.toContain('SCAN webhook_effects');
  });
});
