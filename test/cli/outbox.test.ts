import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { stringify } from 'yaml';
import { openStore } from '../../src/store/open.js';
import type { InboxStore } from '../../src/store/port.js';
import { configDoc } from '../helpers/app.js';
import { record } from '../helpers/records.js';
import { runCli as cli } from '../helpers/server-process.js';
import { describeEachStore, freshDatabase, type TestDatabase } from '../helpers/stores.js';

/**
 * `outbox parked` / `outbox requeue` on a real store holding two parked rows (parked through the
 * store port as the relay parks them: test/engine/relay.test.ts drives the relay itself) and one
 * row still on the normal schedule.
 */
describeEachStore('operator CLI: parked outbox rows', (kind) => {
  let db: TestDatabase;
  let store: InboxStore;
  let dir: string;
  let config: string;
  const T = record('evt_time').receivedAtMs;
  const [a, b, c] = [record('evt_parked_a', undefined, { receivedAtMs: T }), record('evt_parked_b', undefined, { receivedAtMs: T + 1 }), record('evt_retrying', undefined, { receivedAtMs: T + 2 })];

  beforeAll(async () => {
    db = await freshDatabase(kind);
    store = openStore(db.url);
    await store.migrate();
    await store.acceptBatch([a, b, c]);
    await store.claimOutbox(3, 'relay', 60_000, T + 10);
    const refused = { published: false, parked: 'routing_key_too_long', error: 'NeedsDecisionError [routing_key_too_long]: too long', nowMs: T + 20 } as const;
    await store.settleOutboxBatch('relay', [
      { outboxId: a.outboxId, publishedTo: ['bus'], s: refused },
      { outboxId: b.outboxId, publishedTo: [], s: refused },
      { outboxId: c.outboxId, publishedTo: [], s: { published: false, nextAttemptAtMs: T + 5000, error: 'broker down', nowMs: T + 20 } },
    ]);
    dir = mkdtempSync(join(tmpdir(), 'wi-outbox-cli-'));
    config = join(dir, 'cli.yaml');
    writeFileSync(config, stringify(configDoc(db.url)));
  });
  afterAll(async () => {
    await store?.close();
    await db?.cleanup();
    rmSync(dir, { recursive: true, force: true });
  });

  it('outbox parked lists the parked rows oldest first, with reason, last error and who already has them', async () => {
    const r = await cli(['outbox', 'parked', '--config', config, '--json']);
    expect(r.code, r.err).toBe(0);
    const rows = r.out.trim().split('\n').map((l) => JSON.parse(l) as Record<string, unknown>);
    expect(rows).toEqual([
      expect.objectContaining({ outbox_id: a.outboxId, inbox_id: a.inboxId, failure_reason: 'routing_key_too_long', published_to: ['bus'], last_error: 'NeedsDecisionError [routing_key_too_long]: too long' }),
      expect.objectContaining({ outbox_id: b.outboxId, failure_reason: 'routing_key_too_long', published_to: [] }),
    ]);
    const table = await cli(['outbox', 'parked', '--config', config]);
    // The table says why too (--help: "reason, last error"); it had only the reason.
    expect(table.out.split('\n').find((l) => l.startsWith(a.outboxId))).toMatch(/routing_key_too_long\s+bus\s+NeedsDecisionError \[routing_key_too_long\]: too long$/);
    expect(table.err).toContain('2 parked outbox row(s)');
  });

  it('outbox requeue: usage errors exit 2; an id that is not parked exits 1; the given rows, then --all, are due again', async () => {
    expect((await cli(['outbox', 'requeue', '--config', config])).code).toBe(2);
    expect((await cli(['outbox', 'requeue', '--config', config, '--all', a.outboxId])).code).toBe(2);
    expect((await cli(['outbox', 'requeue', '--config', config, 'not-an-id'])).code).toBe(2);

    const notParked = await cli(['outbox', 'requeue', '--config', config, c.outboxId]);
    expect(notParked.code).toBe(1);
    expect(notParked.out.trim()).toBe('requeued 0 parked outbox row(s): due now');

    const one = await cli(['outbox', 'requeue', '--config', config, a.outboxId.toUpperCase()]);
    expect(one.code, one.err).toBe(0);
    expect(one.out.trim()).toBe('requeued 1 parked outbox row(s): due now');
    expect((await store.listParkedOutbox(10)).map((p) => p.outboxId)).toEqual([b.outboxId]);
    // Requeued rows are due at the wall clock's now; c is due again at T + 5000 (records are dated
    // helpers/records.ts's way); b stays parked.
    const due = await store.claimOutbox(10, 'relay2', 60_000, Math.max(Date.now(), T + 5000));
    expect(due.map((o) => o.outboxId).sort()).toEqual([a.outboxId, c.outboxId].sort());
    expect(due.find((o) => o.outboxId === a.outboxId)).toMatchObject({ attemptCount: 1, publishedTo: ['bus'] });

    const all = await cli(['outbox', 'requeue', '--config', config, '--all']);
    expect(all.out.trim()).toBe('requeued 1 parked outbox row(s): due now');
    expect((await store.queueStats()).outboxParked).toBe(0);
  });
});
