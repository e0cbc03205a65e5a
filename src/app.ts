import type { Server } from 'node:http';
import type { Logger } from 'pino';
import { configEnv, type Config } from './config/schema.js';
import { allRetired } from './config/retired.js';
import { EDGE_SPACE } from './config/secrets.js';
import { ListenError } from './errors.js';
import { checkedSecretInterval, KeyRing, keepSecretsCurrent } from './crypto/keyring.js';
import { BodyBudget, warmBodyPath } from './http/body.js';
import { Ingress } from './http/ingress.js';
import { listenOn } from './http/listen.js';
import { Pruner, type PruneSchedule } from './store/pruner.js';
import { configuredPruneTasks } from './store/retention.js';
import { OffloadLane, offloadThreshold, offloadWhenInFlight } from './http/offload.js';
import { commonProblems, createAdminServer, type AdminHandlers } from './http/admin.js';
import { closeSilentConnections, createHttpServer } from './http/server.js';
import { createLogger } from './log.js';
import { ingressMetrics, type IngressMetrics } from './metrics/registry.js';
import { GroupCommitter } from './store/group-commit.js';
import { warnIfSchemaNewer } from './store/migrations.js';
import { openStore } from './store/open.js';
import type { AcceptRecord, AcceptResult, InboxStore, TransmissionBinding } from './store/port.js';
import { Engine } from './engine/engine.js';
import { HandlerRegistry } from './engine/handlers.js';

export interface StartOptions {
  /** Apply migrations before serving (default true). */
  readonly migrate?: boolean;
  readonly logger?: Logger;
  /** Where `${env:}` secrets are read (default: the env the config was parsed with, else process.env). */
  readonly env?: NodeJS.ProcessEnv;
  /** Use this store instead of opening `config.database` (the app then does not close it). */
  readonly store?: InboxStore;
  /** On close, how long open requests may take to finish before their connections are cut. */
  readonly shutdownGraceMs?: number;
  /** In-process handlers and effect executors (library use). */
  readonly handlers?: HandlerRegistry;
  /** Run the workers in this process (default: config.workers.enabled). */
  readonly workers?: boolean;
  /** How often secrets are re-checked (missing ones, changed files); default 10 s; 0 = never (only reloadSecrets()). */
  readonly secretCheckMs?: number;
  /**
   * Serve /metrics, /healthz and /readyz on this address of their own (port 0 = any free one);
   * the webhook port then answers only /healthz of them (404 for the others), so what /readyz and
   * /metrics tell (config paths, database errors, endpoint ids, volumes) stays off a public port.
   */
  readonly metricsListen?: { readonly host: string; readonly port: number };
  /** When the prune tasks run (default: a minute after start, then hourly; store/pruner.ts). */
  readonly pruneSchedule?: PruneSchedule;
}

export interface RunningApp {
  readonly server: Server;
  /** Base URL, e.g. http://127.0.0.1:8080 */
  readonly url: string;
  /** Where /metrics and /readyz answer when `metricsListen` was given (`http://host:port`). */
  readonly metricsUrl?: string;
  readonly store: InboxStore;
  readonly keyring: KeyRing;
  readonly metrics: IngressMetrics;
  /** The processing engine (created even when its workers do not run here, for its metrics). */
  readonly engine: Engine;
  readonly log: Logger;
  /** Re-reads every secret, its files off the event loop (SIGHUP); resolves once it has. */
  reloadSecrets(): Promise<void>;
  close(): Promise<void>;
}

/** Wires config → keyring, store, group committer, ingress and HTTP server, and listens. */
export async function startApp(config: Config, opts: StartOptions = {}): Promise<RunningApp> {
  const secretCheckMs = checkedSecretInterval(opts.secretCheckMs);
  const handlers = opts.handlers ?? new HandlerRegistry();
  handlers.sealFor(config.endpoints);
  // Before anything is opened (nothing to release if it failed), and long before the first request.
  await warmBodyPath();
  const log = opts.logger ?? createLogger(config.log.level);
  // The caller's env: given here, or the one it parsed the config with (its references were checked there).
  const env = opts.env ?? configEnv(config);
  const keyring = new KeyRing(config, env);
  for (const p of keyring.problems) log.error({ problem: p }, 'secret unavailable; until it loads its endpoint answers 503 or its forwards wait (retried every 10 s and on SIGHUP)');
  for (const path of keyring.edgeSpaced) log.warn({ path }, `secret: ${EDGE_SPACE}`);
  const store = opts.store ?? openStore(config.database, { queryTimeoutMs: config.groupCommit.commitTimeoutMs, durableEngineCommits: config.workers.durableCommits });
  // A start that fails from here on (migration, a port in use) closes what it opened: the store's
  // thread and pools would otherwise keep the process alive, not listening, for good.
  const abandon = async (err: unknown): Promise<never> => {
    if (!opts.store) await store.close().catch(() => undefined);
    throw err;
  };
  if (opts.migrate ?? true) {
    const applied = await store.migrate().catch(abandon);
    if (applied.length) log.info({ applied }, 'migrations applied');
    await warnIfSchemaNewer(store, log);
  }
  // Connections and statements are made before the first request, not by it (a restart under load).
  await store.warm?.(config.groupCommit.maxBatch).catch((err: unknown) => log.warn({ err }, 'store warm-up failed; the first batches will open connections and prepare statements'));
  const metrics = ingressMetrics();
  // The latest accept commit, if it failed: a database that answers a ping can still refuse every
  // write (locked by another process, disk full), and then /readyz must not say ready.
  // Its time is monotonic (performance.now()): on the wall clock, a clock stepped back after a
  // failure kept /readyz not ready for the step, and a gateway not ready gets no webhooks to commit.
  // A transmission binding (PayPal) is such a write too: it comes first, and where it fails no accept is tried.
  let lastCommitFailure: { atMs: number; what: 'commit' | 'transmission binding'; error: string } | undefined;
  const commitOptions = {
    ...config.groupCommit,
    maxInFlight: config.groupCommit.maxInFlight ?? store.groupCommitDefaults.maxInFlight,
    maxWaitMs: config.groupCommit.maxWaitMs ?? store.groupCommitDefaults.maxWaitMs,
  };
  const committer = new GroupCommitter<AcceptRecord, AcceptResult>(
    (items) => store.acceptBatch(items),
    commitOptions,
    (s) => {
      metrics.commitLatency.observe(s.commitMs / 1000);
      metrics.batchSize.observe(s.size);
      if (!s.ok) metrics.commitFailures.inc();
      lastCommitFailure = s.ok ? undefined : { atMs: performance.now(), what: 'commit', error: s.error ?? 'unknown' };
    },
    (r) => r.payload.ciphertext.length,
  );
  // PayPal's transmission bindings, group-committed as accepts are (one transaction, one fsync, for
  // many): each is a committed write of its own before its event is even parsed.
  const binder = new GroupCommitter<TransmissionBinding, boolean>(
    (items) => store.bindTransmissions(items),
    { ...commitOptions, maxBatchBytes: undefined },
    (s) => {
      lastCommitFailure = s.ok ? undefined : { atMs: performance.now(), what: 'transmission binding', error: s.error ?? 'unknown' };
    },
  );
  const workersRun = opts.workers ?? config.workers.enabled;
  const engine = new Engine({ config, store, keyring, handlers, registry: metrics.registry, log, env, freshBodies: workersRun });
  const budget = new BodyBudget(config.limits.maxInFlightBodyBytes, config.limits.minBodyBytesPerSecond);
  const offloadBytes = offloadThreshold(config.limits.offloadBodyBytes, workersRun);
  const lane = offloadBytes > 0 ? new OffloadLane(offloadBytes, offloadWhenInFlight(config.limits.offloadWhenInFlight, store.kind), env) : undefined;
  const ingress = new Ingress(config.endpoints, { keyring, committer, binder, metrics, log, budget, maxHeaders: config.limits.maxHeaders, destinations: config.destinations, lane, fresh: engine.fresh });
  // What this start has made, released when it fails before listening (with the store, by abandon).
  const release = async (): Promise<void> => {
    metrics.stop();
    await lane?.close();
    await engine.stop().catch(() => undefined); // not started: only its destinations' connections
  };
  let server: Server;
  let adminServer: Server | undefined;
  // Set once close() begins: the webhook port takes no new connections from then on, while a
  // metrics port of its own (closed last) still answers; its /readyz must not say ready.
  let shuttingDown = false;
  try {
    const admin: AdminHandlers = {
      metrics: async () => {
        metrics.inFlightBodyBytes.set([], budget.used);
        metrics.commitQueue.set([], committer.queued);
        // Queue gauges come from the database; an unreachable one leaves the last values.
        await engine.refreshGauges().catch((err) => log.warn({ err }, 'queue gauges not refreshed'));
        return metrics.registry.render();
      },
      notReady: async () => {
        if (shuttingDown) return ['shutting down: no new webhooks are taken'];
        const problems = await commonProblems(keyring, engine, store, allRetired(config, Date.now()));
        // Recent only: with no traffic there is no commit to clear it, and the ping above still speaks.
        const f = lastCommitFailure;
        const agoMs = f === undefined ? Infinity : performance.now() - f.atMs;
        if (f && agoMs < COMMIT_FAILURE_MEMORY_MS) problems.push(`accepts: the latest ${f.what} failed ${Math.round(agoMs / 1000)} s ago: ${f.error}`);
        return problems.length ? problems : null;
      },
      failed: (path, err) => log.error({ err, path }, 'operational endpoint failed'),
    };
    server = createHttpServer(config, ingress, admin, opts.metricsListen ? 'healthz' : 'all');
    if (opts.metricsListen) adminServer = createAdminServer(admin);
  } catch (err) {
    // Node's own checks of the server's options (the config already refuses what it knows of).
    await release();
    return abandon(err);
  }

  const secretChecks = keepSecretsCurrent(keyring, log, secretCheckMs);
  // Scrapes in progress are answered; a keep-alive scraper's idle connection does not hold the close.
  const closeAdmin = async (): Promise<void> => {
    if (!adminServer?.listening) return;
    const closed = new Promise<void>((resolve) => adminServer!.close(() => resolve()));
    adminServer.closeIdleConnections();
    setTimeout(() => adminServer!.closeAllConnections(), 1000).unref();
    await closed;
  };

  // The metrics port first: a port already taken there fails the start before webhooks are taken.
  let metricsUrl: string | undefined;
  if (adminServer && opts.metricsListen) {
    const { host, port } = opts.metricsListen;
    metricsUrl = await listenOn(adminServer, port, host, log, 'metrics server error (it goes on)').catch(async (err: unknown) => {
      secretChecks.stop();
      await release();
      return abandon(ListenError.from(err, host, port, 'pass another --metrics-host / --metrics-port'));
    });
  }
  const url = await listenOn(server, config.listen.port, config.listen.host, log, 'HTTP server error (the server goes on)').catch(async (err: unknown) => {
    secretChecks.stop();
    await closeAdmin();
    await release();
    return abandon(ListenError.from(err, config.listen.host, config.listen.port));
  });
  if (workersRun) engine.start();
  const pruner = new Pruner(configuredPruneTasks(store, config), log, metrics, opts.pruneSchedule);
  pruner.start();

  let closing: Promise<void> | undefined;
  return {
    server,
    url,
    metricsUrl,
    store,
    keyring,
    metrics,
    engine,
    log,
    reloadSecrets: () => secretChecks.reload(),
    close() {
      closing ??= (async () => {
        shuttingDown = true;
        secretChecks.stop();
        metrics.stop();
        // Stop accepting; requests already in the pipeline finish (their commits are answered);
        // connections that linger past the grace period (stalled senders) are cut.
        await new Promise<void>((resolve) => {
          // A keep-alive connection whose request finishes after this goes idle but stays open: it
          // is closed as soon as it does (its answer said Connection: close, server.ts), or the
          // shutdown waited out the whole grace period. So is a connection that has sent nothing,
          // once silent for SILENT_MS: Node does not count it idle.
          const closeIdle = () => {
            server.closeIdleConnections();
            closeSilentConnections(server);
          };
          const idle = setInterval(closeIdle, 50);
          server.close(() => {
            clearInterval(idle);
            resolve();
          });
          closeIdle();
          setTimeout(() => {
            // A request still waiting on a commit or a transmission binding (a hung database) is answered 503 first, with
            // Retry-After, so its sender retries instead of reading a reset; then everything is cut.
            committer.abandon('shutting down');
            binder.abandon('shutting down');
            setTimeout(() => server.closeAllConnections(), ABANDONED_ANSWERS_MS).unref();
          }, opts.shutdownGraceMs ?? 5000).unref();
        });
        await lane?.close();
        await pruner.stop();
        // Batches in flight settle before the store closes; unfinished leases simply expire.
        await engine.stop();
        await closeAdmin();
        if (!opts.store) await store.close();
        log.flush();
      })();
      return closing;
    },
  };
}

/** How long the 503s of commits abandoned at the grace's end have to go out before every connection is cut. */
const ABANDONED_ANSWERS_MS = 200;

/** How long a failed accept commit (with none since) keeps /readyz not ready. */
const COMMIT_FAILURE_MEMORY_MS = 10_000;
