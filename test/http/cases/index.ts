import { genericHmacCase } from './generic-hmac.js';
import { githubCase } from './github.js';
import { gitlabCase } from './gitlab.js';
import { standardWebhooksCase } from './standard-webhooks.js';
import { standardWebhooksV1aCase } from './standard-webhooks-v1a.js';
import { stripeCase } from './stripe.js';
import { paypalCase } from './paypal.js';
import { slackCase } from './slack.js';
import { squareCase } from './square.js';
import { paddleCase } from './paddle.js';
import { razorpayCase } from './razorpay.js';
import { mollieCase } from './mollie.js';
import { twilioCase } from './twilio.js';
import { adyenPlatformCase } from './adyen-platform.js';
import type { Case } from './types.js';
import { shopifyCase } from './shopify.js';
import { checkoutCase } from './checkout.js';

/** Every adapter whose signature covers the raw body: one line each. */
export const CASES: Case[] = [
  stripeCase,
  paypalCase,
  slackCase,
  githubCase,
  standardWebhooksCase,
  standardWebhooksV1aCase,
  genericHmacCase,
  gitlabCase,
  squareCase,
  paddleCase,
  razorpayCase,
  shopifyCase,
  checkoutCase,
  mollieCase,
  twilioCase,
  adyenPlatformCase,
];
