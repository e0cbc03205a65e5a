import { loadConfigFile } from '../config/load.js';
import { startWorkers, type RunningWorkers } from '../workers.js';
import { loadHandlers } from './handlers-module.js';
import { tuneHeap } from './heap.js';
import { reloadOnHangup, untilStopSignal } from './signals.js';

/** Runs the workers alone until SIGINT/SIGTERM; then finishes the batches in flight. */
export async function runWork(configFile: string, handlersModule: string | undefined): Promise<number> {
  tuneHeap();
  // As `serve`: SIGHUP re-reads the secrets.
  const started = reloadOnHangup<RunningWorkers>((w) => void w.reloadSecrets().then(() => {
    console.error(w.keyring.problems.length ? `webhook-inbox: secrets reloaded; still unavailable: ${w.keyring.problems.join('; ')}` : 'webhook-inbox: secrets reloaded');
  }));
  const config = loadConfigFile(configFile);
  const handlers = await loadHandlers(handlersModule);
  const w = await startWorkers(config, { handlers });
  started(w);
  // Listening before saying so: whoever reads the line may signal at once (see serve.ts).
  const stop = untilStopSignal();
  console.error(`webhook-inbox workers running (${w.store.kind}, owner ${w.engine.owner}, ${handlers.size} handler(s))`);
  await stop;
  console.error('webhook-inbox: stopping workers (finishing batches in flight)');
  await w.stop();
  return 0;
}
