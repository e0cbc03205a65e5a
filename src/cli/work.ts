import { loadConfigFile } from '../config/load.js';
import { startWorkers, type RunningWorkers } from '../workers.js';
import { databaseName } from './database-name.js';
import { loadHandlers } from './handlers-module.js';
import { exitAfterStop, reloadOnHangup, untilStopSignal } from './signals.js';
import { tuneV8 } from './v8-tuning.js';

export interface WorkOptions {
  readonly handlers?: string;
  /** --metrics-port; with it, /metrics, /healthz and /readyz are served on --metrics-host (default listen.host). */
  readonly metricsPort?: number;
  readonly metricsHost?: string;
}

/** Runs the workers alone until SIGINT/SIGTERM; then finishes the batches in flight. */
export async function runWork(configFile: string, o: WorkOptions = {}): Promise<number> {
  tuneV8();
  // As `serve`: SIGHUP re-reads the secrets.
  const started = reloadOnHangup<RunningWorkers>((w) => void w.reloadSecrets().then(() => {
    console.error(w.keyring.problems.length ? `webhook-inbox: secrets reloaded; still unavailable: ${w.keyring.problems.join('; ')}` : 'webhook-inbox: secrets reloaded');
  }));
  const config = loadConfigFile(configFile);
  const handlers = await loadHandlers(o.handlers);
  // Said before the workers start (they claim at once): with neither, every event they claim
  // ends FAILED unsupported_type, which `requeue` does not take back. A warning, as serve's.
  if (handlers.size === 0 && config.endpoints.every((ep) => ep.routes.length === 0)) {
    process.stderr.write('webhook-inbox work: warning: no handler and no route: every event these workers claim ends FAILED unsupported_type. Give --handlers MODULE (the one serve would run) or routes in the config\n');
  }
  const metricsListen = o.metricsPort === undefined ? undefined : { host: o.metricsHost ?? config.listen.host, port: o.metricsPort };
  const w = await startWorkers(config, { handlers, metricsListen });
  started(w);
  // Listening before saying so: whoever reads the line may signal at once (see serve.ts).
  const stop = untilStopSignal();
  const served = w.metricsUrl ? `; /metrics, /healthz and /readyz on ${w.metricsUrl}` : '';
  console.error(`webhook-inbox workers running (${databaseName(config.database)}, owner ${w.engine.owner}, ${handlers.size} handler(s))${served}`);
  await stop;
  console.error('webhook-inbox: stopping workers (finishing batches in flight)');
  try {
    await w.stop();
  } finally {
    exitAfterStop();
  }
  return 0;
}
