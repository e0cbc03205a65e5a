import { ConfigError } from '../errors.js';
import { standardSecretAt } from '../providers/standard-webhooks.js';

/**
 * Standard Webhooks 1.0 (symmetric signatures): the signing secret is "Random. At least 24 bytes
 * (192 bits)". The receiver verifies whatever key it is given, so a shorter one (a word, a test
 * value left in) signs every forward with a key an attacker can guess or brute-force.
 */
export const MIN_SIGNING_KEY_BYTES = 24;

/**
 * An HTTP destination's configured secret (`whsec_<base64>`) → its HMAC key. Unlike a provider's
 * secret, which the provider chose, this key is the gateway's own, so a weak one is refused: a
 * ConfigError naming `path`, never the value.
 */
export function signingKeyAt(value: string, path: string): Buffer {
  const key = standardSecretAt(value, path);
  if (key.length < MIN_SIGNING_KEY_BYTES) {
    throw new ConfigError(path, `is ${key.length} bytes: a signing secret is at least ${MIN_SIGNING_KEY_BYTES} random bytes (Standard Webhooks); generate one: echo "whsec_$(openssl rand -base64 32)"`);
  }
  return key;
}
