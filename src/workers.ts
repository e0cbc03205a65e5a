import type { Server } from 'node:http';
import type { Logger } from 'pino';
import { configEnv, type Config } from './config/schema.js';
import { checkedSecretInterval, KeyRing, keepSecretsCurrent } from './crypto/keyring.js';
import { Engine } from './engine/engine.js';
import { ListenError } from './errors.js';
import { commonProblems, createAdminServer } from './http/admin.js';
import { listenOn } from './http/listen.js';
import { eventLoopDelay } from './metrics/event-loop.js';
import { HandlerRegistry } from './engine/handlers.js';
import { createLogger } from './log.js';
import { Registry } from './metrics/registry.js';
import { warnIfSchemaNewer } from './store/migrations.js';
import { openStore } from './store/open.js';
import type { InboxStore } from './store/port.js';

export interface RunningWorkers {
  readonly engine: Engine;
  readonly store: InboxStore;
  /** Re-read on SIGHUP by `work`, and retried every 10 s while something is missing. */
  readonly keyring: KeyRing;
  /** Where /metrics, /healthz and /readyz answer (`http://host:port`), when `metricsListen` was given. */
  readonly metricsUrl?: string;
  /** Re-reads every secret, its files off the event loop (SIGHUP); resolves once it has. */
  reloadSecrets(): Promise<void>;
  stop(): Promise<void>;
}

/** Workers without ingress (`webhook-inbox work`): scale processing apart from receiving. */
export interface WorkersOptions {
  readonly handlers?: HandlerRegistry;
  /** Where `${env:}` secrets are read (default: the env the config was parsed with, else process.env). */
  readonly env?: NodeJS.ProcessEnv;
  readonly logger?: Logger;
  readonly migrate?: boolean;
  /** How often secrets are re-checked (missing ones, changed files); default 10 s; 0 = never (only reloadSecrets()). */
  readonly secretCheckMs?: number;
  /**
   * Serve this process's own metrics (the engine's, which no `serve` process has) with /healthz
   * and /readyz on this address; port 0 = any free one. Absent: no HTTP at all.
   */
  readonly metricsListen?: { readonly host: string; readonly port: number };
}

export async function startWorkers(config: Config, opts: WorkersOptions = {}): Promise<RunningWorkers> {
  const secretCheckMs = checkedSecretInterval(opts.secretCheckMs);
  const handlers = opts.handlers ?? new HandlerRegistry();
  handlers.sealFor(config.endpoints);
  const log = opts.logger ?? createLogger(config.log.level);
  const env = opts.env ?? configEnv(config);
  const keyring = new KeyRing(config, env);
  for (const p of keyring.problems) log.error({ problem: p }, 'secret unavailable; retried every 10 s and on SIGHUP');
  // Opened first: a store that cannot be (its SQLite directory) throws here, before any check runs.
  const store = openStore(config.database, { queryTimeoutMs: config.groupCommit.commitTimeoutMs, durableEngineCommits: config.workers.durableCommits });
  const secretChecks = keepSecretsCurrent(keyring, log, secretCheckMs);
  if (opts.migrate ?? true) {
    // As in startApp: a failed start closes what it opened (the pools would keep the process alive).
    await store.migrate().catch(async (err: unknown) => {
      secretChecks.stop();
      await store.close().catch(() => undefined);
      throw err;
    });
    await warnIfSchemaNewer(store, log);
  }
  const registry = new Registry();
  const loop = eventLoopDelay();
  registry.register(loop.gauge);
  const engine = new Engine({ config, store, keyring, handlers, registry, log, env });
  let server: Server | undefined;
  let metricsUrl: string | undefined;
  if (opts.metricsListen) {
    // Listening before the engine starts: a port already taken fails the start with nothing claimed.
    const { host, port } = opts.metricsListen;
    server = createAdminServer({
      metrics: async () => {
        // Queue gauges come from the database; an unreachable one leaves the last values.
        await engine.refreshGauges().catch((err) => log.warn({ err }, 'queue gauges not refreshed'));
        return registry.render();
      },
      notReady: async () => {
        const problems = await commonProblems(keyring, engine, store);
        return problems.length ? problems : null;
      },
      failed: (path, err) => log.error({ err, path }, 'operational endpoint failed'),
    });
    metricsUrl = await listenOn(server, port, host, log, 'metrics server error (it goes on)').catch(async (err: unknown) => {
      loop.stop();
      secretChecks.stop();
      await engine.stop().catch(() => undefined); // not started: only its destinations' connections
      await store.close().catch(() => undefined);
      throw ListenError.from(err, host, port, 'pass another --metrics-host / --metrics-port');
    });
  }
  engine.start();
  let stopping: Promise<void> | undefined;
  return {
    engine,
    store,
    keyring,
    metricsUrl,
    reloadSecrets: () => secretChecks.reload(),
    stop() {
      // One stop, however often it is asked for: a second call (a signal handler and a teardown)
      // resolves when the first has closed everything, as RunningApp.close does.
      stopping ??= (async () => {
        secretChecks.stop();
        // Scrapes in progress are answered; a keep-alive scraper's idle connection does not hold the stop.
        const closed = server ? new Promise<void>((resolve) => server!.close(() => resolve())) : Promise.resolve();
        server?.closeIdleConnections();
        await engine.stop();
        server?.closeAllConnections();
        await closed;
        loop.stop();
        await store.close();
        log.flush();
      })();
      return stopping;
    },
  };
}
