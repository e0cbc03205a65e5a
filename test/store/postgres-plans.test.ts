import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { uuidv7Floor } from '../../src/crypto/ids.js';
import { openStore } from '../../src/store/open.js';
import type { InboxStore } from '../../src/store/port.js';
import * as SQL from '../../src/store/postgres/sql.js';
import { ACCEPT_PLANS, WORK_PLANS } from '../../src/store/postgres/store.js';
import * as W from '../../src/store/postgres/work-sql.js';
import { pgAvailable } from '../helpers/pg.js';
import { record } from '../helpers/records.js';
import { freshDatabase, type TestDatabase } from '../helpers/stores.js';

const NIL = '00000000-0000-0000-0000-000000000000';
const GROWN_TO = 5000;

/**
 * A statement's plan can be made once, at its first use, which on a new database is against
 * empty tables. Plans made then must still probe indexes when the tables have grown: a full scan
 * of webhook_inbox on every duplicate or every claim makes each one slower as the inbox grows.
 * Each statement runs here on a connection planning as its pool does (store.ts), first on empty
 * tables, then is explained after GROWN_TO events were accepted.
 */
describe.runIf(await pgAvailable())('PostgreSQL plans made on an empty database', () => {
  let db: TestDatabase;
  let store: InboxStore;
  const clients: pg.Client[] = [];
  const connect = async (options?: string) => {
    const c = new pg.Client({ connectionString: db.url, options });
    await c.connect();
    clients.push(c);
    return c;
  };
  beforeAll(async () => {
    db = await freshDatabase('postgres');
    store = openStore(db.url);
    await store.migrate();
  });
  afterAll(async () => {
    for (const c of clients) await c.end();
    await store?.close();
    await db?.cleanup();
  });

  const FULL_SCAN = /Seq Scan on webhook_(inbox|outbox|payload)\b/;

  it('the accept pool’s winners lookup and retention purge, and the work pool’s claims, lease reads, payload reads, relay settles and requeues probe indexes', async () => {
    const accept = await connect(ACCEPT_PLANS);
    const work = await connect(WORK_PLANS);
    const now = Date.now();
    const statements: [pg.Client, string, string, string][] = [
      [accept, 'winners', SQL.SELECT_WINNERS, `('{stripe}', '{ep}', '{evt_absent}')`],
      [accept, 'purge_payloads', SQL.PURGE_PAYLOADS.text, `('${NIL}', '${uuidv7Floor(now)}', ${now}, 1000, 'FAILED')`],
      [work, 'claim_inbox', W.CLAIM_INBOX.text, `(10, 'owner', ${now}, ${now + 30_000})`],
      [work, 'claim_outbox', W.CLAIM_OUTBOX.text, `(10, 'owner', ${now}, ${now + 30_000})`],
      [work, 'read_leased', W.READ_LEASED.text, `('{${NIL}}', 'owner')`],
      [work, 'extend_leases', W.EXTEND_INBOX_LEASES.text, `('{${NIL}}', 'owner', ${now})`],
      [work, 'read_payloads', W.READ_PAYLOADS.text, `('{${NIL}}', 1048576)`],
      [work, 'settle_outbox', W.SETTLE_OUTBOX_BATCH.text, `('{${NIL}}', '{${now}}', '{NULL}', '{NULL}', 'owner', '{NULL}', '{NULL}')`],
      [work, 'requeue_failed', W.REQUEUE_FAILED.text, `('{handler_error}', ${now})`],
      [work, 'list_parked_outbox', W.LIST_PARKED_OUTBOX.text, `(100)`],
      [work, 'requeue_parked_outbox', W.REQUEUE_PARKED_OUTBOX.text, `('{${NIL}}', ${now})`],
    ];
    // First uses, on empty tables (past `auto`'s five custom plans, had a pool used it).
    for (const [c, name, text, args] of statements) {
      await c.query(`PREPARE ${name} AS ${text}`);
      for (let i = 0; i < 6; i++) await c.query(`EXECUTE ${name}${args}`);
    }
    for (let b = 0; b < GROWN_TO / 100; b++) {
      await store.acceptBatch(Array.from({ length: 100 }, (_, i) => record(`evt_${b}_${i}`)));
    }
    expect((await store.countRows()).inbox).toBe(GROWN_TO);

    const plans: Record<string, string> = {};
    for (const [c, name, , args] of statements) {
      plans[name] = (await c.query<{ 'QUERY PLAN': string }>(`EXPLAIN EXECUTE ${name}${args}`)).rows.map((r) => r['QUERY PLAN']).join('\n');
    }
    // Inside a handler's transaction plan_cache_mode is `auto` (tx.ts); LOCK_LEASED is unnamed
    // there, so it is planned afresh at each run, as here.
    const auto = await connect();
    plans.lock_leased = (await auto.query<{ 'QUERY PLAN': string }>(`EXPLAIN ${W.LOCK_LEASED.text.replace('$1::uuid[]', `'{${NIL}}'::uuid[]`).replace('$2', `'owner'`)}`)).rows.map((r) => r['QUERY PLAN']).join('\n');

    for (const [name, plan] of Object.entries(plans)) expect(plan, `${name}:\n${plan}`).not.toMatch(FULL_SCAN);
    expect(plans.winners).toMatch(/Index Scan using webhook_inbox_provider_endpoint_id_provider_event_id_key/);
    expect(plans.claim_inbox).toMatch(/Index Scan using webhook_inbox_pkey|Bitmap Index Scan on webhook_inbox_pkey/);
    expect(plans.lock_leased).toMatch(/webhook_inbox_pkey/);
    // Retention walks the payload refs in range, not the whole inbox.
    expect(plans.purge_payloads).toMatch(/Index Scan using webhook_inbox_payload on webhook_inbox/);
  });

  it('the /metrics backlog reads the rows still to do, not every processed one', async () => {
    const work = await connect(WORK_PLANS);
    // Most of an inbox is done; statistics as autovacuum would leave them.
    await work.query(`UPDATE webhook_inbox SET status = 'PROCESSED', next_attempt_at = NULL WHERE provider_event_id !~ '^evt_0_'`);
    await work.query(`UPDATE webhook_inbox SET status = 'FAILED', failure_reason = 'handler_error' WHERE provider_event_id ~ '^evt_0_1'`);
    await work.query('VACUUM ANALYZE webhook_inbox');
    const plan = (await work.query<{ 'QUERY PLAN': string }>(`EXPLAIN ${W.BACKLOG.text}`)).rows.map((r) => r['QUERY PLAN']).join('\n');
    expect(plan, plan).not.toMatch(FULL_SCAN);
    expect(plan).toMatch(/webhook_inbox_due/);
    const backlog = await store.backlog();
    expect(backlog.map((b) => [b.status, b.count])).toEqual([['PENDING', 89]]);
    // The FAILED rows (they pile up, waiting for an operator) are counted from their partial index
    // alone, as one number: not read row by row and grouped by endpoint and type.
    const stats = (await work.query<{ 'QUERY PLAN': string }>(`EXPLAIN ${W.QUEUE_STATS.text}`)).rows.map((r) => r['QUERY PLAN']).join('\n');
    expect(stats, stats).toMatch(/Index Only Scan using webhook_inbox_failed\w* on webhook_inbox/);
    expect((await store.queueStats()).inboxFailed).toBe(11);
  });

  it('the /metrics queue stats count the effects still to do and the FAILED ones, not every DONE effect', async () => {
    const work = await connect(WORK_PLANS);
    // One effect per event: 1 in 50 PENDING, 1 in 50 FAILED, the rest DONE (the history that grows).
    await work.query(`
      INSERT INTO webhook_effects (effect_id, inbox_id, name, idempotency_key, data, status, failure_reason, next_attempt_at, created_at)
      SELECT gen_random_uuid(), inbox_id, 'notify', 'key-' || inbox_id, '{}',
             CASE n % 50 WHEN 0 THEN 'PENDING' WHEN 1 THEN 'FAILED' ELSE 'DONE' END,
             CASE n % 50 WHEN 1 THEN 'effect_error' END, now(), now()
      FROM (SELECT inbox_id, row_number() OVER (ORDER BY inbox_id) AS n FROM webhook_inbox) i`);
    await work.query('VACUUM ANALYZE webhook_effects');
    const plan = (await work.query<{ 'QUERY PLAN': string }>(`EXPLAIN ${W.QUEUE_STATS.text}`)).rows.map((r) => r['QUERY PLAN']).join('\n');
    expect(plan, plan).not.toMatch(/Seq Scan on webhook_(effects|outbox)\b/);
    expect(plan).toMatch(/webhook_effects_due/);
    expect(plan).toMatch(/webhook_effects_failed/);
    expect(plan).toMatch(/webhook_outbox_parked/);
    expect((await store.queueStats()).effects).toEqual({ PENDING: GROWN_TO / 50, PROCESSING: 0, FAILED: GROWN_TO / 50 });
  });

  it('effects failed and effects retry read the FAILED effects\' index, not every DONE effect (after the test above filled the table)', async () => {
    const work = await connect(WORK_PLANS);
    const statements: [string, string, string][] = [
      ['list_failed_effects', W.LIST_FAILED_EFFECTS.text, '(100)'],
      ['retry_failed_effects', W.RETRY_FAILED_EFFECTS.text, `(NULL, ${Date.now()})`],
      ['retry_failed_effect_ids', W.RETRY_FAILED_EFFECTS.text, `('{${NIL}}', ${Date.now()})`],
    ];
    for (const [name, text, args] of statements) {
      await work.query(`PREPARE ${name} AS ${text}`);
      const plan = (await work.query<{ 'QUERY PLAN': string }>(`EXPLAIN EXECUTE ${name}${args}`)).rows.map((r) => r['QUERY PLAN']).join('\n');
      expect(plan, `${name}:\n${plan}`).not.toMatch(/Seq Scan on webhook_effects\b/);
    }
    expect(await store.listFailedEffects(1000)).toHaveLength(GROWN_TO / 50);
  });

  it('a keys reseal page of effects starts at its cursor in the effects\' primary key, not with a scan and sort of every effect (after the tests above filled the table)', async () => {
    const work = await connect(WORK_PLANS);
    // The effects above hold plain '{}': every one is still to seal, as before a first reseal.
    const cursor = (await work.query<{ id: string }>('SELECT effect_id::text AS id FROM webhook_effects ORDER BY effect_id OFFSET 1000 LIMIT 1')).rows[0]!.id;
    await work.query(`PREPARE effects_to_reseal AS ${W.EFFECTS_TO_RESEAL.text}`);
    const plan = (await work.query<{ 'QUERY PLAN': string }>(`EXPLAIN EXECUTE effects_to_reseal('sealed:azI.', '${cursor}', 50)`)).rows.map((r) => r['QUERY PLAN']).join('\n');
    expect(plan, plan).not.toMatch(/Seq Scan on webhook_effects\b/);
    expect(plan, plan).not.toMatch(/Sort Key/);
    expect(plan).toMatch(/Index Scan using webhook_effects_pkey/);
    // And the pages walk the effects in id order from the cursor on.
    const page = await store.effectsToReseal('sealed:azI.', cursor, 50);
    const expected = (await work.query<{ id: string }>('SELECT effect_id::text AS id FROM webhook_effects WHERE effect_id > $1 ORDER BY effect_id LIMIT 50', [cursor])).rows.map((r) => r.id);
    expect(page.map((e) => e.effectId)).toEqual(expected);
  });

  it('a batch with a duplicate still answers the winner after the inbox grew (the lateral lookup)', async () => {
    const [dup, fresh] = await store.acceptBatch([record('evt_0_7'), record('evt_new')]);
    expect(dup!.duplicate).toBe(true);
    expect(await store.getInbox(dup!.inboxId)).toMatchObject({ providerEventId: 'evt_0_7' });
    expect(fresh!.duplicate).toBe(false);
  });
});
