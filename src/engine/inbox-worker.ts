import type { Logger } from 'pino';
import type { RetryPolicy } from '../config/engine.js';
import type { EndpointConfig } from '../config/schema.js';
import type { PayloadCipher } from '../crypto/payload-cipher.js';
import { sealEffectData } from '../crypto/effect-data.js';
import { uuidv7 } from '../crypto/ids.js';
import type { EngineMetrics } from '../metrics/engine.js';
import { heldBytes, logicalKey, type InboxStore, type StoredPayload } from '../store/port.js';
import { LeaseLostError, type ClaimedInbox, type EventKey, type NewEffect, type NewMarker, type ProcessedMarker, type Settlement, type StoreTx } from '../store/work-port.js';
import { StorageUnavailableError } from '../errors.js';
import { PausableDeadline } from '../deadline.js';
import { retryDelayMs } from './backoff.js';
import { leaseHeartbeat } from './leased-runner.js';
import type { Budget } from './budget.js';
import { failpoint } from './failpoints.js';
import { SettleWaves } from './settle-waves.js';
import { whileStoreFails, type StoreRetryLimits, type StoreRetryWindow } from './store-retry.js';
import { abandonedMessage, classify, FAILURE, loggable, NeedsDecisionError, NotAttemptedError, payloadKeyUnavailable, redact, RetryableError, SetupUnavailableError } from './failure.js';
import type { FreshBodies } from './fresh-bodies.js';
import { HANDLER_CONSUMER, type HandlerRegistry, type InboxEvent, type RegisteredHandler } from './handlers.js';
import type { Router, Target } from './routes.js';
import { isSetting, transactionControl } from './tx-control.js';

/** The most JSON one `ctx.effect` may record (64 KiB). */
export const MAX_EFFECT_DATA_BYTES = 64 * 1024;

/** `leaseMs` and `stopping` (StoreRetryLimits) also bound its store retries. */
export interface InboxWorkerDeps extends StoreRetryLimits {
  readonly store: InboxStore;
  readonly cipher: () => PayloadCipher | null;
  /** Whether the config names this payload key (it may still not be loaded: a missing secret). */
  readonly payloadKeyConfigured: (keyId: string) => boolean;
  readonly endpoints: ReadonlyMap<string, EndpointConfig>;
  readonly router: Router;
  readonly handlers: HandlerRegistry;
  readonly owner: string;
  readonly defaultRetry: RetryPolicy;
  readonly metrics: EngineMetrics;
  readonly log: Logger;
  /** Called after a commit that recorded effects, so the effects runner looks at once. */
  readonly onEffects: () => void;
  /** Bodies this process's ingress just accepted (`serve`): used instead of reading them back. */
  readonly fresh?: FreshBodies;
  /** The stored body bytes this worker's batches may hold at once (`workers.maxInFlightBodyBytes`). */
  readonly bodies: Budget;
  readonly now?: () => number;
}

interface Failure {
  readonly error: unknown;
  readonly retry: RetryPolicy;
}

/** One claimed row and what this attempt will do with it. */
interface Plan {
  readonly row: ClaimedInbox;
  readonly key: EventKey;
  /** Set when the row is settled without running anything (bad payload, no route, …). */
  early?: Failure;
  event?: InboxEvent;
  /** The event without its body, for handlers registered with `readsPayload: false`. */
  identity?: InboxEvent;
  /** Some target opens the body: read its sealed payload after the claim. */
  needsBody: boolean;
  /** The sealed payload, once read (absent if purged). */
  sealed?: StoredPayload;
  /** Or the body as this process's ingress accepted it (FreshBodies). */
  fresh?: Buffer;
  /** The opened body and its parse, once a target asked. */
  raw?: Buffer;
  parsed?: { readonly value: unknown };
  /** The attempt is over and its body given back (see releaseBodies). */
  released?: boolean;
  handlers: readonly RegisteredHandler[];
  direct: readonly Target[];
  /** It has a broker route: the settle makes sure its outbox row is owed (BatchOutcome.relayed). */
  relayed?: boolean;
  /** Destinations that took the event in this attempt (processed markers to record). */
  delivered: Target[];
  failure?: Failure;
  /** What was committed, for metrics after the commit. */
  settled?: Settlement;
  /** The failure it was settled for (a handler's included), for the metrics' reason. */
  settledFailure?: Failure;
  /**
   * A statement of one of its handlers was the first of its settle transaction to find the store
   * failing (a link lost or frozen, a client-side timeout): the handler may be what hangs, so that
   * transaction's failure is not tried again for it (see settleRetrying).
   */
  storageFault?: boolean;
}

/**
 * The failure an attempt settles with: the first, unless that one spends no attempt (a key not
 * loaded, a destination paused: nothing was attempted) and a later one does: a handler that
 * failed on its own, or a forward whose request was sent (its 429 included), must not get a free retry. Of
 * two retryable ones that count alike, the one that asks to wait longer (a forward's Retry-After,
 * an open circuit): the retry calls both targets again, so it must not come before either said it
 * may (which failed first is only which answered first).
 */
function firstFailure(kept: Failure | undefined, next: Failure): Failure {
  if (kept === undefined) return next;
  const free = (f: Failure) => f.error instanceof NotAttemptedError;
  if (free(kept) !== free(next)) return free(kept) ? next : kept;
  return kept.error instanceof NeedsDecisionError || waitOf(next) <= waitOf(kept) ? kept : next;
}

/** How long a failure asked to wait before the next attempt (RetryableError.retryAfterMs), 0 if not. */
function waitOf(f: Failure): number {
  const ms = f.error instanceof RetryableError ? f.error.retryAfterMs : undefined;
  return ms !== undefined && ms > 0 ? ms : 0;
}

/** Processed markers as a set of `<logical key>\u0000<consumer>` strings. */
const markerKey = (k: EventKey, consumer: string) => `${logicalKey(k)}\u0000${consumer}`;
const markerSet = (markers: readonly ProcessedMarker[]) => new Set(markers.map((m) => markerKey(m, m.consumer)));

/**
 * Processes claimed inbox rows. Per batch: decrypt and parse each event (lazily), choose its
 * targets (in-process handlers, HTTP forwards; broker routes belong to the outbox relay), deliver
 * the HTTP forwards, and as events' forwards finish, ONE transaction settles those ready (a wave;
 * the whole batch when its forwards answer together): each handler runs in its own SQL
 * savepoint (opened only if it queries), so a failing handler's writes roll back alone and never
 * undo another event's; then one finishBatch writes the processed markers, effects and guarded
 * status changes — a handler's mutation, its marker and its event's settle commit together.
 */
const parseJson = (raw: Buffer): unknown => JSON.parse(raw.toString('utf8'));

/** Whether an event with these targets needs its body: an HTTP forward, or a handler that reads it. */
export const opensBody = (direct: readonly Target[], handlers: readonly RegisteredHandler[]): boolean =>
  direct.length > 0 || handlers.some((h) => h.readsPayload);

/**
 * PostgreSQL caches 64 subtransactions per backend; past that every snapshot in the database
 * pays for pg_subtrans lookups. Each handler may open a savepoint (a subtransaction), so one
 * settle transaction runs at most this many handlers; a larger batch settles in several.
 */
const MAX_HANDLERS_PER_TX = 64;

/**
 * A slice of a batch reads at most this share of the body budget before it settles: several
 * batches progress at once, and a batch of large bodies settles in parts.
 */
const SLICES_PER_BUDGET = 4;

/** Consecutive runs of plans whose handlers add up to at most `max` (an event is never split). */
export function chunkByHandlers<P extends { readonly handlers: readonly unknown[] }>(plans: readonly P[], max: number): P[][] {
  const chunks: P[][] = [];
  let current: P[] = [];
  let n = 0;
  for (const p of plans) {
    if (current.length > 0 && n + p.handlers.length > max) {
      chunks.push(current);
      current = [];
      n = 0;
    }
    current.push(p);
    n += p.handlers.length;
  }
  if (current.length > 0) chunks.push(current);
  return chunks;
}

export class InboxWorker {
  private readonly now: () => number;
  private claims = 0;

  constructor(private readonly d: InboxWorkerDeps) {
    this.now = d.now ?? Date.now;
  }

  claim(n: number): Promise<ClaimedInbox[]> {
    // No payload key, no processing: rows stay PENDING rather than fail for a config problem.
    if (!this.d.cipher()) return Promise.resolve([]);
    // Each claim leases under its own token, so even two batches of this one process that
    // hold the same row (an expired lease taken over) can never both settle it.
    return this.d.store.claimInbox(n, `${this.d.owner}/${++this.claims}`, this.d.leaseMs, this.now());
  }

  /** `settled(n)`: n of these rows are settled before the batch ends (ClaimLoop frees their places). */
  async process(rows: ClaimedInbox[], settled: (n: number) => void = () => undefined): Promise<void> {
    const ids = rows.map((r) => r.inboxId);
    const owner = rows[0]!.leaseOwner;
    const stopHeartbeat = leaseHeartbeat(this.d.leaseMs, () => this.d.store.extendInboxLeases(ids, owner, this.now() + this.d.leaseMs), this.d.log, 'lease heartbeat failed');
    try {
      const plans = rows.map((r) => this.plan(r));
      this.takeFresh(plans);
      let rest = plans;
      try {
        // Usually one slice; bodies past the budget's slice size settle in further ones.
        while (rest.length > 0) {
          const { slice, heldBytes } = await this.readSlice(rest);
          rest = rest.slice(slice.length);
          try {
            await this.settleSlice(slice, owner, settled);
          } finally {
            this.releaseBodies(slice, heldBytes);
          }
        }
      } finally {
        // A failed slice ends the attempt: the fresh bodies of the events it did not reach go back too.
        this.releaseBodies(rest, 0);
      }
    } finally {
      void stopHeartbeat();
    }
  }

  /**
   * Forwards, then the settle transaction(s), of events whose bodies are read. Each event settles
   * once its own forwards are done (at once without any), in waves (SettleWaves): a destination
   * slow to answer holds back only the events routed to it, not the batch around them.
   */
  private async settleSlice(plans: Plan[], owner: string, settled: (n: number) => void): Promise<void> {
    // A wave that failed is over too: its events are retried when their leases expire.
    const waves = new SettleWaves<Plan>((ready) => this.settleReady(ready, owner).finally(() => settled(ready.length)));
    let forwardFailure: { error: unknown } | undefined;
    await this.deliverDirect(plans, (p) => waves.add(p)).catch((error: unknown) => {
      forwardFailure = { error };
    });
    // Every wave is over before the slice's bodies are given back, whatever failed.
    const settleFailure = await waves.idle();
    const failure = forwardFailure ?? settleFailure;
    if (failure) throw failure.error;
  }

  /** The settle transaction(s) of events whose forwards are done, then their metrics. */
  private async settleReady(plans: Plan[], owner: string): Promise<void> {
    if (plans.some((p) => p.delivered.length > 0)) failpoint('worker.after-forward');
    let effects = 0;
    // The store's failures are tried again for at most a lease in all (settleRetrying), also when
    // the events go one at a time.
    const retries: StoreRetryWindow = {};
    const settle = async (some: Plan[]): Promise<Plan[]> => {
      const r = await this.settleRetrying(owner, some, retries);
      effects += r.effects;
      return r.rest;
    };
    // An event that, settled alone, still fails outside its handlers: the database refused what
    // they wrote (a deferred constraint or trigger, checked at COMMIT). That is this attempt's
    // failure, settled as one (retried with backoff, FAILED with the error) without running them
    // again; left to its lease, each attempt waited one out and the event ended attempts_abandoned
    // as if its worker had crashed, the constraint nowhere. The store failing, or the lease lost,
    // is not the event's doing: those still wait for the lease. Whether it was settled so.
    const settleAsFailure = async (p: Plan, err: unknown): Promise<boolean> => {
      if (p.early || err instanceof StorageUnavailableError || err instanceof LeaseLostError) return false;
      p.early = { error: err, retry: this.d.endpoints.get(p.row.endpointId)!.retry };
      if (await settle([p]).then(() => true, () => false)) {
        this.d.log.warn({ err: loggable(err), inboxId: p.row.inboxId }, 'settling this event failed outside its handlers; settled as a failed attempt');
        return true;
      }
      p.settled = undefined;
      return false;
    };
    for (const chunk of this.d.store.kind === 'postgres' ? chunkByHandlers(plans, MAX_HANDLERS_PER_TX) : [plans]) {
      // A transaction that has run long enough settles what it has; the rest go in the next.
      for (let rest = chunk; rest.length > 0;) {
        const attempt = rest;
        try {
          rest = await settle(attempt);
        } catch (err) {
          if (err instanceof LeaseLostError && attempt.length === 1) {
            // This event is another claim's now; the chunks and rests after it are still ours.
            this.d.log.warn({ inboxId: attempt[0]!.row.inboxId }, 'lease lost while settling; another worker owns the event now');
            attempt[0]!.settled = undefined;
            rest = [];
            continue;
          }
          if (err instanceof StorageUnavailableError) throw err;
          if (attempt.length === 1) {
            if (await settleAsFailure(attempt[0]!, err)) {
              rest = [];
              continue;
            }
            throw err;
          }
          // One event's failure outside its handlers (a constraint or trigger of the store, a bug)
          // must not fail the events beside it, attempt after attempt: each goes alone. Their
          // handlers run again, their earlier writes having been rolled back with the rest.
          // So too a lease lost on some of them (LeaseLostError rolled back the handlers' writes):
          // the events this claim still leases settle now, each alone (the lost ones are skipped
          // by lockLeased), instead of waiting out their lease and spending another attempt.
          this.d.log.warn({ err: loggable(err), events: attempt.length }, 'settle transaction failed; settling its events one at a time');
          for (const p of attempt) {
            p.settled = undefined;
            await settle([p]).catch(async (e: unknown) => {
              p.settled = undefined;
              if (await settleAsFailure(p, e)) return;
              this.d.log.error({ err: loggable(e), inboxId: p.row.inboxId }, 'settling this event failed; it is retried when its lease expires');
            });
          }
          rest = [];
        }
      }
    }
    failpoint('worker.after-commit');
    this.record(plans);
    if (effects > 0) this.d.onEffects();
  }

  /**
   * One settle transaction, tried again when the store failed it (StorageUnavailableError: a link
   * lost or frozen, a backend restarted, SQLite's write lock held past busyTimeoutMs), with
   * backoff, for up to a lease from its first failure (`retries.until`, shared by the wave's
   * transactions; the heartbeat keeps this claim's leases meanwhile). The store
   * failing for a moment is no attempt of the events: left to their leases, each such failure
   * spent one, and on an event's last one it ended FAILED attempts_abandoned though every handler
   * of it had succeeded. Nothing is applied twice: the failed transaction rolled back (or, if its
   * COMMIT went through unseen, its rows are no longer leased and lockLeased skips them). An event
   * whose own handler's statement was the first to fail is not tried again: it waits out its lease
   * and the attempt counts, as a handler hanging in a query must still end FAILED.
   */
  private async settleRetrying(owner: string, plans: Plan[], retries: StoreRetryWindow): Promise<{ effects: number; rest: Plan[] }> {
    let some = plans;
    return whileStoreFails(() => {
      for (const p of some) p.storageFault = false;
      return this.d.store.transaction((tx) => this.settleBatch(tx, owner, some), { idleLimitMs: this.idleLimitMs });
    }, retries, this.d, (err, retryInMs) => {
      const suspects = some.filter((p) => p.storageFault);
      for (const p of some) p.settled = undefined;
      for (const p of suspects) this.d.log.warn({ err: loggable(err), inboxId: p.row.inboxId }, 'the store failed during this event\'s handler; it is retried when its lease expires');
      some = some.filter((p) => !p.storageFault);
      if (some.length === 0) return { done: { effects: 0, rest: [] } };
      this.d.log.warn({ err: loggable(err), events: some.length, retryInMs }, 'settle transaction failed in the store; trying it again');
    });
  }

  /**
   * A read an attempt needs before its settle (bodies, forwards already made), tried again while
   * the store fails it, for up to a lease (the heartbeat keeps the leases meanwhile): nothing is
   * done yet, and left to their leases the events spent an attempt on the store's failure, on
   * their last one ending FAILED attempts_abandoned.
   */
  private readRetrying<T>(what: string, read: () => Promise<T>): Promise<T> {
    return whileStoreFails(read, {}, this.d, (err, retryInMs) => {
      this.d.log.warn({ err: loggable(err), retryInMs }, `${what} failed in the store; trying it again`);
    });
  }

  private plan(row: ClaimedInbox): Plan {
    const key: EventKey = { provider: row.provider, endpointId: row.endpointId, providerEventId: row.providerEventId };
    const p: Plan = { row, key, needsBody: false, handlers: [], direct: [], delivered: [] };
    const endpoint = this.d.endpoints.get(row.endpointId);
    const retry = endpoint?.retry ?? this.d.defaultRetry;
    const routes = this.d.router.route(row.endpointId, row.eventType);
    if (!endpoint || !routes) {
      p.early = { error: new NeedsDecisionError('unknown_endpoint', `endpoint "${row.endpointId}" is not configured`), retry };
      return p;
    }
    // Routes are this config's, the outbox row the accept's: a broker route added since (a route
    // moved from a forward that was down to a broker) found the row written already published.
    p.relayed = routes.brokers.length > 0;
    // A worker that crashed or lost its lease mid-attempt still spent an attempt. An event is
    // tried as often as its most patient target allows: a route may allow more than its endpoint.
    const allowed = Math.max(retry.maxAttempts, ...routes.direct.map((t) => t.retry.maxAttempts));
    if (row.attemptCount > allowed) {
      p.early = { error: new NeedsDecisionError(FAILURE.attemptsAbandoned, abandonedMessage(row.attemptCount, allowed)), retry };
      return p;
    }
    const handlers = this.d.handlers.match(row.provider, row.endpointId, row.eventType);
    if (handlers.length === 0 && routes.direct.length === 0 && routes.brokers.length === 0) {
      p.early = { error: new NeedsDecisionError(FAILURE.unsupportedType, `no handler or route for ${row.provider} event type "${row.eventType}"`), retry };
      return p;
    }
    p.handlers = handlers;
    p.direct = routes.direct;
    if (handlers.length === 0 && routes.direct.length === 0) return p; // broker routes only: the relay publishes
    p.needsBody = opensBody(routes.direct, handlers);
    // Read only if some target opens it, then decrypted and parsed on first use (pino's rule: no
    // work that can be done later or never). A failure to open or parse surfaces there, as the
    // typed error it is (payload_unavailable, payload_corrupt, schema_error, …).
    const open = () => (p.raw ??= p.fresh ?? this.open(p));
    const parse = this.d.endpoints.get(row.endpointId)?.adapter.parsePayload ?? parseJson;
    const identity = {
      inboxId: row.inboxId, provider: row.provider, endpointId: row.endpointId, providerEventId: row.providerEventId,
      type: row.eventType, objectId: row.objectId, objectVersion: row.objectVersion, receivedAt: new Date(row.receivedAtMs),
      attempt: row.attemptCount, verification: row.verification,
    };
    if (handlers.some((h) => !h.readsPayload)) {
      const unread = (): never => {
        throw new Error('this handler was registered with readsPayload: false, so event.payload and event.raw are not read for it');
      };
      p.identity = { ...identity, get raw() { return unread(); }, get payload() { return unread(); } };
    }
    p.event = {
      ...identity,
      get raw() {
        return open();
      },
      get payload() {
        if (!p.parsed) {
          try {
            p.parsed = { value: parse(open()) };
          } catch (err) {
            if (err instanceof SyntaxError) throw new NeedsDecisionError(FAILURE.schemaError, 'stored payload does not parse');
            throw err;
          }
        }
        return p.parsed.value;
      },
    };
    return p;
  }

  /**
   * Bodies this process's ingress kept (FreshBodies), taken whether or not a target wants one:
   * an entry is for one attempt only. They stay within FreshBodies' own bound until given back
   * (releaseBodies), not the store-read budget: a batch waiting for that budget must not hold
   * any of it.
   */
  private takeFresh(plans: Plan[]): void {
    const cache = this.d.fresh;
    if (!cache) return;
    let n = 0;
    let unused = 0;
    for (const p of plans) {
      const fresh = cache.take(p.row.inboxId);
      if (!fresh) continue;
      if (p.needsBody && p.event) {
        p.fresh = fresh;
        n++;
      } else {
        unused += fresh.length;
      }
    }
    cache.giveBack(unused);
    this.d.metrics.bodies.inc(['memory'], n);
  }

  /**
   * The next slice of a batch: from the front of `rest`, as many events as one read of their
   * sealed payloads fits in the budget's slice (at least one), with those payloads attached.
   * A stored body counts its ciphertext and its raw bytes once opened (port.ts heldBytes). Waits while
   * other batches hold the budget (a batch holds none of it while it waits). Returns the
   * budget bytes the slice holds.
   */
  private async readSlice(rest: Plan[]): Promise<{ slice: Plan[]; heldBytes: number }> {
    const budget = this.d.bodies;
    const wanted = rest.filter((p) => p.event && p.needsBody && !p.fresh && p.row.rawPayloadRef !== null);
    let slice = rest;
    let held = 0;
    if (wanted.length > 0) {
      const reserved = Math.max(1, Math.floor(budget.max / SLICES_PER_BUDGET));
      await budget.reserve(reserved);
      let sealed: StoredPayload[];
      try {
        sealed = await this.readRetrying('body read', () => this.d.store.readPayloads(wanted.map((p) => p.row.rawPayloadRef!), reserved));
      } catch (err) {
        budget.release(reserved);
        throw err;
      }
      const byId = new Map<string, StoredPayload>();
      for (const s of sealed) {
        byId.set(s.payloadId, s);
        held += heldBytes(s);
      }
      // The read is a prefix of `wanted` (purged payloads absent): the slice ends with the last
      // event it returned a payload for; the events after it are read by the next slice.
      // (Nothing returned: every payload was purged.)
      let read = wanted.length;
      if (sealed.length > 0) {
        const last = sealed[sealed.length - 1]!.payloadId;
        read = wanted.findLastIndex((p) => p.row.rawPayloadRef === last) + 1;
        if (read < wanted.length) slice = rest.slice(0, rest.indexOf(wanted[read - 1]!) + 1);
      }
      for (const p of wanted.slice(0, read)) p.sealed = byId.get(p.row.rawPayloadRef!);
      this.d.metrics.bodies.inc(['store'], read);
      budget.release(reserved - held);
    }
    return { slice, heldBytes: held };
  }

  /** The attempt of these events is over: give their bytes back (budget, FreshBodies) and let them go. */
  private releaseBodies(plans: Plan[], heldBytes: number): void {
    let fresh = 0;
    for (const p of plans) {
      fresh += p.fresh?.length ?? 0;
      p.released = true;
      p.sealed = p.fresh = p.raw = p.parsed = undefined;
    }
    if (fresh > 0) this.d.fresh!.giveBack(fresh);
    this.d.bodies.release(heldBytes);
  }

  private open({ row, sealed, released }: Plan): Buffer {
    if (released) throw new Error('this event\'s attempt is over: its body is no longer held (read it while the handler runs)');
    if (!sealed) throw new NeedsDecisionError(FAILURE.payloadUnavailable, 'the raw payload was purged');
    const cipher = this.d.cipher();
    if (!cipher) throw new SetupUnavailableError('payload_key_unavailable', 'payload keys are not loaded');
    // Configured but not loaded (a secret mount that is late, /readyz names it): the event waits.
    if (!cipher.has(sealed.keyId)) throw payloadKeyUnavailable(sealed.keyId, this.d.payloadKeyConfigured(sealed.keyId));
    try {
      return cipher.open(sealed, { provider: row.provider, endpointId: row.endpointId, providerEventId: row.providerEventId });
    } catch {
      throw new NeedsDecisionError(FAILURE.payloadCorrupt, 'stored payload failed authentication');
    }
  }

  /**
   * HTTP forwards run outside the transaction; destinations already served are skipped. Calls
   * `ready` for each event once its forwards are done (at once for an event without any).
   */
  private async deliverDirect(plans: Plan[], ready: (p: Plan) => void): Promise<void> {
    const forwarding = plans.filter((p) => !p.early && p.event && p.direct.length > 0);
    const forwards = new Set(forwarding);
    for (const p of plans) if (!forwards.has(p)) ready(p);
    if (forwarding.length === 0) return;
    const done = markerSet(await this.readRetrying('forwarded-markers read', () => this.d.store.transaction((tx) => tx.processed(forwarding.map((p) => p.key)))));
    await Promise.all(forwarding.map(async (p) => {
      await Promise.all(p.direct.map(async (t) => {
        if (done.has(markerKey(p.key, t.consumer))) return;
        try {
          const r = p.row;
          await t.destination.deliver({ inboxId: r.inboxId, provider: r.provider, endpointId: r.endpointId, providerEventId: r.providerEventId,
            eventType: r.eventType, receivedAtMs: r.receivedAtMs, body: p.event!.raw, verification: r.verification });
          p.delivered.push(t);
        } catch (error) {
          p.failure = firstFailure(p.failure, { error, retry: t.retry });
        }
      }));
      ready(p);
    }));
  }

  /**
   * The batch protocol, in one transaction: read the rows this claim still leases (the guarded
   * settle at the end is the fence: finishBatch, LeaseLostError), look up their processed markers, run the handlers not yet
   * done — each in a savepoint opened only if it touches the database — and write every
   * marker, effect and settlement in one round trip. Returns the number of effects recorded, and
   * the plans left for the next transaction (txBudgetMs).
   */
  private async settleBatch(tx: StoreTx, owner: string, plans: Plan[]): Promise<{ effects: number; rest: Plan[] }> {
    let rest: Plan[] = [];
    const owned = new Set(await tx.lockLeased(plans.map((p) => p.row.inboxId), owner));
    const live = plans.filter((p) => owned.has(p.row.inboxId));
    for (const p of plans) if (!owned.has(p.row.inboxId)) this.d.log.warn({ inboxId: p.row.inboxId }, 'lease lost before settling; another worker owns the event now');
    const withHandlers = live.filter((p) => !p.early && p.handlers.length > 0);
    const found = withHandlers.length ? await tx.processed(withHandlers.map((p) => p.key)) : [];
    const done = markerSet(found);
    // Events a handler finished before, under any name: only they can hold effects already.
    const handled = new Set(found.filter((m) => m.consumer.startsWith(HANDLER_CONSUMER)).map((m) => logicalKey(m)));
    // One effect per name per event (its key is <inbox_id>:<name>, and a repeated key is not
    // inserted): the names its handlers hold already. Those of an earlier attempt (read only where
    // a handler finished before and some are not done; before any handler opens the transaction),
    // and those recorded by this attempt's handlers as they succeed. A handler finished under a
    // name none has now (renamed or removed since) counts: counting only those done by their names
    // now, the effect it recorded looked free, and another handler's of that name was dropped.
    const taken = new Map<string, Set<string>>();
    for (const p of withHandlers) {
      const finished = p.handlers.filter((h) => done.has(markerKey(p.key, h.consumer))).length;
      const names = handled.has(logicalKey(p.key)) && finished < p.handlers.length ? (await this.d.store.listEffects(p.row.inboxId)).map((e) => e.name) : [];
      taken.set(p.row.inboxId, new Set(names));
    }
    const markers: NewMarker[] = [];
    const effects: NewEffect[] = [];
    const settlements: { inboxId: string; s: Settlement }[] = [];
    const relayed: string[] = [];
    // Whether the store has failed this transaction yet: only a handler statement that finds it
    // failing first is a suspect (Plan.storageFault); the ones after meet a transaction already lost.
    let storeFailed = false;
    for (const [i, p] of live.entries()) {
      // A store that rolls back long transactions (SQLite holds its one writer meanwhile): past
      // half that limit, settle what ran and leave the rest to the next transaction.
      if (i > 0 && tx.begunAt !== undefined && performance.now() - tx.begunAt > this.txBudgetMs) {
        rest = live.slice(i);
        break;
      }
      const { row } = p;
      let s: Settlement;
      let failed: Failure | undefined = p.early;
      // Times are read as each step ends, not once for the batch: a batch may wait for its
      // connection and its handlers may run for seconds, and processed_at, the processing-latency
      // metric and a retry's backoff count from when the event's own work was done.
      if (p.early) {
        s = this.decide(row, p.early, this.now());
      } else {
        const forwardedAt = this.now();
        for (const t of p.delivered) markers.push({ ...p.key, consumer: t.consumer, inboxId: row.inboxId, handlerVersion: null, nowMs: forwardedAt });
        let failure = p.failure;
        const versions: string[] = [];
        for (const h of p.handlers) {
          const version = `${h.name}@${h.version}`;
          versions.push(version);
          if (done.has(markerKey(p.key, h.consumer))) continue;
          try {
            const names = taken.get(row.inboxId)!;
            const suspect = () => {
              if (!storeFailed) p.storageFault = true;
              storeFailed = true;
            };
            const recorded = await this.runHandler(tx, h, h.readsPayload ? p.event! : p.identity!, this.handlerTimeoutMs(tx), names, suspect);
            for (const name of recorded.keys()) names.add(name);
            const now = this.now();
            markers.push({ ...p.key, consumer: h.consumer, inboxId: row.inboxId, handlerVersion: version, nowMs: now });
            for (const [name, data] of recorded) {
              effects.push({ effectId: uuidv7(now), inboxId: row.inboxId, name, idempotencyKey: `${row.inboxId}:${name}`, data, nowMs: now });
            }
          } catch (error) {
            if (error instanceof StorageUnavailableError) storeFailed = true;
            failure = firstFailure(failure, { error, retry: this.d.endpoints.get(row.endpointId)!.retry });
          }
        }
        const now = this.now();
        s = failure ? this.decide(row, failure, now) : { status: 'PROCESSED', handlerVersion: versions.length ? versions.join(',') : null, nowMs: now };
        failed = failure;
      }
      settlements.push({ inboxId: row.inboxId, s });
      if (p.relayed) relayed.push(row.inboxId);
      p.settled = s;
      p.settledFailure = failed;
    }
    if (settlements.length > 0) await tx.finishBatch(owner, { markers, effects, settlements, relayed });
    return { effects: effects.length, rest };
  }

  /**
   * A settle transaction idle this long is ended by PostgreSQL (TxOptions.idleLimitMs). A live
   * worker never gets near it: a handler's wait between statements is cut at its lease
   * (handlerTimeoutMs). A frozen one's locks are freed less than a lease after its lease ran
   * out (its last statement came before the freeze), so the next owner, which waits on them for
   * at most its own lease, gets them in time.
   */
  private get idleLimitMs(): number {
    return this.d.leaseMs * 1.5;
  }

  /** How long one settle transaction may run handlers (half the store's limit; none on PostgreSQL). */
  private get txBudgetMs(): number {
    return this.d.store.maxTxMs === undefined ? Infinity : this.d.store.maxTxMs / 2;
  }

  /**
   * A handler's time limit: its lease, and within a store's transaction limit (see txBudgetMs):
   * at most half of it, and no more than the transaction has left since it began (less a
   * tenth, for the settle and COMMIT). An event's handlers share its transaction: each within
   * its own half, several outlasted the store's limit together, and every attempt was rolled back
   * (SQLite). So the last one times out instead, the others' work commits, and the next attempt
   * runs only what is left. (Not yet begun, the transaction has it all: its limit starts at BEGIN.)
   */
  private handlerTimeoutMs(tx: StoreTx): number {
    const maxTx = this.d.store.maxTxMs;
    if (maxTx === undefined) return this.d.leaseMs;
    const left = maxTx * 0.9 - (tx.begunAt === undefined ? 0 : performance.now() - tx.begunAt);
    return Math.max(0, Math.floor(Math.min(this.d.leaseMs, this.txBudgetMs, left)));
  }

  /** Runs one handler; its writes are undone if it throws. Returns the effects it recorded, as JSON. */
  private async runHandler(tx: StoreTx, h: RegisteredHandler, event: InboxEvent, limit: number, taken: ReadonlySet<string>, storageFault: () => void): Promise<Map<string, string>> {
    const effects = new Map<string, string>();
    let open = true;
    // The savepoint is opened lazily: a handler that never queries costs no round trip.
    let savepoint: Promise<unknown> | undefined;
    let failedQuery: unknown;
    let sealFailure: SetupUnavailableError | undefined;
    // Queries the handler started, awaited or not: all are done before its savepoint is released
    // or rolled back, so none runs outside it (a forgotten await would otherwise commit a write
    // of a handler that failed).
    const inflight = new Set<Promise<unknown>>();
    const deadline = new PausableDeadline(limit, () => new RetryableError('handler_timeout', `handler "${h.name}" did not finish within ${limit} ms`));
    // The first query begins the batch's transaction, which may wait for a connection (the work
    // pool's, or SQLite's one writer) behind other batches' handlers: their time, not this one's.
    const openSavepoint = async () => {
      if (tx.begunAt === undefined) {
        const resume = deadline.pause();
        try {
          await tx.begin();
        } finally {
          resume();
        }
      }
      return tx.query('SAVEPOINT wi_handler');
    };
    const ctx = {
      tx: {
        kind: tx.kind,
        query: <R extends Record<string, unknown>>(sql: string, params?: readonly unknown[]): Promise<R[]> => {
          // A handler that is over (it returned, threw or timed out) must not write into what runs
          // next; a write refused so fails the handler, as a failed query does, rather than vanish.
          const over = () => {
            const err = new Error('this transaction is over (the handler finished or timed out)');
            failedQuery ??= err;
            return err;
          };
          const run = (async () => {
            if (!open) throw over();
            const control = transactionControl(sql, tx.kind);
            if (control) {
              throw (failedQuery ??= new NeedsDecisionError('handler_transaction_control', isSetting(control)
                ? `handler "${h.name}" ran ${control} in ctx.tx: a setting would outlast the handler (the batch's other events and later batches share the connection)${control === 'PRAGMA' ? '' : ', so qualify names (schema.table) instead'}`
                : `handler "${h.name}" ran ${control} in ctx.tx: the engine commits a handler's writes together with its processed marker, so a handler may not control the transaction`));
            }
            await (savepoint ??= openSavepoint());
            if (!open) throw over();
            try {
              return await tx.query<R>(sql, params);
            } catch (err) {
              failedQuery ??= err;
              // One of the handler's own statements found the store failing: it may be the cause.
              if (err instanceof StorageUnavailableError) storageFault();
              throw err;
            }
          })();
          inflight.add(run);
          void run.then(() => inflight.delete(run), () => inflight.delete(run));
          return run;
        },
      },
      effect: (name: string, data: unknown) => {
        // Its effects were taken (or dropped, with its writes) when it finished: a late call (an
        // un-awaited helper) would be lost silently, so it throws to its caller, as ctx.tx does.
        if (!open) throw new Error(`effect "${name}" recorded after the handler finished (await what records it): it was not recorded`);
        // The name is the key (<inbox_id>:<name>) and the executor's: another value (a JS caller's
        // ctx.effect({ name, data })) failed the settle on SQLite and was stored as its String() on PostgreSQL.
        if (typeof name !== 'string' || name === '') throw new Error(`ctx.effect: the effect name must be a non-empty string, not ${name === '' ? 'an empty string' : typeof name}`);
        if (effects.has(name)) throw new Error(`effect "${name}" recorded twice for one event`);
        // Another handler's: the insert would be skipped as a repeat, and this one never executed.
        if (taken.has(name)) {
          throw new NeedsDecisionError('effect_name_taken', `effect "${name}" is already recorded for this event by another of its handlers (or one renamed since): one effect per name per event (its idempotency key is <inbox_id>:<name>)`);
        }
        // Serialised here, so data that is not JSON fails the handler (its writes undone) at the
        // call, instead of a half-recorded event or a failed batch after the handler returned.
        let json: string | undefined;
        try {
          json = JSON.stringify(data ?? null);
        } catch (err) {
          throw new Error(`effect "${name}": data is not JSON-serialisable (${redact(err)})`);
        }
        if (json === undefined) throw new Error(`effect "${name}": data is not JSON-serialisable (a function or a symbol)`);
        // Claimed effects hold their data in memory (up to effectsConcurrency at once) and the
        // settle sends it in one statement: a reference, not a document, belongs here.
        const size = Buffer.byteLength(json);
        if (size > MAX_EFFECT_DATA_BYTES) {
          throw new Error(`effect "${name}": data is ${size} bytes of JSON, over the limit of ${MAX_EFFECT_DATA_BYTES}; record ids and let the executor fetch the rest`);
        }
        // Sealed at rest as the bodies are (it may carry customer details). Without the current
        // key the handler fails, its writes undone, and the event waits for the key with its
        // attempt given back; also when the handler catches this (checked once it returns).
        const cipher = this.d.cipher();
        if (!cipher) throw (sealFailure ??= new SetupUnavailableError('payload_key_unavailable', `effect "${name}": payload keys are not loaded, so its data cannot be sealed`));
        effects.set(name, sealEffectData(cipher, json, `${event.inboxId}:${name}`));
      },
    };
    // The handler's writes, if it made any, rolled back (its savepoint released either way).
    const undoWrites = async () => {
      if (!savepoint) return;
      await savepoint.catch(() => undefined);
      await tx.releaseSavepoint('wi_handler', { rollback: true });
    };
    try {
      await Promise.race([Promise.resolve().then(() => h.fn(event, ctx)), deadline.expired]);
      // It returned: the writes it started finish inside its savepoint, within its time limit (a
      // query loop it left running held the transaction, and its batch, for good), then it is over.
      while (inflight.size > 0) await Promise.race([Promise.allSettled([...inflight]), deadline.expired]);
    } catch (err) {
      deadline.clear();
      open = false; // a timed-out handler may still be running: no new writes
      await Promise.allSettled([...inflight]);
      await undoWrites();
      throw err;
    }
    deadline.clear();
    open = false;
    if (failedQuery !== undefined) {
      // A query failed and the handler went on as if it had not. PostgreSQL refuses everything
      // after it until the savepoint is rolled back (the whole batch would fail); SQLite would
      // keep the handler's other writes. On both: undo this handler's writes and fail it alone.
      await undoWrites();
      // A refused statement is a fault of the handler's code: retrying cannot help.
      if (failedQuery instanceof NeedsDecisionError) throw failedQuery;
      throw new Error(`handler "${h.name}" went on after a failed query, so its writes are undone (use ON CONFLICT or a check rather than catching the error): ${redact(failedQuery)}`);
    }
    if (sealFailure) {
      await undoWrites();
      throw sealFailure;
    }
    // Its writes kept; its session state (a set_config the first-word refusal cannot see, a lock) ends with it.
    if (savepoint) await tx.releaseSavepoint('wi_handler');
    return effects;
  }

  private decide(row: ClaimedInbox, f: Failure, now: number): Settlement {
    const c = classify(f.error);
    if (!c.retryable) return { status: 'FAILED', reason: c.reason, error: c.message, nowMs: now };
    // Nothing was attempted (a key of this gateway not loaded, a destination paused): the event
    // waits for it, its attempts untouched. Only when every failure of the attempt was so (firstFailure).
    if (f.error instanceof NotAttemptedError) return { status: 'PENDING', nextAttemptAtMs: now + Math.min(c.retryAfterMs ?? 0, f.retry.capMs), error: c.message, nowMs: now, attemptGivenBack: true };
    if (row.attemptCount >= f.retry.maxAttempts) return { status: 'FAILED', reason: FAILURE.retriesExhausted, error: c.message, nowMs: now };
    return { status: 'PENDING', nextAttemptAtMs: now + retryDelayMs(row.attemptCount, f.retry, c.retryAfterMs), error: c.message, nowMs: now };
  }

  private record(plans: Plan[]): void {
    const m = this.d.metrics;
    for (const p of plans) {
      const s = p.settled;
      if (!s) continue;
      if (s.status === 'PROCESSED') m.attempts.inc(['success', '']);
      // A handler's failure is not p.failure (that is the forwards'): the one settled with.
      else if (s.status === 'PENDING') m.attempts.inc(['retry', m.reason(classify(p.settledFailure?.error).reason)]);
      else m.attempts.inc(['failed', m.reason(s.reason)]);
      if (s.status !== 'PENDING') m.processingLatency.observe(Math.max(0, s.nowMs - p.row.receivedAtMs) / 1000, [s.status]);
    }
  }
}
