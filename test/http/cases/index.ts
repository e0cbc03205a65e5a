import { genericHmacCase } from './generic-hmac.js';
import { githubCase } from './github.js';
import { standardWebhooksCase } from './standard-webhooks.js';
import { stripeCase } from './stripe.js';
import type { Case } from './types.js';

/** Every adapter whose signature covers the raw body: one line each. */
export const CASES: Case[] = [
  stripeCase,
  githubCase,
  standardWebhooksCase,
  genericHmacCase,
];
