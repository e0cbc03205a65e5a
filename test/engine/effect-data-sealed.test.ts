import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import pg from 'pg';
import pino from 'pino';
import { afterEach, beforeEach, expect, it } from 'vitest';
import { stringify } from 'yaml';
import { startApp, type RunningApp } from '../../src/app.js';
import { parseConfig } from '../../src/config/schema.js';
import { HandlerRegistry } from '../../src/engine/handlers.js';
import { openStore } from '../../src/store/open.js';
import { resealAll } from '../../src/cli/keys.js';
import { PayloadCipher } from '../../src/crypto/payload-cipher.js';
import type { InboxStore } from '../../src/store/port.js';
import { configDoc, PAYLOAD_KEY } from '../helpers/app.js';
import { FAST_WORKERS, waitFor } from '../helpers/engine.js';
import { stripeEvent, stripeHeaders } from '../helpers/events.js';
import { post } from '../helpers/http.js';
import { runCli } from '../helpers/server-process.js';
import { describeEachStore, freshDatabase, type TestDatabase } from '../helpers/stores.js';

/**
 * An effect's data is what a handler hands its executor: often a customer's email or name. It
 * was stored as plain JSON beside payloads that are encrypted. It is now sealed as they are, under
 * the current payload key and bound to the effect's idempotency key; `keys list` counts it per
 * key and `keys reseal` seals it again, so an old key can be removed without stranding effects.
 */

const EMAIL = 'buyer-4711@example.com';
const DATA = { to: EMAIL, amount: 4711, note: 'Grüße ✓' };
const K2 = Buffer.alloc(32, 2).toString('base64');
const b64url = (s: string) => Buffer.from(s).toString('base64url');

/** The stored data column of every effect, by inbox id, read outside the store. */
async function storedData(db: TestDatabase): Promise<Map<string, string>> {
  const sql = 'SELECT inbox_id, data FROM webhook_effects';
  if (db.kind === 'sqlite') {
    const conn = new Database(db.url.slice('sqlite:'.length), { readonly: true });
    try {
      return new Map((conn.prepare(sql).all() as { inbox_id: string; data: string }[]).map((r) => [r.inbox_id, r.data]));
    } finally {
      conn.close();
    }
  }
  const client = new pg.Client({ connectionString: db.url });
  await client.connect();
  try {
    return new Map((await client.query<{ inbox_id: string; data: string }>(`SELECT inbox_id::text, data FROM webhook_effects`)).rows.map((r) => [r.inbox_id, r.data]));
  } finally {
    await client.end();
  }
}

/** Writes an effect's data column directly (an attacker or a slip with database access, or a row from before sealing). */
async function setStoredData(db: TestDatabase, inboxId: string, data: string): Promise<void> {
  if (db.kind === 'sqlite') {
    const conn = new Database(db.url.slice('sqlite:'.length));
    conn.prepare('UPDATE webhook_effects SET data = ? WHERE inbox_id = ?').run(data, inboxId);
    conn.close();
    return;
  }
  const client = new pg.Client({ connectionString: db.url });
  await client.connect();
  await client.query('UPDATE webhook_effects SET data = $1 WHERE inbox_id = $2', [data, inboxId]);
  await client.end();
}

/** A store of its own on the database, for a look between two runs of the app. */
async function withStore<T>(db: TestDatabase, fn: (store: InboxStore) => Promise<T>): Promise<T> {
  const store = openStore(db.url);
  try {
    return await fn(store);
  } finally {
    await store.close();
  }
}

describeEachStore('effect data sealed at rest', (kind) => {
  let db: TestDatabase;
  let dir: string;
  let app: RunningApp | undefined;
  /** What the executor got, by idempotency key. */
  let got: Map<string, unknown>;
  let mailUp: boolean;

  const handlers = () => new HandlerRegistry()
    .on('payment_intent.succeeded', (event, ctx) => ctx.effect('send-receipt', { ...DATA, event: event.providerEventId }))
    .effect('send-receipt', (data, { idempotencyKey }) => {
      if (!mailUp) throw new Error('mail service unavailable');
      got.set(idempotencyKey, data);
    });
  const start = (payloadKeys: Record<string, unknown>) =>
    startApp(parseConfig(configDoc(db.url, { ...FAST_WORKERS, retry: { baseMs: 10, capMs: 40, maxAttempts: 1000 }, payloadKeys }), {}),
      { logger: pino({ level: 'silent' }), handlers: handlers(), workers: true, shutdownGraceMs: 500 });
  /** Accepts events; returns their inbox ids once each has its effect recorded. */
  const accept = async (a: RunningApp, ids: string[]): Promise<string[]> => {
    const inboxIds: string[] = [];
    for (const id of ids) {
      const body = stripeEvent(id);
      const r = await post(`${a.url}/webhooks/stripe`, body, stripeHeaders(body));
      expect(r.status).toBe(200);
      inboxIds.push(r.json().inbox_id as string);
    }
    for (const inboxId of inboxIds) await waitFor(async () => (await a.store.listEffects(inboxId)).length === 1, 10_000, 'effect recorded');
    return inboxIds;
  };
  const statusOf = async (a: RunningApp, inboxId: string) => (await a.store.listEffects(inboxId))[0]!;

  beforeEach(async () => {
    db = await freshDatabase(kind);
    dir = mkdtempSync(join(tmpdir(), 'wi-effect-data-'));
    got = new Map();
    mailUp = true;
  });
  afterEach(async () => {
    await app?.close();
    app = undefined;
    await db.cleanup();
    rmSync(dir, { recursive: true, force: true });
  });

  it('is stored sealed under the current key (the email is nowhere in the table) and its executor gets it exactly', async () => {
    app = await start({ current: 'k1', keys: { k1: PAYLOAD_KEY } });
    const [inboxId] = await accept(app, ['evt_sealed_1']);
    await waitFor(async () => (await statusOf(app!, inboxId!)).status === 'DONE', 10_000, 'effect DONE');
    expect(got.get(`${inboxId}:send-receipt`)).toEqual({ ...DATA, event: 'evt_sealed_1' });
    const stored = (await storedData(db)).get(inboxId!)!;
    expect(stored.startsWith(`sealed:${b64url('k1')}.`), stored).toBe(true);
    expect(stored).not.toContain(EMAIL);
    expect(stored).not.toContain('4711');
  });

  it('data moved onto another effect does not open (FAILED effect_data_corrupt, never executed); data stored plain before sealing still runs', async () => {
    mailUp = false;
    app = await start({ current: 'k1', keys: { k1: PAYLOAD_KEY } });
    const [a, b, c] = await accept(app, ['evt_sealed_a', 'evt_sealed_b', 'evt_sealed_c']);
    // Stopped while the rows are changed: an attempt already in flight holds the data it read
    // before the change, and would rightly run with it once the mail service is back.
    await app.close();
    const stored = await storedData(db);
    await setStoredData(db, b!, stored.get(a!)!);
    await setStoredData(db, c!, JSON.stringify({ to: 'plain@example.com' }));
    mailUp = true;
    app = await start({ current: 'k1', keys: { k1: PAYLOAD_KEY } });
    await waitFor(async () => (await statusOf(app!, a!)).status === 'DONE' && (await statusOf(app!, b!)).status === 'FAILED' && (await statusOf(app!, c!)).status === 'DONE', 10_000, 'a DONE, b FAILED, c DONE');
    expect(await statusOf(app, b!)).toMatchObject({ failureReason: 'effect_data_corrupt', lastError: 'NeedsDecisionError [effect_data_corrupt]: stored effect data failed authentication' });
    expect(got.has(`${b}:send-receipt`)).toBe(false);
    expect(got.get(`${a}:send-receipt`)).toEqual({ ...DATA, event: 'evt_sealed_a' });
    expect(got.get(`${c}:send-receipt`)).toEqual({ to: 'plain@example.com' });
  });

  it('keys list counts effects per key; keys reseal seals them under the new key (plain ones too); a server with only the new key runs them', async () => {
    mailUp = false;
    app = await start({ current: 'k1', keys: { k1: PAYLOAD_KEY } });
    const [a, b] = await accept(app, ['evt_rot_a', 'evt_rot_b']);
    await setStoredData(db, b!, JSON.stringify({ to: 'plain@example.com' }));
    await app.close();
    app = undefined;

    const rotated = join(dir, 'rotated.yaml');
    writeFileSync(rotated, stringify(configDoc(db.url, { payloadKeys: { current: 'k2', keys: { k1: PAYLOAD_KEY, k2: K2 } } })));
    const list = await runCli(['keys', 'list', '--config', rotated], 60_000);
    expect(list.code, list.err).toBe(0);
    const lines = list.out.trimEnd().split('\n');
    expect(lines[0]!.split(/\s+/)).toEqual(['key_id', 'payloads', 'effects', 'state']);
    expect(lines[1]!.split(/\s+/).slice(0, 3)).toEqual(['k1', '2', '1']);
    expect(lines[1]).toContain('old: run "keys reseal" before removing it');
    expect(lines[2]!.split(/\s+/).slice(0, 4)).toEqual(['k2', '0', '0', 'current']);
    expect(list.out).toContain('1 effect(s) hold data stored plain, before effect data was sealed: "keys reseal" seals them');

    const reseal = await runCli(['keys', 'reseal', '--config', rotated, '--busy', '100'], 60_000);
    expect(reseal.code, reseal.err).toBe(0);
    expect(reseal.err).toContain('resealed 2 payload(s) and 2 effect(s) under "k2"');
    for (const [, data] of await storedData(db)) {
      expect(data.startsWith(`sealed:${b64url('k2')}.`), data).toBe(true);
      expect(data).not.toContain('plain@example.com');
    }
    const after = await runCli(['keys', 'list', '--config', rotated], 60_000);
    expect(after.out.trimEnd().split('\n')[1]!.split(/\s+/).slice(0, 3)).toEqual(['k1', '0', '0']);
    expect(after.out).toContain('old, seals nothing: can be removed');
    expect(after.out).not.toContain('stored plain');

    mailUp = true;
    app = await start({ current: 'k2', keys: { k2: K2 } });
    await waitFor(async () => (await statusOf(app!, a!)).status === 'DONE' && (await statusOf(app!, b!)).status === 'DONE', 10_000, 'both effects DONE');
    expect(got.get(`${a}:send-receipt`)).toEqual({ ...DATA, event: 'evt_rot_a' });
    expect(got.get(`${b}:send-receipt`)).toEqual({ to: 'plain@example.com' });
  });

  it('keys reseal with a wrong value for the older key: the effects under it are left and named with that key, the value given as a possible cause', async () => {
    mailUp = false;
    app = await start({ current: 'k1', keys: { k1: PAYLOAD_KEY } });
    await accept(app, ['evt_wrong_a', 'evt_wrong_b']);
    await app.close();
    app = undefined;
    const before = await storedData(db);
    const wrong = join(dir, 'wrong-old-key.yaml');
    writeFileSync(wrong, stringify(configDoc(db.url, { payloadKeys: { current: 'k2', keys: { k1: Buffer.alloc(32, 9).toString('base64'), k2: K2 } } })));
    const r = await runCli(['keys', 'reseal', '--config', wrong, '--busy', '100'], 60_000);
    expect(r.code, r.err).toBe(1);
    expect(r.err).toContain('left 2 effect(s) under "k1" whose data does not authenticate (none under "k1" opened this run: its value in payloadKeys.keys may not be the one that sealed them, or the rows were altered or moved)');
    expect(r.err).toContain('left 2 payload(s) under "k1" that do not authenticate (none under "k1" opened this run');
    expect(await storedData(db)).toEqual(before);
  });

  it('a handler whose effect cannot be sealed (payload keys gone mid-run) fails with its writes undone, even when it catches the error; the event runs again once the key is back', async () => {
    const keyFile = join(dir, 'k1.key');
    writeFileSync(keyFile, PAYLOAD_KEY);
    const store = openStore(db.url);
    await store.migrate();
    await store.transaction((tx) => tx.query('CREATE TABLE ledger (event_id TEXT PRIMARY KEY)'));
    await store.close();
    let pullKey = true;
    const caught: unknown[] = [];
    const registry = new HandlerRegistry()
      .on('payment_intent.succeeded', async (event, ctx) => {
        await ctx.tx.query(ctx.tx.kind === 'postgres' ? 'INSERT INTO ledger (event_id) VALUES ($1)' : 'INSERT INTO ledger (event_id) VALUES (?)', [event.providerEventId]);
        if (pullKey) {
          pullKey = false;
          rmSync(keyFile);
          await app!.reloadSecrets();
        }
        try {
          ctx.effect('send-receipt', DATA);
        } catch (err) {
          caught.push(err); // a handler that swallows it must not commit its write without the effect
        }
      })
      .effect('send-receipt', (data, { idempotencyKey }) => void got.set(idempotencyKey, data));
    app = await startApp(parseConfig(configDoc(db.url, { ...FAST_WORKERS, retry: { baseMs: 10, capMs: 40, maxAttempts: 3 }, payloadKeys: { current: 'k1', keys: { k1: `\${file:${keyFile}}` } } }), {}),
      { logger: pino({ level: 'silent' }), handlers: registry, workers: true, shutdownGraceMs: 500, secretCheckMs: 0 });
    const body = stripeEvent('evt_key_gone');
    const r = await post(`${app.url}/webhooks/stripe`, body, stripeHeaders(body));
    expect(r.status).toBe(200);
    const inboxId = r.json().inbox_id as string;
    await waitFor(() => caught.length === 1, 10_000, 'the seal refused');
    await waitFor(async () => (await app!.store.getEvent(inboxId))!.lastError !== null, 10_000, 'the attempt settled');
    const waiting = (await app.store.getEvent(inboxId))!;
    expect(waiting).toMatchObject({ status: 'PENDING', attemptCount: 0 });
    expect(waiting.lastError).toContain('payload keys are not loaded');
    expect(await app.store.listEffects(inboxId)).toEqual([]);
    const ledger = async () => (await app!.store.transaction((tx) => tx.query<{ event_id: string }>('SELECT event_id FROM ledger'))).map((x) => x.event_id);
    expect(await ledger()).toEqual([]);

    writeFileSync(keyFile, PAYLOAD_KEY);
    await app.reloadSecrets();
    await waitFor(async () => (await app!.store.getEvent(inboxId))!.status === 'PROCESSED' && got.size === 1, 10_000, 'processed once the key is back');
    expect(await ledger()).toEqual(['evt_key_gone']);
    expect(got.get(`${inboxId}:send-receipt`)).toEqual(DATA);
    expect(caught).toHaveLength(1);
  });

  it('an effect sealed under an old key that is configured but not loaded yet (a late mount) waits for it without spending its attempts, then runs', async () => {
    mailUp = false;
    app = await start({ current: 'k1', keys: { k1: PAYLOAD_KEY } });
    const [a] = await accept(app, ['evt_late_old_key']);
    await app.close();
    app = undefined;
    const before = await withStore(db, async (store) => (await store.listEffects(a!))[0]!);
    expect(before.status).toBe('PENDING');
    // Rotated: k2 seals, k1 still opens what it sealed, but its secret file is not there yet.
    const keyFile = join(dir, 'k1.key');
    mailUp = true;
    const doc = configDoc(db.url, { ...FAST_WORKERS, retry: { baseMs: 10, capMs: 40, maxAttempts: 3 }, payloadKeys: { current: 'k2', keys: { k1: `\${file:${keyFile}}`, k2: K2 } } });
    app = await startApp(parseConfig(doc, {}), { logger: pino({ level: 'silent' }), handlers: handlers(), workers: true, shutdownGraceMs: 500, secretCheckMs: 100 });
    expect(app.keyring.problems).toEqual([expect.stringMatching(/^payloadKeys\.keys\.k1: cannot read/)]);
    // Many retry intervals (10-40 ms) and claim polls (50 ms) go by: the payloads' rule is that such an event waits.
    await new Promise((r) => setTimeout(r, 1000));
    // Read between two claims (a claimed one is PROCESSING, its attempt counted until it is given back).
    let seen = await statusOf(app, a!);
    await waitFor(async () => (seen = await statusOf(app!, a!)).status !== 'PROCESSING', 5000, 'not mid-claim');
    expect(seen).toMatchObject({ status: 'PENDING', attemptCount: before.attemptCount });
    expect(got.size).toBe(0);
    writeFileSync(keyFile, `${PAYLOAD_KEY}\n`);
    await waitFor(async () => (await statusOf(app!, a!)).status === 'DONE', 30_000, 'effect DONE once k1 loads');
    expect(got.get(`${a}:send-receipt`)).toEqual({ ...DATA, event: 'evt_late_old_key' });
  });

  it('keys reseal refuses a config whose current key has the servers\' id but another value, told by the effects recorded under it (the payloads still under the old key)', async () => {
    // A backlog at the switch: accepted under k1, processed once k2 is current, so the only thing
    // sealed under k2 yet is the effect; its payload is still under k1.
    app = await startApp(parseConfig(configDoc(db.url, { payloadKeys: { current: 'k1', keys: { k1: PAYLOAD_KEY } } }), {}), { logger: pino({ level: 'silent' }), handlers: handlers(), workers: false });
    const body = stripeEvent('evt_backlog_at_switch');
    const inboxId = (await post(`${app.url}/webhooks/stripe`, body, stripeHeaders(body))).json().inbox_id as string;
    await app.close();
    mailUp = false;
    app = await start({ current: 'k2', keys: { k1: PAYLOAD_KEY, k2: K2 } });
    await waitFor(async () => (await app!.store.listEffects(inboxId)).length === 1, 10_000, 'effect recorded');
    await app.close();
    app = undefined;
    const before = await storedData(db);
    expect(before.get(inboxId)!.startsWith(`sealed:${b64url('k2')}.`)).toBe(true);

    // The operator's config: k2 with another value (a stale secret file).
    const wrong = join(dir, 'wrong-k2.yaml');
    writeFileSync(wrong, stringify(configDoc(db.url, { payloadKeys: { current: 'k2', keys: { k1: PAYLOAD_KEY, k2: Buffer.alloc(32, 9).toString('base64') } } })));
    const r = await runCli(['keys', 'reseal', '--config', wrong, '--busy', '100'], 60_000);
    expect(r.code, r.err).toBe(1);
    expect(r.err).toContain('nothing resealed');
    // Nothing moved: the payload still opens under k1 for the servers.
    const list = await runCli(['keys', 'list', '--config', wrong], 60_000);
    expect(list.out.trimEnd().split('\n')[1]!.split(/\s+/).slice(0, 3)).toEqual(['k1', '1', '0']);
    expect(await storedData(db)).toEqual(before);
  });

  it('keys reseal reads effects at most 50 a page, even unpaced (--busy 100), since nothing bounds an effect\'s data', async () => {
    mailUp = false;
    app = await start({ current: 'k1', keys: { k1: PAYLOAD_KEY } });
    const inboxIds = await accept(app, Array.from({ length: 60 }, (_, i) => `evt_page_${i}`));
    await app.close();
    app = undefined;
    const store = openStore(db.url);
    try {
      const limits: number[] = [];
      const counting = new Proxy(store, {
        get(target, name, receiver) {
          if (name === 'effectsToReseal') return (prefix: string, after: string | null, limit: number) => (limits.push(limit), target.effectsToReseal(prefix, after, limit));
          const v = Reflect.get(target, name, receiver) as unknown;
          return typeof v === 'function' ? v.bind(target) : v;
        },
      });
      const cipher = new PayloadCipher(new Map([['k1', Buffer.from(PAYLOAD_KEY, 'base64')], ['k2', Buffer.from(K2, 'base64')]]), 'k2');
      const tally = await resealAll(counting, cipher, { busyPercent: 100 });
      expect(tally.resealedEffects).toBe(inboxIds.length);
      expect(limits.length, 'more than one page').toBeGreaterThan(1);
      expect(Math.max(...limits)).toBe(50);
    } finally {
      await store.close();
    }
  });

  it('an effect sealed under a key the config lacks: keys reseal leaves it, names it, and exits 1', async () => {
    mailUp = false;
    app = await start({ current: 'k0', keys: { k0: K2 } });
    const [a] = await accept(app, ['evt_lost_key']);
    await app.close();
    app = undefined;
    // The payload goes too: with k0 gone it could not be resealed either; the effect's line is what this test reads.
    const config = join(dir, 'without-k0.yaml');
    writeFileSync(config, stringify(configDoc(db.url, { payloadKeys: { current: 'k1', keys: { k1: PAYLOAD_KEY } } })));
    const r = await runCli(['keys', 'reseal', '--config', config, '--busy', '100'], 60_000);
    expect(r.code, r.err).toBe(1);
    expect(r.err).toContain('left 1 effect(s) sealed under "k0", which is not configured or not readable');
    expect((await storedData(db)).get(a!)!.startsWith(`sealed:${b64url('k0')}.`)).toBe(true);
  });
});
