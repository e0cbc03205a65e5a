import type { DestinationConfig } from '../config/engine.js';
import { resolveSecret } from '../config/secrets.js';
import { SetupUnavailableError } from '../engine/failure.js';
import { signingKeyAt } from './signing-key.js';
import type { Destination } from './contract.js';
import { HttpDestination, type CircuitListener, type PauseListener } from './http.js';
import { NatsDestination } from './nats.js';
import { RabbitMqDestination } from './rabbitmq.js';

/** A running server's HTTP destination keys, as its KeyRing last loaded them (re-read on SIGHUP). */
export type DestinationKeys = (id: string) => Buffer | undefined;

export interface DestinationHooks {
  readonly keys?: DestinationKeys;
  /** An HTTP destination's circuit opened or closed (for the log and a gauge). */
  readonly onCircuit?: CircuitListener;
  /** An HTTP destination asked for a pause (a 429 or 503 with Retry-After): once as it begins, for the log. */
  readonly onPause?: PauseListener;
}

/**
 * Builds the destination for one config entry. Nothing connects here: brokers connect on the
 * first delivery. An HTTP destination signs with `hooks.keys(id)` at each delivery, so a reloaded
 * secret applies to the next one; while it is missing, deliveries fail retryably
 * (`destination_unavailable`, spending no attempt: the events wait for it). Without `hooks.keys` (tests, one-off use) its secret is resolved here,
 * once. Throws SecretUnavailableError / ConfigError, whose messages name the config path and
 * never a secret value.
 */
export function createDestination(config: DestinationConfig, env: NodeJS.ProcessEnv = process.env, hooks: DestinationHooks = {}): Destination {
  switch (config.type) {
    case 'http': {
      const { keys } = hooks;
      if (keys) {
        return new HttpDestination(config, () => keys(config.id) ?? unloadedKey(config.id, config.secret.path), hooks);
      }
      const key = signingKeyAt(resolveSecret(config.secret, env), config.secret.path);
      return new HttpDestination(config, () => key, hooks);
    }
    case 'nats':
      return new NatsDestination(config);
    case 'rabbitmq':
      return new RabbitMqDestination(config);
  }
}

function unloadedKey(id: string, path: string): never {
  throw new SetupUnavailableError('destination_unavailable', `http destination "${id}": its signing secret (${path}) is not loaded; retried every 10 s and on SIGHUP`);
}

/**
 * Every configured destination by id. One that cannot be built (without `hooks.keys`: an HTTP one
 * whose secret is missing) does not stop the others or the ingress: it stands in as a
 * destination whose every delivery fails retryably with the reason, so its events wait — and
 * `problems` names the config path.
 */
export function openDestinations(configs: readonly DestinationConfig[], env: NodeJS.ProcessEnv = process.env, hooks: DestinationHooks = {}): { destinations: Map<string, Destination>; problems: string[] } {
  const destinations = new Map<string, Destination>();
  const problems: string[] = [];
  for (const c of configs) {
    try {
      destinations.set(c.id, createDestination(c, env, hooks));
    } catch (err) {
      const message = (err as Error).message;
      problems.push(`destination ${c.id}: ${message}`);
      destinations.set(c.id, {
        id: c.id,
        type: c.type,
        deliver: () => Promise.reject(new SetupUnavailableError('destination_unavailable', message)),
        close: () => Promise.resolve(),
      });
    }
  }
  return { destinations, problems };
}

/** Closes every destination; one failing to close does not keep the others open. */
export async function closeAll(destinations: Iterable<Destination>): Promise<void> {
  await Promise.allSettled([...destinations].map((d) => d.close()));
}
