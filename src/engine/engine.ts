import { hostname } from 'node:os';
import { withDeadline } from '../deadline.js';
import type { Logger } from 'pino';
import type { Config } from '../config/schema.js';
import type { KeyRing } from '../crypto/keyring.js';
import type { Destination } from '../destinations/contract.js';
import { closeAll, openDestinations } from '../destinations/registry.js';
import { engineMetrics, refreshQueueGauges, type EngineMetrics } from '../metrics/engine.js';
import type { Registry } from '../metrics/registry.js';
import type { InboxStore } from '../store/port.js';
import { Budget } from './budget.js';
import { EffectsRunner } from './effects-runner.js';
import type { HandlerRegistry } from './handlers.js';
import { loggable } from './failure.js';
import { InboxWorker, opensBody } from './inbox-worker.js';
import { FreshBodies } from './fresh-bodies.js';
import { ClaimLoop } from './loop.js';
import { ClockSkewWatch } from './clock-skew.js';
import { OutboxRelay } from './relay.js';
import { Router } from './routes.js';

export interface EngineOptions {
  readonly config: Config;
  readonly store: InboxStore;
  readonly keyring: KeyRing;
  readonly handlers: HandlerRegistry;
  readonly registry: Registry;
  readonly log: Logger;
  readonly env?: NodeJS.ProcessEnv;
  /** Lease owner id (default host:pid:random). */
  readonly owner?: string;
  /** Keep the bodies this process's ingress accepts for its workers (`serve` with the workers here): `Engine.fresh`. */
  readonly freshBodies?: boolean;
}

/**
 * Raw bytes of just-accepted bodies kept for the workers of this process. At 2,000 req/s of
 * ~10 KiB that is ~0.4 s of arrivals, past the p99 of accept → claim when the workers keep up.
 */
const FRESH_BODY_BYTES = 8 * 1024 * 1024;

// The relay never gives up on a row; it only slows down while a broker is away.
const RELAY_RETRY = { baseMs: 250, capMs: 30_000, maxAttempts: Number.MAX_SAFE_INTEGER };

/**
 * The processing engine of one process: the inbox worker, the effects runner and the outbox
 * relay, each a claim loop over its table, woken by new accepts (PostgreSQL NOTIFY / SQLite
 * in-process signal) with a polling backstop.
 */
export class Engine {
  readonly metrics: EngineMetrics;
  readonly owner: string;
  private readonly destinations: Map<string, Destination>;
  /** Destinations that could not be opened (config path and reason); their events wait. */
  readonly problems: readonly string[];
  private readonly loops: ClaimLoop<any>[] = [];
  /** Set with `freshBodies`: the ingress puts, the inbox worker takes. */
  readonly fresh: FreshBodies | undefined;
  private unsubscribe: (() => void) | undefined;
  private readonly clock: ClockSkewWatch;
  /** The queue gauges' database reads in progress (refreshGauges). */
  private refreshing: Promise<void> | undefined;
  /** Set by stop(): batches stop waiting out store failures (whileStoreFails). */
  private stopping = false;

  constructor(private readonly o: EngineOptions) {
    const { config, store, log } = o;
    this.owner = o.owner ?? `${hostname()}:${process.pid}:${Math.random().toString(36).slice(2, 8)}`;
    this.metrics = engineMetrics(o.registry);
    const opened = openDestinations(config.destinations, o.env, {
      keys: (id) => o.keyring.destinationKey(id),
      onCircuit: (destination, open, failures) => {
        this.metrics.circuitOpen.set([destination], open ? 1 : 0);
        if (open) log.warn({ destination, failures }, 'http destination is not answering: circuit open, its deliveries fail at once (destination_down) until a probe gets an answer');
        else log.info({ destination }, 'http destination answered again: circuit closed');
      },
      // Once as a pause begins: the deliveries it refuses are not logged one by one.
      onPause: (destination, pauseMs, status) => {
        log.warn({ destination, status, pauseMs }, 'http destination asked to wait (Retry-After): paused, its deliveries are held without a request and without spending attempts (destination_paused)');
      },
    });
    this.destinations = opened.destinations;
    this.problems = opened.problems;
    for (const p of this.problems) log.error({ problem: p }, 'destination unavailable; its events wait and retry');
    const router = new Router(config.endpoints, this.destinations);
    this.fresh = o.freshBodies ? new FreshBodies(FRESH_BODY_BYTES, (provider, endpointId, type) =>
      opensBody(router.route(endpointId, type)?.direct ?? [], o.handlers.match(provider, endpointId, type))) : undefined;
    const w = config.workers;
    const stopping = () => this.stopping;
    const onError = (what: string) => (err: unknown) => log.error({ err: loggable(err) }, `${what} failed`);

    // Both workers open what the payload keys sealed (bodies, effects' data), by the same rules.
    const keys = { cipher: () => o.keyring.cipher, payloadKeyConfigured: (id: string) => config.payloadKeys.keys.has(id) };
    const effects = new EffectsRunner({ store, handlers: o.handlers, ...keys, owner: this.owner, leaseMs: w.leaseMs, retry: config.retry, metrics: this.metrics, log, stopping });
    const effectsLoop = new ClaimLoop({ ...w, concurrency: w.effectsConcurrency, batchSize: Math.min(w.batchSize, w.effectsConcurrency) },
      (n) => effects.claim(n), (b) => effects.process(b), onError('effects batch'));
    const inbox = new InboxWorker({
      store, ...keys, endpoints: new Map(config.endpoints.map((e) => [e.id, e])), router, handlers: o.handlers,
      owner: this.owner, leaseMs: w.leaseMs, defaultRetry: config.retry, metrics: this.metrics, log, onEffects: () => effectsLoop.wake(), fresh: this.fresh,
      bodies: new Budget(w.maxInFlightBodyBytes, (held) => this.metrics.bodyBytes.set([], held)), stopping,
    });
    const inboxLoop = new ClaimLoop(w, (n) => inbox.claim(n), (b, settled) => inbox.process(b, settled), onError('inbox batch'));
    const relay = new OutboxRelay({ store, router, owner: this.owner, leaseMs: w.leaseMs, retry: RELAY_RETRY, metrics: this.metrics, log, stopping });
    const relayLoop = new ClaimLoop(w, (n) => relay.claim(n), (b) => relay.process(b), onError('outbox relay batch'));
    this.loops.push(inboxLoop, effectsLoop, relayLoop);
    this.clock = new ClockSkewWatch(store, w.leaseMs, this.metrics.clockSkew, log);
  }

  start(): void {
    const [inbox, , relay] = this.loops;
    this.unsubscribe = this.o.store.onNewWork(() => {
      inbox!.wake();
      relay!.wake();
    }, (reason) => {
      this.metrics.listenerLost.inc();
      this.o.log.warn({ err: loggable(reason) }, 'new-work listener lost its database connection; reconnecting (the workers poll meanwhile)');
    });
    for (const l of this.loops) l.start();
    this.clock.start();
    this.o.log.info({ owner: this.owner, concurrency: this.o.config.workers.concurrency }, 'workers started');
  }

  /** Claims nothing more, waits for in-flight batches, closes destinations. */
  async stop(): Promise<void> {
    this.stopping = true;
    this.unsubscribe?.();
    this.clock.stop();
    await Promise.all(this.loops.map((l) => l.stop()));
    await closeAll(this.destinations.values());
  }

  /**
   * Re-reads the queue gauges (oldest age, rows by status, relay lag, effects), waiting for the
   * database at most `waitMs`: past that it rejects and the gauges keep their last values until
   * the reads answer. A scrape must not wait on a stuck database (a table lock, a write lock held
   * by another process): it waited commitTimeoutMs (10 s, a scraper's usual timeout), the scrape
   * failed, and with it every series, the ones telling of the outage included. One read at a time:
   * scrapes while it is out share it rather than pile more queries on the database (a burst of
   * scrapes costs one). A scrape that joins a read already under way may miss a commit made since
   * that read began: accepted, as a gauge is a sample and the next scrape reads anew (nothing is
   * kept once the read ends, so a scrape that follows a change, in sequence, always sees it).
   */
  refreshGauges(waitMs = GAUGE_REFRESH_WAIT_MS): Promise<void> {
    this.refreshing ??= refreshQueueGauges(this.metrics, this.o.store).finally(() => {
      this.refreshing = undefined;
    });
    return withDeadline(this.refreshing, waitMs, () => new Error(`the database did not answer the queue gauges' reads within ${waitMs} ms; they keep their last values`));
  }
}

/** How long a scrape waits for the queue gauges' database reads. */
export const GAUGE_REFRESH_WAIT_MS = 2000;
