import { createHash, randomBytes, randomUUID } from 'node:crypto';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { MIGRATIONS } from '../../src/store/migrations.js';
import { openStore } from '../../src/store/open.js';
import type { InboxStore, TransmissionBinding } from '../../src/store/port.js';
import { cipher, record } from '../helpers/records.js';
import { describeEachStore, freshDatabase, type TestDatabase } from '../helpers/stores.js';

/** The storage port contract; the same assertions for both adapters. */
describeEachStore('store contract', (kind) => contract(kind));

function contract(kind: 'sqlite' | 'postgres'): void {
  let db: TestDatabase;
  let store: InboxStore;
  beforeAll(async () => {
    db = await freshDatabase(kind);
    store = openStore(db.url);
    expect(await store.migrate()).toEqual(MIGRATIONS.map((m) => m.version));
  });
  afterAll(async () => {
    await store?.close();
    await db?.cleanup();
  });

  it('migrations are idempotent', async () => {
    expect(await store.migrate()).toEqual([]);
  });

  it('stores a new event as PENDING with every field, its payload and one outbox row', async () => {
    const r = record('evt_fields', undefined, { receivedAtMs: 1_750_000_000_123 });
    const [res] = await store.acceptBatch([r]);
    expect(res).toEqual({ inboxId: r.inboxId, duplicate: false });
    const row = (await store.getInbox(r.inboxId))!;
    expect(row).toMatchObject({
      inboxId: r.inboxId, provider: 'stripe', endpointId: 'ep', providerEventId: 'evt_fields',
      eventType: 'payment_intent.succeeded', objectId: 'pi_1', objectVersion: null,
      providerCreatedAtMs: 1_700_000_000_000, receivedAtMs: 1_750_000_000_123,
      rawPayloadRef: r.payloadId, matchedSecretVersion: 'v1', status: 'PENDING', attemptCount: 0,
      nextAttemptAtMs: 1_750_000_000_123, leaseUntilMs: null, lastError: null,
    });
    expect(row.payloadHash.equals(r.payloadHash)).toBe(true);
    const stored = (await store.getPayload(r.payloadId))!;
    expect(cipher.open(stored, { provider: 'stripe', endpointId: 'ep', providerEventId: 'evt_fields' }).toString()).toBe('{"id":"evt_fields"}');
  });

  it('answers a later copy of a stored event as a duplicate of the first row, writing nothing', async () => {
    const first = record('evt_dup');
    await store.acceptBatch([first]);
    const before = await store.countRows();
    const [res] = await store.acceptBatch([record('evt_dup')]);
    expect(res).toEqual({ inboxId: first.inboxId, duplicate: true });
    expect(await store.countRows()).toEqual(before);
  });

  it('de-duplicates copies inside one batch and keeps results in input order', async () => {
    const a1 = record('evt_a'), b = record('evt_b'), a2 = record('evt_a'), c = record('evt_c'), a3 = record('evt_a');
    const before = await store.countRows();
    const res = await store.acceptBatch([a1, b, a2, c, a3]);
    expect(res).toEqual([
      { inboxId: a1.inboxId, duplicate: false },
      { inboxId: b.inboxId, duplicate: false },
      { inboxId: a1.inboxId, duplicate: true },
      { inboxId: c.inboxId, duplicate: false },
      { inboxId: a1.inboxId, duplicate: true },
    ]);
    const after = await store.countRows();
    expect(after.inbox - before.inbox).toBe(3);
    expect(after.outbox - before.outbox).toBe(3);
    expect(after.payload - before.payload).toBe(3);
  });

  it('a batch of any size stores exactly its own rows (PostgreSQL pads batches to a few statement sizes with rows that must insert nothing)', async () => {
    for (const n of [1, 5, 7, 13, 17, 25, 33, 49, 65]) {
      const before = await store.countRows();
      const records = Array.from({ length: n }, (_, i) => record(`evt_size_${n}_${i}`));
      const withCopy = [...records, record(`evt_size_${n}_0`)]; // one duplicate rides along
      const res = await store.acceptBatch(withCopy);
      expect(res, `batch of ${n}`).toEqual([...records.map((r) => ({ inboxId: r.inboxId, duplicate: false })), { inboxId: records[0]!.inboxId, duplicate: true }]);
      const after = await store.countRows();
      expect([after.inbox - before.inbox, after.outbox - before.outbox, after.payload - before.payload], `batch of ${n}`).toEqual([n, n, n]);
    }
  });

  it('keys uniqueness on (provider, endpoint, event id): the same id elsewhere is a new row', async () => {
    const a = record('evt_scope');
    const otherEndpoint = record('evt_scope', undefined, { endpointId: 'ep2' });
    const otherProvider = record('evt_scope', undefined, { provider: 'github' });
    const res = await store.acceptBatch([a, otherEndpoint, otherProvider]);
    expect(res.map((r) => r.duplicate)).toEqual([false, false, false]);
  });

  it('commits a batch all-or-nothing', async () => {
    const before = await store.countRows();
    const good = record('evt_atomic_good');
    // A payload id that collides with an existing one makes the batch fail inside the transaction.
    const existing = record('evt_atomic_existing');
    await store.acceptBatch([existing]);
    const bad = record('evt_atomic_bad', undefined, { payloadId: existing.payloadId });
    await expect(store.acceptBatch([good, bad])).rejects.toThrow();
    const after = await store.countRows();
    expect(after.inbox - before.inbox).toBe(1);
    expect(await store.getInbox(good.inboxId)).toBeNull();
  });

  it('serves many concurrent batches from several callers without losing or doubling a row', async () => {
    const ids = Array.from({ length: 50 }, (_, i) => `evt_conc_${i}`);
    const calls = Array.from({ length: 8 }, () => store.acceptBatch(ids.map((id) => record(id))));
    const results = await Promise.all(calls);
    for (let i = 0; i < ids.length; i++) {
      const forId = results.map((r) => r[i]!);
      expect(forId.filter((r) => !r.duplicate)).toHaveLength(1);
      expect(new Set(forId.map((r) => r.inboxId)).size).toBe(1);
    }
  });

  // PostgreSQL storage layout only (SQLite keeps large values in overflow pages of the row's own b-tree).
  if (kind === 'postgres') it('PostgreSQL keeps a typical sealed payload (≤ ~8 KB) in its row and moves a larger one out of line, uncompressed; both read back exact', async () => {
    const query = <R extends Record<string, unknown>>(text: string, params?: unknown[]) => store.transaction((tx) => tx.query<R>(text, params));
    const toast = (await query<{ t: string }>(`SELECT reltoastrelid::regclass::text AS t FROM pg_class WHERE relname = 'webhook_payload'`))[0]!.t;
    const chunks = async () => Number((await query<{ n: string }>(`SELECT count(*) AS n FROM ${toast}`))[0]!.n);
    const body = (id: string, bytes: number) => JSON.stringify({ id, pad: randomBytes(bytes / 2).toString('hex') });
    /** Accepts one event with a body of about `bytes`; returns how many TOAST chunks that added. */
    const check = async (id: string, bytes: number) => {
      const raw = body(id, bytes);
      const r = record(id, raw);
      const before = await chunks();
      await store.acceptBatch([r]);
      const stored = (await store.getPayload(r.payloadId))!;
      expect(cipher.open(stored, { provider: 'stripe', endpointId: 'ep', providerEventId: id }).toString()).toBe(raw);
      const [size] = await query<{ stored: number; len: number }>(
        'SELECT pg_column_size(ciphertext) AS stored, octet_length(ciphertext) AS len FROM webhook_payload WHERE payload_id = $1', [r.payloadId]);
      expect(size!.stored).toBeGreaterThanOrEqual(size!.len); // stored as is: ciphertext does not compress, so it is never tried
      return (await chunks()) - before;
    };
    expect(await check('evt_inline_6k', 6000)).toBe(0);
    expect(await check('evt_toast_20k', 20000)).toBeGreaterThan(0);
  });

  it('binds a transmission id to one body: the same bytes again are fine (a retry), other bytes are refused, per provider (not per endpoint), from any store instance', async () => {
    const binding = (transmissionId: string, body: string, over: Partial<TransmissionBinding> = {}): TransmissionBinding => ({
      provider: 'paypal', endpointId: 'ep', transmissionId, payloadHash: createHash('sha256').update(body).digest(), receivedAtMs: Date.now(), ...over,
    });
    const bind = async (on: InboxStore, b: TransmissionBinding) => (await on.bindTransmissions([b]))[0];
    const t = `tx-${randomUUID()}`;
    expect(await bind(store, binding(t, 'original'))).toBe(true);
    expect(await bind(store, binding(t, 'original'))).toBe(true);
    expect(await bind(store, binding(t, 'forged'))).toBe(false);
    expect(await bind(store, binding(t, 'forged', { endpointId: 'ep2' }))).toBe(false);
    expect(await bind(store, binding(t, 'forged', { provider: 'other' }))).toBe(true); // another provider's ids are its own
    const other = openStore(db.url);
    try {
      expect(await bind(other, binding(t, 'forged'))).toBe(false);
      expect(await bind(other, binding(t, 'original'))).toBe(true);
      // Racing binds of a new id from two instances: exactly one body wins, and every answer agrees with it.
      const u = `tx-${randomUUID()}`;
      const tries = Array.from({ length: 40 }, (_, i) => ({ body: i % 2 === 0 ? 'a' : 'b', on: i % 4 < 2 ? store : other }));
      const answers = await Promise.all(tries.map((x) => bind(x.on, binding(u, x.body))));
      const winners = new Set(tries.filter((_, i) => answers[i]).map((x) => x.body));
      expect(winners.size).toBe(1);
      expect(answers.filter(Boolean)).toHaveLength(20);
      // One call (one transaction): answers in input order; of two bindings of one new id, the first wins.
      const v = `tx-${randomUUID()}`, w = `tx-${randomUUID()}`;
      expect(await store.bindTransmissions([binding(v, 'first'), binding(t, 'forged'), binding(v, 'second'), binding(t, 'original'), binding(w, 'x'), binding(v, 'first')]))
        .toEqual([true, false, false, true, true, true]);
      expect(await other.bindTransmissions([binding(w, 'y'), binding(v, 'first')])).toEqual([false, true]);
    } finally {
      await other.close();
    }
  });

  it('a second store instance on the same database sees the same rows (and the unique key across processes)', async () => {
    const other = openStore(db.url);
    try {
      const first = record('evt_cross');
      await store.acceptBatch([first]);
      const [res] = await other.acceptBatch([record('evt_cross')]);
      expect(res).toEqual({ inboxId: first.inboxId, duplicate: true });
    } finally {
      await other.close();
    }
  });
}
