import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { afterEach, describe, expect, it } from 'vitest';
import { stringify } from 'yaml';
import { parseConfig } from '../../src/config/schema.js';
import { NIL_UUID, uuidv7, uuidv7Floor } from '../../src/crypto/ids.js';
import { PayloadCipher, sha256 } from '../../src/crypto/payload-cipher.js';
import { HandlerRegistry } from '../../src/engine/handlers.js';
import { ConfigError } from '../../src/errors.js';
import type { AcceptRecord } from '../../src/store/port.js';
import { configDoc, PAYLOAD_KEY, startTestApp, type TestApp } from '../helpers/app.js';
import { FAST_WORKERS, scrapeMetrics, waitFor } from '../helpers/engine.js';
import { stripeEvent, stripeHeaders } from '../helpers/events.js';
import { post } from '../helpers/http.js';
import { runCli } from '../helpers/server-process.js';
import { pgAvailable } from '../helpers/pg.js';
import { describeEachStore } from '../helpers/stores.js';

const DAY = 86_400_000;
/** The app's own payload key (configDoc's k1), so its workers open what is seeded here. */
const appCipher = new PayloadCipher(new Map([['k1', Buffer.from(PAYLOAD_KEY, 'base64')]]), 'k1');

/** A Stripe event as the ingress would have accepted it `ageMs` ago on endpoint `stripe`. */
function acceptedAgo(eventId: string, ageMs: number, type = 'payment_intent.succeeded'): AcceptRecord {
  const raw = stripeEvent(eventId, { type });
  const receivedAtMs = Date.now() - ageMs;
  const binding = { provider: 'stripe', endpointId: 'stripe', providerEventId: eventId };
  return {
    inboxId: uuidv7(receivedAtMs), payloadId: uuidv7(receivedAtMs), outboxId: uuidv7(receivedAtMs), ...binding,
    eventType: type, objectId: `pi_${eventId}`, objectVersion: null, providerCreatedAtMs: receivedAtMs, receivedAtMs,
    payloadHash: sha256(raw), matchedSecretVersion: 'v1', payload: appCipher.seal(raw, binding), topic: `stripe.${type}`, relay: false,
  };
}

/** Processes payment_intent.succeeded; charge.failed fails every attempt, so it ends FAILED. */
const handlers = () => new HandlerRegistry()
  .on('payment_intent.succeeded', () => undefined)
  .on('charge.failed', () => {
    throw new Error('ledger refuses it');
  });

describe('uuidv7Floor', () => {
  it("sorts below every id minted before its millisecond and at or below every id of it or later, as text", () => {
    const t = Date.UTC(2026, 11, 6, 12);
    const floor = uuidv7Floor(t);
    expect(floor).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-0000-0000-000000000000$/);
    for (let i = 0; i < 200; i++) {
      expect(uuidv7(t - 1 - i * 997) < floor).toBe(true);
      expect(uuidv7(t + i * 997) > floor).toBe(true);
    }
    expect(uuidv7Floor(0)).toBe(NIL_UUID);
  });
});

describe('retention config', () => {
  const parse = (retention: unknown) => parseConfig(configDoc('sqlite:/tmp/x.db', { retention }), {});
  it('takes processedPayloadDays and failedPayloadDays as days (fractions too), and keeps payloads when absent', () => {
    expect(parse({ processedPayloadDays: 30 }).retention).toEqual({ processedPayloadDays: 30, failedPayloadDays: undefined });
    expect(parse({ processedPayloadDays: 0.5, failedPayloadDays: 90 }).retention).toEqual({ processedPayloadDays: 0.5, failedPayloadDays: 90 });
    expect(parse({ failedPayloadDays: 0 }).retention).toEqual({ processedPayloadDays: undefined, failedPayloadDays: 0 });
    expect(parseConfig(configDoc('sqlite:/tmp/x.db'), {}).retention).toEqual({ processedPayloadDays: undefined, failedPayloadDays: undefined });
  });
  it('names the bad path', () => {
    expect(() => parse({ processedPayloadDays: -1 })).toThrow(ConfigError);
    expect(() => parse({ processedPayloadDays: -1 })).toThrow(/retention\.processedPayloadDays/);
    expect(() => parse({ processedPayloadDays: '30d' })).toThrow(/retention\.processedPayloadDays/);
    expect(() => parse({ failedPayloadDays: 40_000 })).toThrow(/retention\.failedPayloadDays/);
    expect(() => parse({ failedPayloadDays: null })).toThrow(/retention\.failedPayloadDays/);
    expect(() => parse({ payloadDays: 30 })).toThrow(/retention\.payloadDays/);
  });
});

describeEachStore('payload retention', (kind) => {
  let app: TestApp | undefined;
  afterEach(async () => {
    await app?.stop();
    app = undefined;
  });

  /** Seeds events received `ages` ago and waits for the workers to settle every one. */
  async function seedSettled(events: readonly AcceptRecord[]): Promise<void> {
    const results = await app!.store.acceptBatch(events);
    expect(results.map((r) => r.duplicate)).toEqual(events.map(() => false));
    await waitFor(async () => {
      const rows = await Promise.all(events.map((e) => app!.store.getInbox(e.inboxId)));
      return rows.every((r) => r?.status === 'PROCESSED' || r?.status === 'FAILED') || undefined;
    }, 15_000, 'every seeded event settled');
  }
  const payloadKept = async (e: AcceptRecord) => (await app!.store.getPayload(e.payloadId)) !== null;

  it("purgePayloads('PROCESSED'): only PROCESSED events received before the cutoff lose their payload, in id order, at most the limit per call, from the cursor; their inbox rows stay", async () => {
    app = await startTestApp(kind, { ...FAST_WORKERS }, {}, { workers: true, handlers: handlers(), pruneSchedule: { firstAfterMs: 1e9, everyMs: 1e9, batch: 1 } });
    const p40 = acceptedAgo('evt_p40', 40 * DAY);
    const f38 = acceptedAgo('evt_f38', 38 * DAY, 'charge.failed');
    const p35 = acceptedAgo('evt_p35', 35 * DAY);
    const p31 = acceptedAgo('evt_p31', 31 * DAY);
    const p10 = acceptedAgo('evt_p10', 10 * DAY);
    // An id older than its receipt (never minted so; the cutoff is on received_at all the same).
    const p10OldId = { ...acceptedAgo('evt_p10_old_id', 10 * DAY), payloadId: uuidv7(Date.now() - 39 * DAY) };
    await seedSettled([p40, f38, p35, p31, p10, p10OldId]);
    expect((await app.store.getInbox(f38.inboxId))!.status).toBe('FAILED');

    const cutoff = Date.now() - 30 * DAY;
    // From a cursor: only what lies after it.
    expect(await app.store.purgePayloads('PROCESSED', cutoff, p35.payloadId, 2)).toEqual({ deleted: 1, last: p31.payloadId });
    expect(await payloadKept(p31)).toBe(false);
    expect(await payloadKept(p35)).toBe(true);
    // From the start, the oldest first; the FAILED one lies between the two in id order: skipped, not counted.
    expect(await app.store.purgePayloads('PROCESSED', cutoff, undefined, 2)).toEqual({ deleted: 2, last: p35.payloadId });
    expect(await payloadKept(p40)).toBe(false);
    expect(await payloadKept(p35)).toBe(false);
    expect(await app.store.purgePayloads('PROCESSED', cutoff, undefined, 2)).toEqual({ deleted: 0, last: undefined });

    for (const gone of [p40, p35, p31]) {
      const row = (await app.store.getInbox(gone.inboxId))!;
      expect(row.status).toBe('PROCESSED');
      expect(row.rawPayloadRef).toBeNull();
      expect(row.payloadHash.equals(gone.payloadHash)).toBe(true);
    }
    // FAILED (an operator may requeue it) and too recent: kept, and still referenced.
    expect(await payloadKept(f38)).toBe(true);
    expect(await payloadKept(p10)).toBe(true);
    expect(await payloadKept(p10OldId)).toBe(true);
    expect((await app.store.getInbox(p10.inboxId))!.rawPayloadRef).toBe(p10.payloadId);

    // The FAILED status's own purge takes the FAILED one and no other.
    const f20 = acceptedAgo('evt_f20', 20 * DAY, 'charge.failed');
    await seedSettled([f20]);
    expect(await app.store.purgePayloads('FAILED', cutoff, undefined, 10)).toEqual({ deleted: 1, last: f38.payloadId });
    expect(await payloadKept(f38)).toBe(false);
    expect(await payloadKept(f20)).toBe(true);
    expect(await payloadKept(p10)).toBe(true);
    expect(await app.store.purgePayloads('FAILED', cutoff, undefined, 10)).toEqual({ deleted: 0, last: undefined });
  });

  it('a FAILED event whose payload retention deleted is not retried or requeued (it could only fail again); one with its payload is', async () => {
    app = await startTestApp(kind, { ...FAST_WORKERS }, {}, { workers: true, handlers: handlers(), pruneSchedule: { firstAfterMs: 1e9, everyMs: 1e9, batch: 1 } });
    const gone = acceptedAgo('evt_gone', 40 * DAY, 'charge.failed');
    const kept = acceptedAgo('evt_kept', 10 * DAY, 'charge.failed');
    const goneToo = acceptedAgo('evt_gone_too', 35 * DAY, 'charge.failed');
    await seedSettled([gone, kept, goneToo]);
    expect(await app.store.purgePayloads('FAILED', Date.now() - 30 * DAY, undefined, 10)).toMatchObject({ deleted: 2 });
    expect(await payloadKept(kept)).toBe(true);

    expect(await app.store.retryFailed(gone.inboxId, Date.now())).toBe('payload_purged');
    expect((await app.store.getInbox(gone.inboxId))!.status).toBe('FAILED');
    const dir = mkdtempSync(join(tmpdir(), 'wi-retry-'));
    try {
      const file = join(dir, 'c.yaml');
      writeFileSync(file, stringify(configDoc(app.db.url)));
      const r = await runCli(['retry', '--config', file, goneToo.inboxId]);
      expect(r.code).toBe(1);
      expect(r.err).toContain(`event ${goneToo.inboxId} is FAILED and its raw payload was deleted by retention (retention.failedPayloadDays): it cannot be processed again`);
      // requeue by reason: only the one that still has its payload.
      const failure = (await app.store.getEvent(kept.inboxId))!.failureReason!;
      expect((await app.store.getEvent(gone.inboxId))!.failureReason).toBe(failure);
      expect(await app.store.requeueFailed([failure], Date.now())).toBe(1);
      expect((await app.store.getInbox(kept.inboxId))!.status).not.toBe('FAILED');
      expect((await app.store.getInbox(gone.inboxId))!.status).toBe('FAILED');
      expect((await app.store.getInbox(goneToo.inboxId))!.status).toBe('FAILED');
      // Settled FAILED again by its handler: a plain retry still works for it.
      await waitFor(async () => (await app!.store.getInbox(kept.inboxId))!.status === 'FAILED' || undefined, 15_000, 'requeued event failed again');
      expect(await app.store.retryFailed(kept.inboxId, Date.now())).toBe('requeued');
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('serve with retention.processedPayloadDays and failedPayloadDays purges on its schedule, in batches; a late retry of a purged event is still a duplicate', async () => {
    const retention = { processedPayloadDays: 30, failedPayloadDays: 60 };
    app = await startTestApp(kind, { ...FAST_WORKERS, retention }, {}, { workers: true, handlers: handlers(), pruneSchedule: { firstAfterMs: 0, everyMs: 100, batch: 1 } });
    const old = [acceptedAgo('evt_a', 45 * DAY), acceptedAgo('evt_b', 33 * DAY), acceptedAgo('evt_c', 31 * DAY), acceptedAgo('evt_f', 61 * DAY, 'charge.failed')];
    const young = [acceptedAgo('evt_young', 29 * DAY), acceptedAgo('evt_f_young', 45 * DAY, 'charge.failed')];
    await seedSettled([...old, ...young]);
    await waitFor(async () => (await Promise.all(old.map(payloadKept))).every((k) => !k) || undefined, 10_000, 'old payloads purged');
    for (const e of young) expect(await payloadKept(e)).toBe(true);
    const m = await scrapeMetrics(app.url);
    expect(m('webhook_pruned_rows_total', 'what="payload"')).toBe(4);
    expect(m('webhook_prune_failures_total')).toBe(0);

    // Stripe retries evt_a (its signed timestamp fresh, as a retry's is): same inbox row, no new work.
    const body = stripeEvent('evt_a');
    const res = await post(`${app.url}/webhooks/stripe`, body, stripeHeaders(body));
    expect(res.status).toBe(200);
    expect(res.json()).toEqual({ inbox_id: old[0]!.inboxId, duplicate: true });
    expect((await app.store.getInbox(old[0]!.inboxId))!.status).toBe('PROCESSED');
  });

  it('webhook-inbox prune runs the same tasks once and prints what went; without retention it says there is nothing to prune', async () => {
    app = await startTestApp(kind, { ...FAST_WORKERS }, {}, { workers: true, handlers: handlers(), pruneSchedule: { firstAfterMs: 1e9, everyMs: 1e9, batch: 1 } });
    const old = [acceptedAgo('evt_x', 50 * DAY), acceptedAgo('evt_y', 40 * DAY)];
    const young = acceptedAgo('evt_z', 5 * DAY);
    await seedSettled([...old, young]);
    const dir = mkdtempSync(join(tmpdir(), 'wi-prune-'));
    try {
      const file = join(dir, 'c.yaml');
      writeFileSync(file, stringify(configDoc(app.db.url)));
      const none = await runCli(['prune', '--config', file]);
      expect(none).toMatchObject({ code: 0, out: expect.stringContaining('nothing to prune') });
      expect(await payloadKept(old[0]!)).toBe(true);

      writeFileSync(file, stringify(configDoc(app.db.url, { retention: { processedPayloadDays: 30 } })));
      const r = await runCli(['prune', '--config', file]);
      expect(r.code).toBe(0);
      expect(r.out).toBe('deleted 2: payloads of processed events received more than 30 day(s) ago\n');
      expect(await payloadKept(old[0]!)).toBe(false);
      expect(await payloadKept(old[1]!)).toBe(false);
      expect(await payloadKept(young)).toBe(true);
      expect((await runCli(['prune', '--config', file])).out).toBe('deleted 0: payloads of processed events received more than 30 day(s) ago\n');
      // events show tells the operator the body is gone; its hash is what is left.
      const shown = JSON.parse((await runCli(['events', 'show', '--config', file, old[0]!.inboxId])).out);
      expect(shown).toMatchObject({ status: 'PROCESSED', payload_stored: false, payload_sha256: old[0]!.payloadHash.toString('hex') });
      expect(JSON.parse((await runCli(['events', 'show', '--config', file, young.inboxId])).out)).toMatchObject({ payload_stored: true });
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('without retention, serve purges nothing', async () => {
    app = await startTestApp(kind, { ...FAST_WORKERS }, {}, { workers: true, handlers: handlers(), pruneSchedule: { firstAfterMs: 0, everyMs: 50, batch: 1 } });
    const old = acceptedAgo('evt_old', 400 * DAY);
    await seedSettled([old]);
    await new Promise((r) => setTimeout(r, 400));
    expect(await payloadKept(old)).toBe(true);
    expect((await scrapeMetrics(app.url))('webhook_pruned_rows_total', 'what="payload"')).toBeNaN();
  });
});

// SQLite has one writer: nothing can requeue a row between the purge's read and its delete.
describe.runIf(await pgAvailable())('payload retention racing a requeue [postgres]', () => {
  let app: TestApp | undefined;
  afterEach(async () => {
    await app?.stop();
    app = undefined;
  });

  it('a FAILED event requeued while the purge waits for its row keeps its payload', async () => {
    app = await startTestApp('postgres', { ...FAST_WORKERS }, {}, { workers: true, handlers: handlers(), pruneSchedule: { firstAfterMs: 1e9, everyMs: 1e9, batch: 1 } });
    const failed = acceptedAgo('evt_requeued', 40 * DAY, 'charge.failed');
    const results = await app.store.acceptBatch([failed]);
    expect(results[0]!.duplicate).toBe(false);
    await waitFor(async () => (await app!.store.getInbox(failed.inboxId))!.status === 'FAILED' || undefined, 15_000, 'the event failed');
    const operator = new pg.Client({ connectionString: app.db.url });
    await operator.connect();
    try {
      // An operator's requeue, not yet committed, holds the row.
      await operator.query('BEGIN');
      expect((await operator.query(`UPDATE webhook_inbox SET status = 'PENDING' WHERE inbox_id = $1 AND status = 'FAILED'`, [failed.inboxId])).rowCount).toBe(1);
      let settled = false;
      const purge = app.store.purgePayloads('FAILED', Date.now() - 30 * DAY, undefined, 10).finally(() => { settled = true; });
      await new Promise((r) => setTimeout(r, 300));
      expect(settled).toBe(false); // waiting for the row
      await operator.query('COMMIT');
      expect(await purge).toEqual({ deleted: 0, last: undefined });
      expect(await app.store.getPayload(failed.payloadId)).not.toBeNull();
      expect((await app.store.getInbox(failed.inboxId))!.rawPayloadRef).toBe(failed.payloadId);
    } finally {
      await operator.end();
    }
  });

  it('a retry that waited for a purge of its row is refused as payload_purged, not as "not FAILED"', async () => {
    app = await startTestApp('postgres', { ...FAST_WORKERS }, {}, { workers: true, handlers: handlers(), pruneSchedule: { firstAfterMs: 1e9, everyMs: 1e9, batch: 1 } });
    const failed = acceptedAgo('evt_purged_meanwhile', 40 * DAY, 'charge.failed');
    expect((await app.store.acceptBatch([failed]))[0]!.duplicate).toBe(false);
    await waitFor(async () => (await app!.store.getInbox(failed.inboxId))!.status === 'FAILED' || undefined, 15_000, 'the event failed');
    const purger = new pg.Client({ connectionString: app.db.url });
    await purger.connect();
    try {
      // A purge, not yet committed: its foreign key's SET NULL holds the inbox row.
      await purger.query('BEGIN');
      expect((await purger.query('DELETE FROM webhook_payload WHERE payload_id = $1', [failed.payloadId])).rowCount).toBe(1);
      let settled = false;
      const retry = app.store.retryFailed(failed.inboxId, Date.now()).finally(() => { settled = true; });
      await new Promise((r) => setTimeout(r, 300));
      expect(settled).toBe(false); // waiting for the row
      await purger.query('COMMIT');
      expect(await retry).toBe('payload_purged');
      expect((await app.store.getInbox(failed.inboxId))!.status).toBe('FAILED');
    } finally {
      await purger.end();
    }
  });
});
