import type { Config } from '../config/schema.js';
import { decodeBase64 } from '../crypto/hmac.js';
import { loadPayloadKeys, payloadCipherOf } from '../crypto/keyring.js';
import { PayloadKeyMissingError, type PayloadCipher } from '../crypto/payload-cipher.js';
import type { InboxStore } from '../store/port.js';
import type { Resealed, ResealedEffect, ResealRef } from '../store/work-port.js';
import { effectDataKeyId, openEffectData, resealEffectData, sealedEffectPrefix } from '../crypto/effect-data.js';
import { withStore } from './events.js';

/**
 * Payload key rotation. `payloadKeys.current` seals new payloads and effects' data; older keys
 * stay configured only to open what they sealed. `keys list` shows which keys still seal stored
 * payloads or effects; `keys reseal` seals those again under the current key (and effects stored
 * plain, before sealing began, for the first time), so an old key can then be removed.
 */

/**
 * Payloads per page of ids, and the most payload bytes (ciphertext + raw size, port.ts heldBytes)
 * held at once and swapped in by one transaction: ~200 bench events. On SQLite that transaction
 * holds the one writer, so a running server's accepts wait for it: it is kept short.
 */
const PAGE = 500;
const MAX_BYTES = 4 * 1024 * 1024;
/** Payload ids named in a report, at most. */
const SHOW_IDS = 20;

/**
 * A key id as printed. One that is itself a payload key (32 bytes of base64) is a key written
 * where its id goes (`keys: { <the key>: k2 }`): it is named by its length, never printed, as
 * the config paths name it (config/schema.ts).
 */
const isKeyText = (id: string): boolean => decodeBase64(id)?.length === 32;

function shownKeyId(id: string): string {
  return isKeyText(id) ? `(a ${id.length}-character key id)` : id;
}

/** A key id in a sentence: quoted, or named by its length (shownKeyId). */
function quotedKeyId(id: string): string {
  return isKeyText(id) ? shownKeyId(id) : `"${id}"`;
}

export function runKeysList(configFile: string): Promise<number> {
  return withStore(configFile, async (store, config) => {
    const problems: string[] = [];
    const keys = loadPayloadKeys(config, process.env, problems);
    printUsage(await usageOf(store), config, keys);
    for (const p of problems) console.error(`warning: ${p}`);
    return 0;
  });
}

/** What each key seals: payloads and effects, by key id; `plainEffects`: effects stored before sealing began. */
interface KeyUsage {
  readonly payloads: ReadonlyMap<string, number>;
  readonly effects: ReadonlyMap<string, number>;
  readonly plainEffects: number;
}

async function usageOf(store: InboxStore): Promise<KeyUsage> {
  const effects = new Map<string, number>();
  let plainEffects = 0;
  for (const u of await store.effectKeyUsage()) {
    if (u.sealedKeyId === null) plainEffects += u.effects;
    else {
      const id = Buffer.from(u.sealedKeyId, 'base64url').toString();
      effects.set(id, (effects.get(id) ?? 0) + u.effects);
    }
  }
  return { payloads: new Map((await store.payloadKeyUsage()).map((u) => [u.keyId, u.payloads])), effects, plainEffects };
}

function printUsage(usage: KeyUsage, config: Config, loaded: ReadonlyMap<string, Buffer>): void {
  const ids = [...new Set([...config.payloadKeys.keys.keys(), ...usage.payloads.keys(), ...usage.effects.keys()])].sort();
  const state = (id: string): string => {
    if (!config.payloadKeys.keys.has(id)) return 'NOT CONFIGURED: what it sealed cannot be opened';
    if (!loaded.has(id)) return 'configured but unreadable (see the warning)';
    if (id === config.payloadKeys.current) return 'current';
    return usage.payloads.get(id) || usage.effects.get(id) ? 'old: run "keys reseal" before removing it' : 'old, seals nothing: can be removed';
  };
  console.log(['key_id'.padEnd(16), 'payloads'.padStart(10), 'effects'.padStart(10), 'state'].join('  '));
  for (const id of ids) console.log([shownKeyId(id).padEnd(16), String(usage.payloads.get(id) ?? 0).padStart(10), String(usage.effects.get(id) ?? 0).padStart(10), state(id)].join('  '));
  if (usage.plainEffects > 0) console.log(`${usage.plainEffects} effect(s) hold data stored plain, before effect data was sealed: "keys reseal" seals them`);
}

interface ResealTally {
  resealed: number;
  /** Effects whose data was sealed again (or for the first time). */
  resealedEffects: number;
  /** key id → effects left as they are because that key is not configured. */
  effectsMissing: Map<string, number>;
  /** Effects whose data did not authenticate under its key and idempotency key. */
  effectsUnauthentic: { effectId: string; keyId: string | null }[];
  /** key id → payloads left as they are because that key is not configured. */
  missing: Map<string, number>;
  /** Payloads (and the key they are sealed under) that did not authenticate under their key and binding. */
  unauthentic: { payloadId: string; keyId: string }[];
  /** key id → payloads and effects under it that opened this run: tells a wrong key value from altered rows. */
  opened: Map<string, number>;
  /** Wall time of the whole run, and the part of it spent waiting to keep the pace. */
  elapsedMs: number;
  pausedMs: number;
}

export function runKeysReseal(configFile: string, opts: ResealOptions = {}): Promise<number> {
  return withStore(configFile, async (store, config) => {
    const problems: string[] = [];
    const keys = loadPayloadKeys(config, process.env, problems);
    for (const p of problems) console.error(`warning: ${p}`);
    const cipher = payloadCipherOf(config, keys);
    if (!cipher) {
      console.error(`the current payload key ${quotedKeyId(config.payloadKeys.current)} cannot be read: nothing resealed`);
      return 1;
    }
    const refusal = await currentKeyRefusal(store, cipher);
    if (refusal) {
      console.error(`${refusal}: nothing resealed`);
      return 1;
    }
    const tally = await resealAll(store, cipher, opts);
    const busyShare = tally.elapsedMs > 0 ? Math.round((100 * (tally.elapsedMs - tally.pausedMs)) / tally.elapsedMs) : 100;
    console.error(`resealed ${tally.resealed} payload(s) and ${tally.resealedEffects} effect(s) under ${quotedKeyId(cipher.currentKeyId)} in ${(tally.elapsedMs / 1000).toFixed(1)} s, busy ${busyShare} % of it`);
    for (const [id, n] of tally.missing) console.error(`left ${n} payload(s) sealed under ${quotedKeyId(id)}, which is not configured or not readable: add it to payloadKeys.keys and run again`);
    for (const [id, n] of tally.effectsMissing) console.error(`left ${n} effect(s) sealed under ${quotedKeyId(id)}, which is not configured or not readable: add it to payloadKeys.keys and run again`);
    for (const [keyId, left] of byKey(tally.unauthentic)) {
      console.error(`left ${left.length} payload(s) under ${quotedKeyId(keyId)} that do not authenticate (${whyUnauthentic(tally, keyId)}): ${shownIds(left.map((u) => u.payloadId))}`);
    }
    for (const [keyId, left] of byKey(tally.effectsUnauthentic)) {
      const under = keyId === null ? 'not in the sealed form' : `under ${quotedKeyId(keyId)}`;
      const why = keyId === null ? 'altered rows' : whyUnauthentic(tally, keyId);
      console.error(`left ${left.length} effect(s) ${under} whose data does not authenticate (${why}): ${shownIds(left.map((u) => u.effectId))}`);
    }
    const usage = await usageOf(store);
    // What the pass did not see: payloads stored under an older key after it went by (a process
    // still sealing under that key, its ids below the cursor or after the last page), or that no
    // event points at. Exit 0 must mean "the older keys seal nothing this run did not name": a
    // script that removes them on 0 would otherwise leave those payloads unopenable.
    const unseen = unseenUnder(usage.payloads, cipher.currentKeyId, tally.missing, tally.unauthentic);
    for (const u of unseen) {
      console.error(`left ${u.n} other payload(s) under ${quotedKeyId(u.keyId)}, stored under it after this run went past them ` +
        '(a process still sealing under it: restart it with this config) or not bound to any event: run again');
    }
    const unseenEffects = unseenUnder(usage.effects, cipher.currentKeyId, tally.effectsMissing, tally.effectsUnauthentic);
    for (const u of unseenEffects) {
      console.error(`left ${u.n} other effect(s) under ${quotedKeyId(u.keyId)}, recorded under it after this run went past them (a process still sealing under it: restart it with this config): run again`);
    }
    printUsage(usage, config, keys);
    const effectsLeft = tally.effectsMissing.size > 0 || tally.effectsUnauthentic.length > 0 || unseenEffects.length > 0;
    return tally.missing.size === 0 && tally.unauthentic.length === 0 && unseen.length === 0 && !effectsLeft ? 0 : 1;
  });
}

/** Rows grouped by the key id they name, in first-seen order. */
function byKey<T extends { keyId: string | null }>(rows: readonly T[]): Map<T['keyId'], T[]> {
  const groups = new Map<T['keyId'], T[]>();
  for (const r of rows) groups.set(r.keyId, [...(groups.get(r.keyId) ?? []), r]);
  return groups;
}

/**
 * Why rows under `keyId` did not open. When others under it opened this run, its configured value
 * is right and these rows were changed; when none did, a wrong value for that (older) key reads
 * exactly like altered rows, and only the operator can tell.
 */
function whyUnauthentic(tally: Pick<ResealTally, 'opened'>, keyId: string): string {
  return (tally.opened.get(keyId) ?? 0) > 0
    ? `altered or moved rows: others under ${quotedKeyId(keyId)} opened`
    : `none under ${quotedKeyId(keyId)} opened this run: its value in payloadKeys.keys may not be the one that sealed them, or the rows were altered or moved`;
}

/** Whether `open` opens what it was given (a wrong key, or an altered value, throws). */
function authenticates(open: () => unknown): boolean {
  try {
    open();
    return true;
  } catch {
    return false;
  }
}

/** The first SHOW_IDS of `ids`, and "…" for the rest. */
function shownIds(ids: readonly string[]): string {
  return ids.slice(0, SHOW_IDS).join(', ') + (ids.length > SHOW_IDS ? ', …' : '');
}

/**
 * Per older key, the rows (payloads or effects) still under it at the end that this run did not
 * name as left (key missing, not authentic): stored under it after the run went past them.
 */
function unseenUnder(counts: ReadonlyMap<string, number>, currentKeyId: string, missing: ReadonlyMap<string, number>, unauthentic: readonly { keyId: string | null }[]): { keyId: string; n: number }[] {
  return [...counts]
    .filter(([keyId]) => keyId !== currentKeyId)
    .map(([keyId, n]) => ({ keyId, n: n - (missing.get(keyId) ?? 0) - unauthentic.filter((a) => a.keyId === keyId).length }))
    .filter((u) => u.n > 0);
}

/** Rows of each kind the config's current key is tried on (one altered row does not decide). */
const PROBE_ROWS = 5;

/**
 * Whether this config's current key is the one the servers seal with: of the newest payloads
 * stored under its id and the newest effects sealed under it, one must open with it. A config
 * whose key has that id but another value (a typo, a stale secret file; a value changed in place
 * is taken by the next restart) would reseal everything into payloads and effects no server can
 * open, and the workers fail those at once (payload_corrupt, effect_data_corrupt). The effects
 * count too: events accepted under the old key and processed once the new one is current have
 * only their effects under it. The rows are found by key id: the newest 50 events, as before,
 * may all be under another key (a server not yet restarted onto the new key goes on sealing under
 * the old one), and then nothing was compared and a wrong key resealed everything. (An older key
 * of another value only leaves its rows as they are, each named: not checked here, as a row
 * altered in the database, which the run names too, would read as a wrong value.)
 * Returns why not to reseal, or null (also when nothing is under that id yet: nothing to compare with).
 */
async function currentKeyRefusal(store: InboxStore, cipher: PayloadCipher): Promise<string | null> {
  const keyId = cipher.currentKeyId;
  const { payloads, effects } = await store.newestSealedUnder(keyId, sealedEffectPrefix(keyId), PROBE_ROWS);
  const bindings = new Map(payloads.map((r) => [r.payloadId, r]));
  const stored = await store.readPayloads([...bindings.keys()], MAX_BYTES);
  const opens = stored.some((p) => authenticates(() => cipher.open(p, bindings.get(p.payloadId)!)))
    || effects.some((f) => authenticates(() => openEffectData(cipher, f.data, f.idempotencyKey)));
  if (stored.length + effects.length === 0 || opens) return null;
  const what = [
    ...(stored.length ? [`${stored.length} recent payload(s)`] : []),
    ...(effects.length ? [`${effects.length} recent effect(s)`] : []),
  ].join(' and ');
  return `the current payload key ${quotedKeyId(keyId)} in this config does not open the ${what} stored under ${quotedKeyId(keyId)}: ` +
    'its value differs from the one the servers seal with (run keys reseal with the config they run)';
}

export interface ResealOptions {
  /**
   * At most this many payloads a second (paced after each slice): resealing competes with a
   * running server for the database and the cores (bench/reseal-under-load.ts).
   */
  readonly perSecond?: number;
  /**
   * At most this share of the wall time, in percent, spent in slices: after a slice that took t ms
   * it waits t × (100 − busy) / busy ms. A busy database makes slices slower and so the waits
   * longer: the pace follows the load without a rate to guess. 100 or absent: no waits (the
   * CLI's default is DEFAULT_BUSY_PERCENT in limits.ts).
   */
  readonly busyPercent?: number;
}

/** Payloads per slice when paced: many small transactions, each holding the database briefly. */
const PACED_SLICE = 50;
/** Effects per page of keys reseal, at most (resealEffectsAll). */
const EFFECTS_PAGE = 50;

/**
 * Every payload under another key than the current one, page by page in payload id order, at
 * most MAX_BYTES of them in memory, each slice swapped in by one transaction. A payload that
 * changed meanwhile (its nonce is not the one read) is left to the next run.
 */
export async function resealAll(store: InboxStore, cipher: PayloadCipher, opts: ResealOptions = {}): Promise<ResealTally> {
  const tally: Omit<ResealTally, 'elapsedMs' | 'pausedMs'> = { resealed: 0, missing: new Map(), unauthentic: [], opened: new Map(), resealedEffects: 0, effectsMissing: new Map(), effectsUnauthentic: [] };
  const pacer = new Pacer(opts);
  // Paced, a slice is small (50 ms of the rate, or PACED_SLICE): many small transactions spread
  // the work evenly, where one 4 MiB UPDATE then a pause made a running server's latency jump
  // with each slice.
  const sliceMax = opts.perSecond ? Math.max(1, Math.ceil(opts.perSecond / 20)) : pacer.busy ? PACED_SLICE : PAGE;
  let after: string | null = null;
  for (;;) {
    const page: ResealRef[] = await store.payloadsToReseal(cipher.currentKeyId, after, PAGE);
    await pacer.pace(0);
    if (page.length === 0) {
      await resealEffectsAll(store, cipher, tally, pacer, sliceMax);
      return { ...tally, ...pacer.times() };
    }
    after = page[page.length - 1]!.payloadId;
    const byId = new Map(page.map((r) => [r.payloadId, r]));
    let rest = page;
    while (rest.length > 0) {
      const slice = rest.slice(0, sliceMax);
      const read = await store.readPayloads(slice.map((r) => r.payloadId), MAX_BYTES);
      if (read.length === 0) {
        rest = rest.slice(slice.length); // every one purged meanwhile (a present one is always read)
        continue;
      }
      const updates: Resealed[] = [];
      for (const p of read) {
        try {
          updates.push({ payloadId: p.payloadId, oldNonce: p.nonce, sealed: cipher.reseal(p, byId.get(p.payloadId)!) });
          tally.opened.set(p.keyId, (tally.opened.get(p.keyId) ?? 0) + 1);
        } catch (err) {
          if (err instanceof PayloadKeyMissingError) tally.missing.set(err.keyId, (tally.missing.get(err.keyId) ?? 0) + 1);
          else tally.unauthentic.push({ payloadId: p.payloadId, keyId: p.keyId });
        }
      }
      tally.resealed += await store.resealPayloads(updates);
      await pacer.pace(read.length);
      // The read is a prefix of `rest` (purged ones absent): go on after its last payload.
      const last = read[read.length - 1]!.payloadId;
      rest = rest.slice(rest.findIndex((r) => r.payloadId === last) + 1);
    }
  }
}

/**
 * Every effect whose data is not sealed under the current key (an older key, or stored plain
 * before sealing began), in effect id order, `sliceMax` per transaction and never more than
 * EFFECTS_PAGE. A page is read with its data at once, and nothing bounds what a handler passes to
 * ctx.effect: a handler handing on a 1 MiB body made 500-effect pages (`--busy 100`) of ~700 MB,
 * past what one PostgreSQL parameter string can hold. At 50 a page stays under ~70 MB then.
 */
async function resealEffectsAll(store: InboxStore, cipher: PayloadCipher, tally: Omit<ResealTally, 'elapsedMs' | 'pausedMs'>, pacer: Pacer, sliceMax: number): Promise<void> {
  const prefix = sealedEffectPrefix(cipher.currentKeyId);
  let after: string | null = null;
  for (;;) {
    const page = await store.effectsToReseal(prefix, after, Math.min(EFFECTS_PAGE, sliceMax));
    await pacer.pace(0);
    if (page.length === 0) return;
    after = page[page.length - 1]!.effectId;
    const updates: ResealedEffect[] = [];
    for (const e of page) {
      try {
        updates.push({ effectId: e.effectId, oldData: e.data, data: resealEffectData(cipher, e.data, e.idempotencyKey) });
        const keyId = safeKeyId(e.data);
        if (keyId !== null) tally.opened.set(keyId, (tally.opened.get(keyId) ?? 0) + 1);
      } catch (err) {
        if (err instanceof PayloadKeyMissingError) tally.effectsMissing.set(err.keyId, (tally.effectsMissing.get(err.keyId) ?? 0) + 1);
        else tally.effectsUnauthentic.push({ effectId: e.effectId, keyId: safeKeyId(e.data) });
      }
    }
    tally.resealedEffects += await store.resealEffects(updates);
    await pacer.pace(page.length);
  }
}

/** The key id a stored effect's data names, or null (plain, or not even in the sealed form). */
function safeKeyId(data: string): string | null {
  try {
    return effectDataKeyId(data);
  } catch {
    return null;
  }
}

/**
 * Waits after each piece of database work as long as both limits ask: `perSecond` (payloads so
 * far against the clock) and `busyPercent` (the time worked since the last wait, scaled).
 */
class Pacer {
  private readonly started = performance.now();
  readonly busy: number | undefined;
  private done = 0;
  private workingSince = this.started;
  private pausedMs = 0;

  constructor(private readonly opts: ResealOptions) {
    this.busy = opts.busyPercent !== undefined && opts.busyPercent < 100 ? opts.busyPercent : undefined;
  }

  async pace(payloads: number): Promise<void> {
    this.done += payloads;
    const now = performance.now();
    const wait = Math.max(
      this.opts.perSecond ? this.started + (this.done / this.opts.perSecond) * 1000 - now : 0,
      this.busy ? ((now - this.workingSince) * (100 - this.busy)) / this.busy : 0,
    );
    // A timer may fire up to a millisecond early (libuv counts whole ms): sleep until the time.
    for (let left = wait; left > 0; left = now + wait - performance.now()) await new Promise((r) => setTimeout(r, left));
    this.workingSince = performance.now();
    this.pausedMs += this.workingSince - now;
  }

  /** Wall time since the start, and the part of it spent waiting. */
  times(): { elapsedMs: number; pausedMs: number } {
    return { elapsedMs: performance.now() - this.started, pausedMs: this.pausedMs };
  }
}
