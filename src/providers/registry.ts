import type { AdapterFactory } from './contract.js';
import { createStripe } from './stripe.js';
import { createGithub } from './github.js';
import { createStandardWebhooks } from './standard-webhooks.js';
import { createGenericHmac } from './generic-hmac.js';

/** Provider name (the `provider:` config value) → adapter factory. */
export const PROVIDERS: Readonly<Record<string, AdapterFactory>> = {
  stripe: createStripe,
  github: createGithub,
  'standard-webhooks': createStandardWebhooks,
  'generic-hmac': createGenericHmac,
};
