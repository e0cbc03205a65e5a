/**
 * `prune`: serve's hourly prune tasks, run once now (after turning retention on, or from a
 * scheduler of the operator's own): what went, per kind, on stdout.
 */
import pino from 'pino';
import { Pruner } from '../store/pruner.js';
import { configuredPruneTasks } from '../store/retention.js';
import { withStore } from './events.js';

export function runPrune(configFile: string): Promise<number> {
  return withStore(configFile, async (store, config) => {
    const tasks = configuredPruneTasks(store, config);
    if (tasks.length === 0) {
      console.log('nothing to prune: the config sets no retention and has no endpoint whose transmissions are bound (PayPal)');
      return 0;
    }
    // The server's counters are not this process's: nothing to count into.
    const uncounted = { pruned: { inc: () => undefined }, pruneFailures: { inc: () => undefined } };
    // A failure rejects (one line from the CLI, exit 1); what was deleted before it stays deleted.
    for (const { what, deleted } of await new Pruner(tasks, pino({ level: 'silent' }), uncounted).runOnce()) console.log(`deleted ${deleted}: ${what}`);
    return 0;
  });
}
