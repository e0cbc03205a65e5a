import type { Logger } from 'pino';
import type { Config } from './config/schema.js';
import { KeyRing, keepSecretsCurrent } from './crypto/keyring.js';
import { Engine } from './engine/engine.js';
import { HandlerRegistry } from './engine/handlers.js';
import { createLogger } from './log.js';
import { Registry } from './metrics/registry.js';
import { openStore } from './store/open.js';
import type { InboxStore } from './store/port.js';

export interface RunningWorkers {
  readonly engine: Engine;
  readonly store: InboxStore;
  /** Re-read on SIGHUP by `work`, and retried every 10 s while something is missing. */
  readonly keyring: KeyRing;
  /** Re-reads every secret, its files off the event loop (SIGHUP); resolves once it has. */
  reloadSecrets(): Promise<void>;
  stop(): Promise<void>;
}

/** Workers without ingress (`webhook-inbox work`): scale processing apart from receiving. */
export async function startWorkers(config: Config, opts: { handlers?: HandlerRegistry; env?: NodeJS.ProcessEnv; logger?: Logger; migrate?: boolean; secretCheckMs?: number } = {}): Promise<RunningWorkers> {
  const log = opts.logger ?? createLogger(config.log.level);
  const keyring = new KeyRing(config, opts.env);
  for (const p of keyring.problems) log.error({ problem: p }, 'secret unavailable; retried every 10 s and on SIGHUP');
  const secretChecks = keepSecretsCurrent(keyring, log, opts.secretCheckMs);
  const store = openStore(config.database, { queryTimeoutMs: config.groupCommit.commitTimeoutMs, durableEngineCommits: config.workers.durableCommits });
  if (opts.migrate ?? true) {
    // As in startApp: a failed start closes what it opened (the pools would keep the process alive).
    await store.migrate().catch(async (err: unknown) => {
      secretChecks.stop();
      await store.close().catch(() => undefined);
      throw err;
    });
  }
  const engine = new Engine({ config, store, keyring, handlers: opts.handlers ?? new HandlerRegistry(), registry: new Registry(), log, env: opts.env });
  engine.start();
  return {
    engine,
    store,
    keyring,
    reloadSecrets: () => secretChecks.reload(),
    async stop() {
      secretChecks.stop();
      await engine.stop();
      await store.close();
      log.flush();
    },
  };
}
