import { maxToleranceSeconds, type EndpointConfig } from '../config/schema.js';
import type { InboxStore } from '../store/port.js';
import { DAY_MS, type PruneTask } from '../store/pruner.js';

/**
 * How long a provider's transmission bindings (webhook_transmission) must be kept, in ms.
 *
 * A binding matters while a request under its transmission id can still be fresh: the first
 * request's signed time t was within ±T of its receipt r, and a later one under the same id (the
 * time is signed, so it is t again) is fresh only until t + T ≤ r + 2T. Past that every such
 * request is refused as stale before the binding is looked at. T is the widest window any
 * configuration may set for the provider (maxToleranceSeconds), not this server's, so a server
 * with another configuration on the same database keeps what it needs; a day more covers the
 * clocks of servers that share it.
 */
export function transmissionHorizonMs(adapter: Parameters<typeof maxToleranceSeconds>[0]): number {
  return 2 * maxToleranceSeconds(adapter) * 1000 + DAY_MS;
}

/** Providers of these endpoints whose bindings this process prunes, each with its horizon. */
export function prunedProviders(endpoints: readonly EndpointConfig[]): Map<string, number> {
  const out = new Map<string, number>();
  for (const e of endpoints) if (e.adapter.bindsTransmissions) out.set(e.provider, transmissionHorizonMs(e.adapter));
  return out;
}

/**
 * The prune tasks of these endpoints' transmission bindings: a binding is ~100 bytes and PayPal
 * sends one per delivery, so without them webhook_transmission only grew. One per provider.
 */
export function transmissionPruneTasks(store: Pick<InboxStore, 'pruneTransmissions'>, endpoints: readonly EndpointConfig[]): PruneTask[] {
  return [...prunedProviders(endpoints)].map(([provider, horizonMs]) => ({
    kind: 'transmission',
    what: `transmission bindings (${provider}) past their horizon`,
    async prune(nowMs, limit) {
      const deleted = await store.pruneTransmissions(provider, nowMs - horizonMs, limit);
      return { deleted, done: deleted < limit };
    },
  }));
}
