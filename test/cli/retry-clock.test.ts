import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { stringify } from 'yaml';
import { uuidv7 } from '../../src/crypto/ids.js';
import { openStore } from '../../src/store/open.js';
import type { InboxStore } from '../../src/store/port.js';
import { configDoc } from '../helpers/app.js';
import { record } from '../helpers/records.js';
import { pgAvailable } from '../helpers/pg.js';
import { runCli } from '../helpers/server-process.js';
import { freshDatabase, type TestDatabase } from '../helpers/stores.js';

/** How far ahead of the database the operator's host runs in these tests. */
const AHEAD_MS = 10 * 60_000;

/**
 * `retry` and `requeue` say "due now". Workers claim a row once its next_attempt_at is past by
 * their own clock, which is watched against the database's (clock-skew.ts); the operator's host,
 * often another machine, is not. A CLI whose clock ran ahead made the events it requeued wait
 * that long. PostgreSQL only: SQLite is a file on the workers' host, one host with one clock, so
 * there is no other clock to follow.
 */
describe.runIf(await pgAvailable())('retry and requeue: due by the database clock, not the operator host [postgres]', () => {
  let db: TestDatabase;
  let store: InboxStore;
  let dir: string;
  let config: string;
  /** Node started with Date.now() AHEAD_MS ahead (the CLI's own clock, nothing else). */
  let skewed: NodeJS.ProcessEnv;

  /** A row the engine left FAILED with `reason`, as a worker settles it. */
  async function failedRow(eventId: string, reason: string): Promise<string> {
    const r = record(eventId, undefined, { receivedAtMs: Date.now() - 60_000 });
    await store.acceptBatch([r]);
    const [c] = await store.claimInbox(1, `w-${eventId}`, 30_000, Date.now());
    expect(c!.inboxId).toBe(r.inboxId);
    const s = { status: 'FAILED' as const, reason, error: 'Error: ledger timed out', nowMs: Date.now() };
    expect(await store.transaction((tx) => tx.finishBatch(c!.leaseOwner, { markers: [], effects: [], settlements: [{ inboxId: r.inboxId, s }] }))).toBe(1);
    return r.inboxId;
  }

  beforeAll(async () => {
    db = await freshDatabase('postgres');
    store = openStore(db.url);
    await store.migrate();
    dir = mkdtempSync(join(tmpdir(), 'wi-retry-clock-'));
    config = join(dir, 'cli.yaml');
    writeFileSync(config, stringify(configDoc(db.url)));
    const preload = join(dir, 'clock-ahead.mjs');
    writeFileSync(preload, `const now = Date.now; Date.now = () => now() + ${AHEAD_MS};\n`);
    skewed = { NODE_OPTIONS: `${process.env.NODE_OPTIONS ?? ''} --import=${preload}`.trim() };
  });

  afterAll(async () => {
    await store?.close();
    await db?.cleanup();
    rmSync(dir, { recursive: true, force: true });
  });

  it('an operator host whose clock runs ahead still makes the events due now, where the workers claim them', async () => {
    const one = await failedRow('evt_retry', 'retries_exhausted');
    const bulk = await failedRow('evt_requeue', 'retries_exhausted');
    const r = await runCli(['retry', '--config', config, one], 30_000, skewed);
    expect(r.code, r.err).toBe(0);
    const q = await runCli(['requeue', '--config', config, '--reason', 'technical'], 30_000, skewed);
    expect(q.code, q.err).toBe(0);
    expect(q.out.trim()).toBe('requeued 1 FAILED event(s) with reason retries_exhausted');
    const dbNow = (await store.databaseNowMs())!;
    for (const id of [one, bulk]) {
      const e = (await store.getEvent(id))!;
      expect(e.status, id).toBe('PENDING');
      expect(e.nextAttemptAtMs!, id).toBeLessThanOrEqual(dbNow);
    }
    // A worker in step with the database claims both at once.
    const claimed = await store.claimInbox(10, 'w-after', 30_000, dbNow);
    expect(claimed.map((c) => c.inboxId).sort()).toEqual([one, bulk].sort());
  });

  it('outbox requeue from an operator host whose clock runs ahead makes parked rows due now, where the relay claims them', async () => {
    const r = record('evt_parked', undefined, { receivedAtMs: Date.now() - 60_000 });
    await store.acceptBatch([r]);
    // Every due outbox row (the earlier test's too): the others stay leased, so not due below.
    const c = (await store.claimOutbox(100, 'relay-1', 30_000, Date.now())).find((o) => o.inboxId === r.inboxId);
    const parked = { published: false as const, parked: 'routing_key_too_long', error: 'NeedsDecisionError: too long', nowMs: Date.now() };
    expect(await store.settleOutboxBatch('relay-1', [{ outboxId: c!.outboxId, publishedTo: [], s: parked }])).toEqual([c!.outboxId]);
    const q = await runCli(['outbox', 'requeue', '--config', config, '--all'], 30_000, skewed);
    expect(q.code, q.err).toBe(0);
    expect(q.out.trim()).toBe('requeued 1 parked outbox row(s): due now');
    const dbNow = (await store.databaseNowMs())!;
    expect((await store.claimOutbox(10, 'relay-2', 30_000, dbNow)).map((o) => o.outboxId)).toEqual([c!.outboxId]);
  });

  it('effects retry from an operator host whose clock runs ahead makes FAILED effects due now, where the effects runner claims them', async () => {
    const r = record('evt_effect', undefined, { receivedAtMs: Date.now() - 60_000 });
    await store.acceptBatch([r]);
    const effect = { effectId: uuidv7(), inboxId: r.inboxId, name: 'send-receipt', idempotencyKey: `${r.inboxId}:send-receipt`, data: '{}', nowMs: Date.now() };
    await store.transaction((tx) => tx.finishBatch('nobody', { markers: [], effects: [effect], settlements: [] }));
    const [claimed] = await store.claimEffects(10, 'e-1', 30_000, Date.now());
    expect(claimed!.effectId).toBe(effect.effectId);
    expect(await store.settleEffect(effect.effectId, 'e-1', { status: 'FAILED', reason: 'retries_exhausted', error: 'Error: mail down', nowMs: Date.now() })).toBe(true);
    const q = await runCli(['effects', 'retry', '--config', config, effect.effectId], 30_000, skewed);
    expect(q.code, q.err).toBe(0);
    expect(q.out.trim()).toBe('requeued 1 FAILED effect(s): due now, same idempotency keys');
    const dbNow = (await store.databaseNowMs())!;
    expect((await store.claimEffects(10, 'e-2', 30_000, dbNow)).map((e) => e.effectId)).toEqual([effect.effectId]);
  });
});
