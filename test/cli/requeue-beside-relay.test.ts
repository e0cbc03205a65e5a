import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { stringify } from 'yaml';
import { openStore } from '../../src/store/open.js';
import type { InboxStore } from '../../src/store/port.js';
import { REQUEUE_CHUNK } from '../../src/store/sqlite/store.js';
import { configDoc } from '../helpers/app.js';
import { record } from '../helpers/records.js';
import { runCli as cli } from '../helpers/server-process.js';
import { describeEachStore, freshDatabase, type TestDatabase } from '../helpers/stores.js';

/**
 * `outbox requeue --all` while a relay runs whose destination still refuses (the cause not fixed
 * yet, or not everywhere): each row the command sends back, the relay parks again at once. On
 * SQLite the command goes a chunk (REQUEUE_CHUNK) at a time, and each chunk took whatever was
 * parked then: the rows it had just requeued and the relay had parked again came round again,
 * and again. The command ran for as long as the relay kept up and said "requeued 171000 parked
 * outbox row(s)" of 5,000. PostgreSQL's one statement visits each row once; SQLite's chunks
 * now do too (they go on from where the last one ended).
 */
describeEachStore('outbox requeue --all beside a relay that parks the rows again', (kind) => {
  let db: TestDatabase;
  let store: InboxStore;
  let dir: string;
  let config: string;
  const N = REQUEUE_CHUNK * 5;
  const T = record('evt_time').receivedAtMs;
  let k = 0;

  /** What the relay does with a refusal: claims the due rows and parks them. Returns how many. */
  async function parkDue(): Promise<number> {
    const owner = `relay-${++k}`;
    // Past every row's first due time (the records' receivedAtMs) and every requeue's "due now".
    const claimed = await store.claimOutbox(REQUEUE_CHUNK, owner, 60_000, T + N + 10);
    if (claimed.length > 0) {
      await store.settleOutboxBatch(owner, claimed.map((c) => ({
        outboxId: c.outboxId, publishedTo: [], s: { published: false, parked: 'routing_key_too_long', error: 'NeedsDecisionError [routing_key_too_long]: too long', nowMs: T + N + 20 },
      })));
    }
    return claimed.length;
  }

  beforeAll(async () => {
    db = await freshDatabase(kind);
    store = openStore(db.url);
    await store.migrate();
    const rows = Array.from({ length: N }, (_, i) => record(`evt_refused_${i}`, undefined, { receivedAtMs: T + i }));
    for (let i = 0; i < N; i += 500) await store.acceptBatch(rows.slice(i, i + 500));
    while ((await parkDue()) > 0);
    expect(await store.listParkedOutbox(N + 1)).toHaveLength(N);
    dir = mkdtempSync(join(tmpdir(), 'wi-requeue-relay-'));
    config = join(dir, 'cli.yaml');
    writeFileSync(config, stringify(configDoc(db.url)));
  }, 120_000);
  afterAll(async () => {
    await store?.close();
    await db?.cleanup();
    rmSync(dir, { recursive: true, force: true });
  });

  it('requeues each parked row once and says so: the count is the rows that were parked, not the rounds', async () => {
    let stop = false;
    const relay = (async () => {
      while (!stop) {
        await parkDue();
        await new Promise((r) => setTimeout(r, 1));
      }
    })();
    const r = await cli(['outbox', 'requeue', '--config', config, '--all'], 60_000).finally(() => (stop = true));
    await relay;
    expect(r.code, r.err).toBe(0);
    expect(r.out.trim()).toBe(`requeued ${N} parked outbox row(s): due now`);
  }, 90_000);
});
