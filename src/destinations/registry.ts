import type { DestinationConfig } from '../config/engine.js';
import { resolveSecret } from '../config/secrets.js';
import { ConfigError } from '../errors.js';
import { decodeStandardSecret } from '../providers/standard-webhooks.js';
import type { Destination } from './contract.js';
import { HttpDestination } from './http.js';
import { NatsDestination } from './nats.js';
import { RabbitMqDestination } from './rabbitmq.js';

/**
 * Builds the destination for one config entry. Nothing connects here: brokers connect on the
 * first delivery. Throws SecretUnavailableError / ConfigError, whose messages name the config
 * path and never a secret value.
 */
export function createDestination(config: DestinationConfig, env: NodeJS.ProcessEnv = process.env): Destination {
  switch (config.type) {
    case 'http': {
      const secret = resolveSecret(config.secret, env);
      let key: Buffer;
      try {
        key = decodeStandardSecret(secret);
      } catch {
        throw new ConfigError(config.secret.path, 'is not a Standard Webhooks secret (base64, optionally prefixed "whsec_")');
      }
      return new HttpDestination(config, key);
    }
    case 'nats':
      return new NatsDestination(config);
    case 'rabbitmq':
      return new RabbitMqDestination(config);
  }
}

/** Every configured destination by id; if one cannot be built, those already built are closed. */
export async function createDestinations(configs: readonly DestinationConfig[], env: NodeJS.ProcessEnv = process.env): Promise<Map<string, Destination>> {
  const out = new Map<string, Destination>();
  try {
    for (const c of configs) out.set(c.id, createDestination(c, env));
  } catch (err) {
    await closeAll(out.values());
    throw err;
  }
  return out;
}

/** Closes every destination; one failing to close does not keep the others open. */
export async function closeAll(destinations: Iterable<Destination>): Promise<void> {
  await Promise.allSettled([...destinations].map((d) => d.close()));
}
