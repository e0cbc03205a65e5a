import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { jetstreamManager } from '@nats-io/jetstream';
import { connect as natsConnect } from '@nats-io/transport-node';
import { afterEach, beforeEach, expect, it } from 'vitest';
import { openStore } from '../../src/store/open.js';
import type { InboxStore } from '../../src/store/port.js';
import { configDoc, STRIPE_SECRET } from '../helpers/app.js';
import { NATS_URL, natsStreamMessages, uniqueName } from '../helpers/destinations.js';
import { acceptThroughIngress, waitFor } from '../helpers/engine.js';
import { exited, spawnWork } from '../helpers/server-process.js';
import { describeEachStore, freshDatabase, type TestDatabase } from '../helpers/stores.js';

const HANDLERS = fileURLToPath(new URL('../fixtures/ledger-handlers.mjs', import.meta.url));

/**
 * A separate `webhook-inbox work` process is SIGKILLed at a chosen point, then restarted
 * without the crash: every accepted event must reach a terminal state, the ledger must
 * show each business mutation exactly once, and a broker stream each message once.
 */
describeEachStore('worker crash recovery', (kind) => {
  let db: TestDatabase;
  let dir: string;
  let store: InboxStore;
  let doc: Record<string, unknown>;
  beforeEach(async () => {
    db = await freshDatabase(kind);
    dir = mkdtempSync(join(tmpdir(), 'wi-wcrash-'));
    doc = configDoc(db.url, { log: { level: 'warn' }, workers: { leaseMs: 1000, pollMs: 50, concurrency: 4, batchSize: 4 }, retry: { baseMs: 10, capMs: 50, maxAttempts: 5 } });
    store = openStore(db.url);
    await store.migrate();
    await store.transaction((tx) => tx.query('CREATE TABLE ledger (event_id TEXT NOT NULL)'));
  });
  afterEach(async () => {
    await store.close();
    await db.cleanup();
    rmSync(dir, { recursive: true, force: true });
  });

  const accept = (ids: string[]) => acceptThroughIngress(doc, ids);

  async function ledger(): Promise<Map<string, number>> {
    const rows = await store.transaction((tx) => tx.query<{ event_id: string }>('SELECT event_id FROM ledger'));
    const m = new Map<string, number>();
    for (const r of rows) m.set(r.event_id, (m.get(r.event_id) ?? 0) + 1);
    return m;
  }

  async function runUntilTerminal(inboxIds: string[], effectLog: string): Promise<void> {
    const w = await spawnWork(join(dir, 'work.yaml'), doc, HANDLERS, { EFFECT_LOG: effectLog });
    try {
      await waitFor(async () => {
        for (const id of inboxIds) {
          const e = await store.getEvent(id);
          if (e?.status !== 'PROCESSED') return false;
          const effects = await store.listEffects(id);
          if (effects.some((f) => f.status !== 'DONE')) return false;
        }
        return true;
      }, 20_000, 'every event PROCESSED with its effects DONE');
    } finally {
      w.child.kill('SIGTERM');
      await exited(w);
    }
  }

  it('killed inside a handler (transaction open, lease held): the lease expires, the event is processed once', async () => {
    const ids = ['evt_a', 'evt_b', 'evt_c', 'evt_d'];
    const inboxIds = await accept(ids);
    const effectLog = join(dir, 'effects.log');
    writeFileSync(effectLog, '');
    const crashing = await spawnWork(join(dir, 'work.yaml'), doc, HANDLERS, { EFFECT_LOG: effectLog, CRASH_IN_HANDLER: 'evt_c' });
    expect(await exited(crashing)).toBe('SIGKILL');
    const held = await store.getEvent(inboxIds[2]!);
    expect(held?.status).toBe('PROCESSING'); // its lease is still held by the dead process

    await runUntilTerminal(inboxIds, effectLog);
    const l = await ledger();
    for (const id of ids) expect(l.get(id), id).toBe(1);
    const final = await store.getEvent(inboxIds[2]!);
    expect(final).toMatchObject({ status: 'PROCESSED', handlerVersion: 'ledger@2' });
    expect(final!.attemptCount).toBeGreaterThanOrEqual(2);
    // Effects: each event's key at least once (at-least-once), never a key of another name.
    const keys = readFileSync(effectLog, 'utf8').trim().split('\n');
    expect(new Set(keys)).toEqual(new Set(inboxIds.map((id) => `${id}:notify`)));
  });

  it('killed right after the business commit, before its effects ran: effects run after restart, mutations stay single', async () => {
    const ids = ['evt_p', 'evt_q', 'evt_r'];
    const inboxIds = await accept(ids);
    const effectLog = join(dir, 'effects.log');
    writeFileSync(effectLog, '');
    const crashing = await spawnWork(join(dir, 'work.yaml'), doc, HANDLERS, { EFFECT_LOG: effectLog, WEBHOOK_INBOX_FAILPOINTS: 'worker.after-commit' });
    expect(await exited(crashing)).toBe('SIGKILL');
    const committed = await Promise.all(inboxIds.map((id) => store.getEvent(id)));
    expect(committed.some((e) => e?.status === 'PROCESSED')).toBe(true);
    // Killed before any effect ran: none executed, and a committed event's effect is still owed:
    // PENDING, or PROCESSING when the effects runner's claim, already at the server, took it in
    // the moment between the commit and the kill (its executor never called: the log is empty).
    expect(readFileSync(effectLog, 'utf8'), 'an effect ran before the kill').toBe('');
    for (const [i, e] of committed.entries()) {
      if (e?.status !== 'PROCESSED') continue;
      const effects = await store.listEffects(inboxIds[i]!);
      expect(effects.map((f) => f.name), ids[i]).toEqual(['notify']);
      expect(['PENDING', 'PROCESSING'], ids[i]).toContain(effects[0]!.status);
    }

    await runUntilTerminal(inboxIds, effectLog);
    const l = await ledger();
    for (const id of ids) expect(l.get(id), id).toBe(1);
    const keys = readFileSync(effectLog, 'utf8').trim().split('\n');
    expect(new Set(keys)).toEqual(new Set(inboxIds.map((id) => `${id}:notify`)));
  });

  it('killed after a broker publish, before marking the outbox row: republished after restart, stored once by Nats-Msg-Id', async () => {
    const stream = uniqueName('WHI_CRASH');
    const prefix = stream.toLowerCase();
    doc = {
      ...doc,
      destinations: [{ id: 'bus', type: 'nats', url: NATS_URL, subject: `${prefix}.{provider}.{type}`, stream, timeoutMs: 3000 }],
      endpoints: [{ id: 'stripe', provider: 'stripe', secrets: [{ version: 'v1', value: STRIPE_SECRET }], routes: [{ events: ['*'], destination: 'bus' }] }],
    };
    const nc = await natsConnect({ servers: NATS_URL, timeout: 5000 });
    const jsm = await jetstreamManager(nc);
    try {
      const ids = ['evt_x', 'evt_y', 'evt_z'];
      const inboxIds = await accept(ids);
      const effectLog = join(dir, 'effects.log');
      writeFileSync(effectLog, '');
      const crashing = await spawnWork(join(dir, 'work.yaml'), doc, HANDLERS, { EFFECT_LOG: effectLog, WEBHOOK_INBOX_FAILPOINTS: 'relay.after-publish' });
      expect(await exited(crashing)).toBe('SIGKILL');
      // The broker has the message(s), the outbox does not know: no row was marked published.
      const before = await natsStreamMessages(nc, stream);
      expect(before.length).toBeGreaterThanOrEqual(1);
      expect((await store.queueStats()).outboxUnpublished).toBe(inboxIds.length);

      const w = await spawnWork(join(dir, 'work.yaml'), doc, HANDLERS, { EFFECT_LOG: effectLog });
      try {
        await waitFor(async () => {
          if ((await store.queueStats()).outboxUnpublished !== 0) return false;
          for (const id of inboxIds) {
            if ((await store.getEvent(id))?.status !== 'PROCESSED') return false;
            if ((await store.listEffects(id)).some((f) => f.status !== 'DONE')) return false;
          }
          return true;
        }, 20_000, 'every outbox row published and every event PROCESSED');
      } finally {
        w.child.kill('SIGTERM');
        await exited(w);
      }

      // Exactly one stored message per inbox id: the republish was dropped by Nats-Msg-Id.
      const after = await natsStreamMessages(nc, stream);
      expect(after.map((m) => m.id).sort()).toEqual([...inboxIds].sort());
      for (const m of after) expect(m.body.inbox_id).toBe(m.id);
      // What was in the stream before the restart was published again (a second relay attempt).
      const attempts = new Map((await store.transaction((tx) => tx.query<{ inbox_id: string; attempt_count: number | string }>('SELECT inbox_id, attempt_count FROM webhook_outbox')))
        .map((r) => [String(r.inbox_id), Number(r.attempt_count)]));
      for (const m of before) expect(attempts.get(m.id), m.id).toBeGreaterThanOrEqual(2);
      for (const id of inboxIds) expect(await store.getEvent(id), id).toMatchObject({ status: 'PROCESSED', handlerVersion: 'ledger@2' });
      const l = await ledger();
      for (const id of ids) expect(l.get(id), id).toBe(1);
    } finally {
      await jsm.streams.delete(stream).catch(() => undefined);
      await nc.close();
    }
  });
});
