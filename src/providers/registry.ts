import type { AdapterFactory } from './contract.js';
import { createStripe } from './stripe.js';
import { createPaypal } from './paypal.js';
import { createAdyen } from './adyen.js';
import { createSlack } from './slack.js';
import { createGithub } from './github.js';
import { createStandardWebhooks } from './standard-webhooks.js';
import { createGenericHmac } from './generic-hmac.js';
import { createGitlab } from './gitlab.js';
import { createSquare } from './square.js';
import { createPaddle } from './paddle.js';
import { createRazorpay } from './razorpay.js';
import { createShopify } from './shopify.js';
import { createCheckout } from './checkout.js';
import { createMollie } from './mollie.js';

import { createTwilio } from './twilio.js';
/** Provider name (the `provider:` config value) → adapter factory. */
export const PROVIDERS: Readonly<Record<string, AdapterFactory>> = {
  stripe: createStripe,
  paypal: createPaypal,
  adyen: createAdyen,
  slack: createSlack,
  github: createGithub,
  'standard-webhooks': createStandardWebhooks,
  'generic-hmac': createGenericHmac,
  gitlab: createGitlab,
  square: createSquare,
  paddle: createPaddle,
  razorpay: createRazorpay,
  shopify: createShopify,
  checkout: createCheckout,
  mollie: createMollie,
  twilio: createTwilio,
};
