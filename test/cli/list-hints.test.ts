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
 * The line after `outbox parked` (and `effects failed`, the same code): "--limit for more" only
 * when more rows exist and a larger --limit can show them. It said so whenever the listing was
 * full: for exactly --limit rows (no more), and at --limit 1000, where a larger one is a usage error.
 */
describeEachStore('operator CLI: the "--limit for more" hint of the oldest-first listings', (kind) => {
  let db: TestDatabase;
  let store: InboxStore;
  let dir: string;
  let config: string;
  const N = 1001;

  beforeAll(async () => {
    db = await freshDatabase(kind);
    store = openStore(db.url);
    await store.migrate();
    const T = record('evt_time').receivedAtMs;
    const rows = Array.from({ length: N }, (_, i) => record(`evt_parked_${i}`, undefined, { receivedAtMs: T + i }));
    for (let i = 0; i < N; i += 250) await store.acceptBatch(rows.slice(i, i + 250));
    const claimed = await store.claimOutbox(N, 'relay', 60_000, T + N + 10);
    expect(claimed).toHaveLength(N);
    const refused = { published: false, parked: 'routing_key_too_long', error: 'NeedsDecisionError [routing_key_too_long]: too long', nowMs: T + N + 20 } as const;
    await store.settleOutboxBatch('relay', claimed.map((c) => ({ outboxId: c.outboxId, publishedTo: [], s: refused })));
    dir = mkdtempSync(join(tmpdir(), 'wi-list-hints-'));
    config = join(dir, 'cli.yaml');
    writeFileSync(config, stringify(configDoc(db.url)));
  }, 60_000);
  afterAll(async () => {
    await store?.close();
    await db?.cleanup();
    rmSync(dir, { recursive: true, force: true });
  });

  it('more rows than --limit: the hint; at --limit 1000 it does not send the operator to a larger --limit (a usage error)', async () => {
    const some = await cli(['outbox', 'parked', '--config', config, '--limit', '10']);
    expect(some.code, some.err).toBe(0);
    expect(some.err).toBe('10 parked outbox row(s) (the oldest 10: --limit for more)\n');

    const most = await cli(['outbox', 'parked', '--config', config, '--limit', '1000']);
    expect(most.code, most.err).toBe(0);
    expect(most.out.trimEnd().split('\n')).toHaveLength(1 + 1000);
    expect(most.err).not.toContain('--limit for more');
    expect(most.err).toMatch(/^1000 parked outbox row\(s\) \(.*more remain\)\n$/);
    expect((await cli(['outbox', 'parked', '--config', config, '--limit', '1001'])).code).toBe(2);
  });

  it('exactly --limit rows: no hint (there are no more)', async () => {
    await store.requeueParkedOutbox(null, Date.now());
    const [one] = await store.claimOutbox(1, 'relay2', 60_000, Date.now() + 1000);
    await store.settleOutboxBatch('relay2', [{ outboxId: one!.outboxId, publishedTo: [], s: { published: false, parked: 'routing_key_too_long', error: 'too long', nowMs: Date.now() } }]);
    const r = await cli(['outbox', 'parked', '--config', config, '--limit', '1', '--json']);
    expect(r.out.trim().split('\n')).toHaveLength(1);
    const t = await cli(['outbox', 'parked', '--config', config, '--limit', '1']);
    expect(t.code, t.err).toBe(0);
    expect(t.err).toBe('1 parked outbox row(s)\n');
  });
});
