import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pino from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { stringify } from 'yaml';
import { startApp } from '../../src/app.js';
import { parseConfig } from '../../src/config/schema.js';
import { resealAll } from '../../src/cli/keys.js';
import { uuidv7 } from '../../src/crypto/ids.js';
import { PayloadCipher, sha256 } from '../../src/crypto/payload-cipher.js';
import { HandlerRegistry } from '../../src/engine/handlers.js';
import { openStore } from '../../src/store/open.js';
import type { InboxStore } from '../../src/store/port.js';
import { configDoc, PAYLOAD_KEY } from '../helpers/app.js';
import { FAST_WORKERS, waitFor } from '../helpers/engine.js';
import { largeEvent, stripeEvent, stripeHeaders } from '../helpers/events.js';
import { post } from '../helpers/http.js';
import { record } from '../helpers/records.js';
import { runCli } from '../helpers/server-process.js';
import { describeEachStore, freshDatabase, type TestDatabase } from '../helpers/stores.js';

/**
 * Payload key rotation from an operator's side: events accepted over HTTP under an old key, the
 * config moved to a new current key, `keys list` and `keys reseal` run as shipped (dist/), and
 * then a server that holds ONLY the new key processes the resealed events with the exact bytes
 * that were signed.
 */

const K0 = Buffer.alloc(32, 1).toString('base64');
const K2 = Buffer.alloc(32, 2).toString('base64');
/** The new key alone (what a server holds once the old key is removed), and old + new with the new one current. */
const onlyK2 = new PayloadCipher(new Map([['k2', Buffer.from(K2, 'base64')]]), 'k2');
const rotatedCipher = new PayloadCipher(new Map([['k1', Buffer.from(PAYLOAD_KEY, 'base64')], ['k2', Buffer.from(K2, 'base64')]]), 'k2');

const cli = (args: string[]) => runCli(args, 60_000);

/** `keys list` as { key id: [payloads, state] } (these events record no effects: that column is 0). */
function usageTable(out: string): Record<string, [number, string]> {
  const [header, ...rows] = out.trimEnd().split('\n');
  expect(header!.split(/\s+/)).toEqual(['key_id', 'payloads', 'effects', 'state']);
  return Object.fromEntries(rows.map((l) => {
    const [id, n, effects, ...state] = l.split(/\s+/);
    expect(effects, l).toBe('0');
    return [id!, [Number(n), state.join(' ')]];
  }));
}

/** The share of its run `keys reseal` reports having worked, in percent ("… in 1.2 s, busy 20 % of it"). */
function busyShare(err: string): number {
  const m = /in [\d.]+ s, busy (-?\d+) % of it/.exec(err);
  expect(m, err).not.toBeNull();
  return Number(m![1]);
}

/** Accepts `events` over HTTP with a server on `url` that seals under `payloadKeys.current`; returns event id → inbox id. */
async function acceptWith(url: string, payloadKeys: Record<string, unknown>, events: [string, Buffer][]): Promise<Map<string, string>> {
  const app = await startApp(parseConfig(configDoc(url, { payloadKeys }), {}), { logger: pino({ level: 'silent' }), workers: false });
  const ids = new Map<string, string>();
  try {
    for (const [eventId, body] of events) {
      const r = await post(`${app.url}/webhooks/stripe`, body, stripeHeaders(body));
      expect(r.status, r.text).toBe(200);
      ids.set(eventId, r.json().inbox_id);
    }
  } finally {
    await app.close();
  }
  return ids;
}

/** Events accepted with acceptWith into one database: the bodies sent, their inbox ids, their stored payloads. */
class Accepted {
  /** event id → the exact body sent */
  readonly sent = new Map<string, Buffer>();
  /** event id → inbox id */
  readonly ids = new Map<string, string>();

  constructor(private readonly url: () => string, private readonly store: () => InboxStore) {}

  async accept(payloadKeys: Record<string, unknown>, events: [string, Buffer][]): Promise<void> {
    for (const [eventId, inboxId] of await acceptWith(this.url(), payloadKeys, events)) this.ids.set(eventId, inboxId);
    for (const [eventId, body] of events) this.sent.set(eventId, body);
  }

  readonly payloadOf = async (eventId: string) => (await this.store().getPayload((await this.store().getInbox(this.ids.get(eventId)!))!.rawPayloadRef!))!;
}

describe('keys --help', () => {
  it('prints both subcommands and exits 0; an unknown subcommand is a usage error', async () => {
    const r = await cli(['keys', '--help']);
    expect(r.code).toBe(0);
    expect(r.out).toContain('Usage: webhook-inbox keys list --config FILE');
    expect(r.out).toContain('webhook-inbox keys reseal --config FILE');
    const bad = await cli(['keys', 'rotate', '--config', 'x.yaml']);
    expect(bad.code).toBe(2);
    expect(bad.err).toContain('unknown keys subcommand "rotate" (list or reseal)');
  });
});

describeEachStore('payload key rotation: keys list, keys reseal', (kind) => {
  let db: TestDatabase | undefined;
  let dir: string;
  let rotated: string;
  let store: InboxStore;
  const accepted = new Accepted(() => db!.url, () => store);
  const { sent, ids, payloadOf } = accepted;
  const accept = (payloadKeys: Record<string, unknown>, events: [string, Buffer][]) => accepted.accept(payloadKeys, events);
  let tampered: string;

  beforeAll(async () => {
    db = await freshDatabase(kind);
    dir = mkdtempSync(join(tmpdir(), 'wi-keys-cli-'));
    // k0 seals one event and is then dropped from the config: its payload cannot be resealed.
    await accept({ current: 'k0', keys: { k0: K0 } }, [['evt_k0', stripeEvent('evt_k0')]]);
    // k1 (the old key) seals four, one of them large enough to be stored compressed.
    await accept({ current: 'k1', keys: { k1: PAYLOAD_KEY } }, [
      ['evt_a', stripeEvent('evt_a', { size: 3000 })], ['evt_b', stripeEvent('evt_b')], ['evt_c', stripeEvent('evt_c')], ['evt_large', largeEvent('evt_large')],
    ]);
    // The rotation: k2 is current, k1 stays to open what it sealed.
    const doc = configDoc(db.url, { payloadKeys: { current: 'k2', keys: { k1: PAYLOAD_KEY, k2: K2 } } });
    await accept(doc.payloadKeys as Record<string, unknown>, [['evt_new', stripeEvent('evt_new')]]);
    rotated = join(dir, 'rotated.yaml');
    writeFileSync(rotated, stringify(doc));
    store = openStore(db.url);
    // evt_c's row gets evt_b's nonce: it no longer authenticates, and must be left as it is.
    tampered = (await payloadOf('evt_c')).payloadId;
    const from = (await payloadOf('evt_b')).payloadId;
    await store.transaction((tx) => tx.query(`UPDATE webhook_payload SET nonce = (SELECT nonce FROM webhook_payload WHERE payload_id = '${from}') WHERE payload_id = '${tampered}'`));
    expect(await payloadOf('evt_large')).toMatchObject({ keyId: 'k1', encoding: 'br' });
  });

  afterAll(async () => {
    await store?.close();
    await db?.cleanup();
    rmSync(dir, { recursive: true, force: true });
  });

  it('keys list: payloads per key id, and which key is current, old or missing', async () => {
    const r = await cli(['keys', 'list', '--config', rotated]);
    expect(r.code, r.err).toBe(0);
    expect(usageTable(r.out)).toEqual({
      k0: [1, 'NOT CONFIGURED: what it sealed cannot be opened'],
      k1: [4, 'old: run "keys reseal" before removing it'],
      k2: [1, 'current'],
    });
  });

  it('keys reseal: every payload it can open moves to the current key; the rest are named and it exits 1', async () => {
    const before = new Map(await Promise.all([...ids.keys()].map(async (e) => [e, await payloadOf(e)] as const)));
    const r = await cli(['keys', 'reseal', '--config', rotated]);
    expect(r.code, r.out + r.err).toBe(1);
    expect(r.err).toContain('resealed 3 payload(s) and 0 effect(s) under "k2"');
    expect(busyShare(r.err)).toBeLessThanOrEqual(25); // paced by default: it runs beside a live server
    expect(r.err).toContain('left 1 payload(s) sealed under "k0", which is not configured or not readable');
    expect(r.err).toContain(`left 1 payload(s) under "k1" that do not authenticate (altered or moved rows: others under "k1" opened): ${tampered}`);
    expect(r.err).not.toContain('other payload(s)'); // what it named is all that is left
    expect(usageTable(r.out)).toEqual({
      k0: [1, 'NOT CONFIGURED: what it sealed cannot be opened'],
      k1: [1, 'old: run "keys reseal" before removing it'],
      k2: [4, 'current'],
    });

    // Opened with the new key alone: the exact bytes, under a fresh nonce; the row's hash holds.
    for (const e of ['evt_a', 'evt_b', 'evt_large']) {
      const row = (await store.getInbox(ids.get(e)!))!;
      const now = await payloadOf(e);
      expect(now.keyId, e).toBe('k2');
      expect(now.nonce.equals(before.get(e)!.nonce), e).toBe(false);
      expect(onlyK2.open(now, row).equals(sent.get(e)!), e).toBe(true);
      expect(row.payloadHash.equals(sha256(sent.get(e)!)), e).toBe(true);
    }
    // The large one stays compressed: resealing never unpacks it.
    expect(await payloadOf('evt_large')).toMatchObject({ encoding: 'br', rawBytes: sent.get('evt_large')!.length });
    expect((await payloadOf('evt_large')).ciphertext.length).toBe(before.get('evt_large')!.ciphertext.length);
    // What it could not reseal is exactly as it was.
    for (const e of ['evt_k0', 'evt_c', 'evt_new']) expect(await payloadOf(e), e).toEqual(before.get(e));
  });

  it('keys reseal again: nothing more to do, the same two named', async () => {
    const r = await cli(['keys', 'reseal', '--config', rotated]);
    expect(r.code).toBe(1);
    expect(r.err).toContain('resealed 0 payload(s) and 0 effect(s) under "k2"');
    // Nothing under k1 opened this run, so its configured value is not proven right: both causes are named.
    expect(r.err).toContain(`left 1 payload(s) under "k1" that do not authenticate (none under "k1" opened this run: its value in payloadKeys.keys may not be the one that sealed them, or the rows were altered or moved): ${tampered}`);
  });

  it('keys reseal with a wrong value for the OLDER key: every payload under it is left, and the message names the key value as a cause, not only altered rows', async () => {
    await accept({ current: 'k1', keys: { k1: PAYLOAD_KEY } }, [['evt_w1', stripeEvent('evt_w1')], ['evt_w2', stripeEvent('evt_w2')]]);
    const wrong = join(dir, 'wrong-old-key.yaml');
    writeFileSync(wrong, stringify(configDoc(db!.url, { payloadKeys: { current: 'k2', keys: { k1: K0, k2: K2 } } })));
    const before = await Promise.all(['evt_w1', 'evt_w2'].map((e) => payloadOf(e)));
    const r = await cli(['keys', 'reseal', '--config', wrong]);
    expect(r.code, r.out + r.err).toBe(1);
    expect(r.err).toMatch(/left 3 payload\(s\) under "k1" that do not authenticate \(none under "k1" opened this run: its value in payloadKeys\.keys may not be the one that sealed them/);
    expect(r.err).not.toContain('others under "k1" opened');
    expect(await Promise.all(['evt_w1', 'evt_w2'].map((e) => payloadOf(e)))).toEqual(before);
    // With the right value they reseal; the altered one stays.
    const right = await cli(['keys', 'reseal', '--config', rotated]);
    expect(right.err).toContain('resealed 2 payload(s)');
    expect(right.err).toContain(`left 1 payload(s) under "k1" that do not authenticate (altered or moved rows: others under "k1" opened): ${tampered}`);
  });

  it('a row changed since it was read is left alone (the swap is guarded by the nonce read)', async () => {
    const p = await payloadOf('evt_a');
    const row = (await store.getInbox(ids.get('evt_a')!))!;
    const stale = { payloadId: p.payloadId, oldNonce: Buffer.alloc(12, 9), sealed: onlyK2.reseal(p, row) };
    expect(await store.resealPayloads([stale])).toBe(0);
    expect(await payloadOf('evt_a')).toEqual(p);
    expect(await store.resealPayloads([{ ...stale, oldNonce: p.nonce }])).toBe(1);
    expect(onlyK2.open(await payloadOf('evt_a'), row).equals(sent.get('evt_a')!)).toBe(true);
  });

  it('--per-second paces it: 3 payloads at 2 a second take about 1.5 s, not less; a bad value is a usage error', async () => {
    await accept({ current: 'k1', keys: { k1: PAYLOAD_KEY } }, [['evt_p1', stripeEvent('evt_p1')], ['evt_p2', stripeEvent('evt_p2')], ['evt_p3', stripeEvent('evt_p3')]]);
    const t0 = performance.now();
    const tally = await resealAll(store, rotatedCipher, { perSecond: 2 });
    expect(performance.now() - t0).toBeGreaterThanOrEqual(1400);
    expect(tally.resealed).toBe(3);
    for (const e of ['evt_p1', 'evt_p2', 'evt_p3']) expect((await payloadOf(e)).keyId, e).toBe('k2');
    const bad = await cli(['keys', 'reseal', '--config', rotated, '--per-second', '0']);
    expect(bad.code).toBe(2);
    expect(bad.err).toContain('--per-second must be a positive integer');
  });

  it('--busy paces by the time worked: at 20 % it waits four times as long as each slice took; bad values are usage errors', async () => {
    const events = Array.from({ length: 120 }, (_, i) => [`evt_b${i}`, stripeEvent(`evt_b${i}`)] as [string, Buffer]);
    await accept({ current: 'k1', keys: { k1: PAYLOAD_KEY } }, events);
    const t0 = performance.now();
    const r = await cli(['keys', 'reseal', '--config', rotated, '--busy', '20']);
    const wall = performance.now() - t0;
    expect(r.err).toContain('resealed 120 payload(s) and 0 effect(s) under "k2"');
    // At most 20 % of its run worked, and more than none: waits counted but not slept would
    // exceed the run they are part of and make the share negative.
    const share = busyShare(r.err);
    expect(share).toBeLessThanOrEqual(20);
    expect(share).toBeGreaterThan(0);
    // The run it reports, waits included, happened within the CLI's own wall time.
    const [, seconds] = /in ([\d.]+) s,/.exec(r.err)!;
    expect(Number(seconds) * 1000).toBeLessThanOrEqual(wall);
    for (const [e] of events) expect((await payloadOf(e)).keyId, e).toBe('k2');
    for (const bad of ['0', '101', 'x']) {
      const u = await cli(['keys', 'reseal', '--config', rotated, '--busy', bad]);
      expect(u.code, bad).toBe(2);
      expect(u.err).toContain('--busy must be an integer percentage from 1 to 100');
    }
  });

  it('a slice whose payloads were all purged after the listing is skipped, not the rest of its page', async () => {
    await accept({ current: 'k1', keys: { k1: PAYLOAD_KEY } }, [['evt_q1', stripeEvent('evt_q1')], ['evt_q2', stripeEvent('evt_q2')], ['evt_q3', stripeEvent('evt_q3')]]);
    const purged = (await payloadOf('evt_q1')).payloadId;
    // The store as resealAll sees it, with evt_q1's payload purged between the listing and the read.
    const racing = {
      payloadsToReseal: async (...a: Parameters<InboxStore['payloadsToReseal']>) => {
        const page = await store.payloadsToReseal(...a);
        await store.transaction((tx) => tx.query(`DELETE FROM webhook_payload WHERE payload_id = '${purged}'`));
        return page;
      },
      readPayloads: (...a: Parameters<InboxStore['readPayloads']>) => store.readPayloads(...a),
      resealPayloads: (...a: Parameters<InboxStore['resealPayloads']>) => store.resealPayloads(...a),
      effectsToReseal: (...a: Parameters<InboxStore['effectsToReseal']>) => store.effectsToReseal(...a),
      resealEffects: (...a: Parameters<InboxStore['resealEffects']>) => store.resealEffects(...a),
    } as InboxStore;
    // 20 a second: slices of one payload, so the first slice is exactly the purged one.
    const tally = await resealAll(racing, rotatedCipher, { perSecond: 20 });
    expect(tally.resealed).toBe(2);
    for (const e of ['evt_q2', 'evt_q3']) expect((await payloadOf(e)).keyId, e).toBe('k2');
    sent.delete('evt_q1');
  });

  it('after the rotation a server holding only the new key processes the resealed events with their exact bytes', async () => {
    const seen = new Map<string, Buffer>();
    const handlers = new HandlerRegistry().on('payment_intent.succeeded', (event) => {
      seen.set(event.providerEventId, event.raw);
    });
    const config = parseConfig(configDoc(db!.url, { ...FAST_WORKERS, payloadKeys: { current: 'k2', keys: { k2: K2 } } }), {});
    const app = await startApp(config, { logger: pino({ level: 'silent' }), workers: true, handlers });
    try {
      const resealed = ['evt_a', 'evt_b', 'evt_large', 'evt_new', 'evt_p1', 'evt_p2', 'evt_p3', 'evt_q2', 'evt_q3'];
      await waitFor(() => resealed.every((e) => seen.has(e)), 15_000, 'resealed events handled');
      for (const e of resealed) expect(seen.get(e)!.equals(sent.get(e)!), e).toBe(true);
    } finally {
      await app.close();
    }
  });
});

describeEachStore('keys reseal with a current key whose value is not the servers\'', (kind) => {
  let db: TestDatabase | undefined;
  let dir: string;
  let store: InboxStore;
  const accepted = new Accepted(() => db!.url, () => store);
  const { sent, ids, payloadOf } = accepted;
  const accept = (payloadKeys: Record<string, unknown>, eventIds: string[]) => accepted.accept(payloadKeys, eventIds.map((e) => [e, stripeEvent(e)]));
  /** The servers' k2, and a config that names k2 with another value (a stale or mistyped secret). */
  const serversKeys = { current: 'k2', keys: { k1: PAYLOAD_KEY, k2: K2 } };
  const wrongK2 = Buffer.alloc(32, 3).toString('base64');


  beforeAll(async () => {
    db = await freshDatabase(kind);
    dir = mkdtempSync(join(tmpdir(), 'wi-keys-wrong-'));
    await accept({ current: 'k1', keys: { k1: PAYLOAD_KEY } }, ['evt_old1', 'evt_old2']);
    await accept(serversKeys, ['evt_new1']); // the servers now seal under their k2
    store = openStore(db.url);
  });

  afterAll(async () => {
    await store?.close();
    await db?.cleanup();
    rmSync(dir, { recursive: true, force: true });
  });

  it('refuses (exit 1, nothing changed) rather than reseal into payloads no server can open', async () => {
    const wrong = join(dir, 'wrong.yaml');
    writeFileSync(wrong, stringify(configDoc(db!.url, { payloadKeys: { current: 'k2', keys: { k1: PAYLOAD_KEY, k2: wrongK2 } } })));
    const before = await Promise.all(['evt_old1', 'evt_old2', 'evt_new1'].map(payloadOf));
    const r = await cli(['keys', 'reseal', '--config', wrong, '--busy', '100']);
    expect(r.code, r.err).toBe(1);
    expect(r.err).toContain('the current payload key "k2" in this config does not open the 1 recent payload(s) stored under "k2"');
    expect(r.err).toContain('nothing resealed');
    expect(await Promise.all(['evt_old1', 'evt_old2', 'evt_new1'].map(payloadOf))).toEqual(before);

    // With the servers' own config it goes ahead, and the servers' key opens every payload.
    const right = join(dir, 'right.yaml');
    writeFileSync(right, stringify(configDoc(db!.url, { payloadKeys: serversKeys })));
    const ok = await cli(['keys', 'reseal', '--config', right, '--busy', '100']);
    expect(ok.code, ok.err).toBe(0);
    expect(ok.err).toContain('resealed 2 payload(s) and 0 effect(s) under "k2"');
    for (const e of ['evt_old1', 'evt_old2', 'evt_new1']) {
      expect(onlyK2.open(await payloadOf(e), (await store.getInbox(ids.get(e)!))!).equals(sent.get(e)!), e).toBe(true);
    }
  });
});

describeEachStore('keys reseal with payloads stored under the old key while it runs', (kind) => {
  let db: TestDatabase | undefined;
  let dir: string;
  let store: InboxStore;
  const accepted = new Accepted(() => db!.url, () => store);
  const k1 = new PayloadCipher(new Map([['k1', Buffer.from(PAYLOAD_KEY, 'base64')]]), 'k1');

  beforeAll(async () => {
    db = await freshDatabase(kind);
    dir = mkdtempSync(join(tmpdir(), 'wi-keys-late-'));
    await accepted.accept({ current: 'k1', keys: { k1: PAYLOAD_KEY } }, Array.from({ length: 6 }, (_, i) => [`evt_${i}`, stripeEvent(`evt_${i}`)] as [string, Buffer]));
    store = openStore(db.url);
  });

  afterAll(async () => {
    await store?.close();
    await db?.cleanup();
    rmSync(dir, { recursive: true, force: true });
  });

  it('exits 1 and names them, rather than 0 with payloads the old key alone still opens', async () => {
    const rotated = join(dir, 'rotated.yaml');
    writeFileSync(rotated, stringify(configDoc(db!.url, { payloadKeys: { current: 'k2', keys: { k1: PAYLOAD_KEY, k2: K2 } } })));
    const run = cli(['keys', 'reseal', '--config', rotated, '--per-second', '2']);
    const usage = async () => Object.fromEntries((await store.payloadKeyUsage()).map((u) => [u.keyId, u.payloads]));
    await waitFor(async () => ((await usage()).k2 ?? 0) > 0, 15_000, 'the first slice resealed');
    // A process still sealing under k1 (its clock a little behind: the payload id sorts before
    // the run's cursor) stores an event now.
    const raw = stripeEvent('evt_late');
    const binding = { provider: 'stripe', endpointId: 'stripe', providerEventId: 'evt_late' };
    await store.acceptBatch([record('evt_late', raw.toString(), { ...binding, payloadId: uuidv7(Date.now() - 60_000), payload: k1.seal(raw, binding) })]);
    const r = await run;
    expect(r.code, r.err).toBe(1);
    expect(r.err).toContain('resealed 6 payload(s) and 0 effect(s) under "k2"');
    expect(r.err).toContain('left 1 other payload(s) under "k1"');
    expect(usageTable(r.out).k1).toEqual([1, 'old: run "keys reseal" before removing it']);
    // Run again: it is resealed, and now the old key seals nothing.
    const again = await cli(['keys', 'reseal', '--config', rotated, '--busy', '100']);
    expect(again.code, again.err).toBe(0);
    expect(again.err).toContain('resealed 1 payload(s) and 0 effect(s) under "k2"');
    expect(await usage()).toEqual({ k2: 7 });
  });
});

/**
 * The check that a config's key values are the servers' looked at the newest 50 events only. A
 * server not yet restarted onto the new current key (k2) goes on sealing under k1: once 50 events
 * were stored so after the first one under k2, the check found nothing under k2 to try the
 * config's value on, and a config with a wrong k2 resealed every k1 payload into ones no server
 * can open (exit 0). Now the current key's value is tried on the newest rows stored under its id.
 */
describeEachStore('keys reseal when the newest events are all under an older key', (kind) => {
  let db: TestDatabase | undefined;
  let dir: string;
  let store: InboxStore;
  const accepted = new Accepted(() => db!.url, () => store);
  const { payloadOf } = accepted;
  const late = Array.from({ length: 51 }, (_, i) => `evt_late_${i}`);
  const wrong = Buffer.alloc(32, 3).toString('base64');

  beforeAll(async () => {
    db = await freshDatabase(kind);
    dir = mkdtempSync(join(tmpdir(), 'wi-keys-probe-'));
    await accepted.accept({ current: 'k2', keys: { k1: PAYLOAD_KEY, k2: K2 } }, [['evt_new1', stripeEvent('evt_new1')]]); // restarted onto k2
    await accepted.accept({ current: 'k1', keys: { k1: PAYLOAD_KEY } }, late.map((e) => [e, stripeEvent(e)] as [string, Buffer])); // not yet
    store = openStore(db.url);
  });

  afterAll(async () => {
    await store?.close();
    await db?.cleanup();
    rmSync(dir, { recursive: true, force: true });
  });

  it('a current key with another value than the servers\': refused (exit 1), nothing changed', async () => {
    const file = join(dir, 'wrong.yaml');
    writeFileSync(file, stringify(configDoc(db!.url, { payloadKeys: { current: 'k2', keys: { k1: PAYLOAD_KEY, k2: wrong } } })));
    const events = ['evt_new1', late[0]!, late[50]!];
    const before = await Promise.all(events.map(payloadOf));
    const r = await cli(['keys', 'reseal', '--config', file, '--busy', '100']);
    expect(r.code, r.err).toBe(1);
    expect(r.err).toContain('the current payload key "k2" in this config does not open the 1 recent payload(s) stored under "k2"');
    expect(r.err).toContain('nothing resealed');
    expect(await Promise.all(events.map(payloadOf))).toEqual(before);
  });
});
