import { loadConfigFile } from '../config/load.js';
import { startWorkers } from '../workers.js';
import { loadHandlers } from './handlers-module.js';
import { tuneHeap } from './heap.js';
import { untilStopSignal } from './stop-signal.js';

/** Runs the workers alone until SIGINT/SIGTERM; then finishes the batches in flight. */
export async function runWork(configFile: string, handlersModule: string | undefined): Promise<number> {
  tuneHeap();
  const config = loadConfigFile(configFile);
  const handlers = await loadHandlers(handlersModule);
  const w = await startWorkers(config, { handlers });
  console.error(`webhook-inbox workers running (${w.store.kind}, owner ${w.engine.owner}, ${handlers.size} handler(s))`);
  // As `serve`: SIGHUP re-reads the secrets (without a handler it would end the process).
  process.on('SIGHUP', () => {
    w.keyring.reload();
    console.error(w.keyring.problems.length ? `webhook-inbox: secrets reloaded; still unavailable: ${w.keyring.problems.join('; ')}` : 'webhook-inbox: secrets reloaded');
  });
  await untilStopSignal();
  console.error('webhook-inbox: stopping workers (finishing batches in flight)');
  await w.stop();
  return 0;
}
