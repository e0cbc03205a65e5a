import { DAY } from './contract.js';
import { hmac, matchHmac } from '../crypto/hmac.js';
import { asObject } from '../config/read.js';
import { timestampedDigests, tokenSecret } from './signature.js';
import type { AdapterFactory, ProviderAdapter, RequestView, SignatureMetadata } from './contract.js';
import { jsonEnvelope } from './json.js';

/**
 * Paddle Billing: `Paddle-Signature: ts=<unix>;h1=<hex>[;h1=<hex>…]`, HMAC-SHA256 (hex) over
 * `${ts}:${raw}` keyed by the notification destination's secret key (`pdl_ntfset_…`, as-is, UTF-8).
 * - Several h1 may come (a secret change): ANY h1 matching ANY trusted secret verifies. The
 *   official paddle-node-sdk keeps only the last h1 it reads — a bug this adapter does not copy.
 *   Other schemes (`h2=…`) are ignored.
 * - `ts` is signed: ±300 s, both directions (enforced by the pipeline). The SDK's 5 s, past-only
 *   window rejects ordinary clock skew and a delivery that queued a few seconds, and accepts any
 *   future ts.
 * - Key = body `event_id`: `notification_id` is per destination and new on every replay.
 */
interface PaddleSignature extends SignatureMetadata {
  readonly timestamp: number;
  /** The signed `ts` exactly as it arrived. */
  readonly ts: string;
  readonly h1: readonly Buffer[];
}

const HEADER = 'paddle-signature';

function parseSignature(req: RequestView): PaddleSignature {
  const { timestamp, ts, digests } = timestampedDigests(req, HEADER, ';', 'ts', 'h1');
  return { timestamp, ts, h1: digests };
}

const adapter: ProviderAdapter = {
  name: 'paddle',
  contentTypes: ['application/json'],
  defaultToleranceSeconds: 300,
  // 3 days of retries, then replays through the API (same event_id) while retained: 90 days.
  redeliveryWindowSeconds: 90 * DAY,
  prepareSecret(value) {
    if (value.length === 0) throw new Error('secret is empty');
    // The usual mix-up: the API key (pdl_live_apikey_… / pdl_sdbx_apikey_…) instead of the destination's secret key.
    if (/^pdl_[a-z]+_apikey_/.test(value)) throw new Error('this is a Paddle API key; use the notification destination\'s secret key (pdl_ntfset_…)');
    return tokenSecret(value, 'Paddle');
  },
  parseSignature,
  verify(meta, body, keys, nowMs) {
    const m = meta as PaddleSignature;
    return matchHmac('sha256', [`${m.ts}:`, body], m.h1, keys, nowMs);
  },
  // objectVersion: the entity's own last-change time (RFC 3339), per-object ordering evidence; absent on some entities.
  envelope: jsonEnvelope({ id: 'event_id', type: 'event_type', objectId: 'data.id', objectVersion: 'data.updated_at', createdAt: 'occurred_at' }),
  sign(body, secret, opts) {
    const ts = opts.timestamp ?? Math.floor(Date.now() / 1000);
    return { [HEADER]: `ts=${ts};h1=${hmac('sha256', Buffer.from(secret, 'utf8'), [`${ts}:`, body]).toString('hex')}` };
  },
  sample(seq) {
    const now = new Date().toISOString();
    const body = JSON.stringify({
      event_id: `evt_sample${seq}`, event_type: 'transaction.completed', occurred_at: now, notification_id: `ntf_sample${seq}`,
      data: { id: `txn_sample${seq}`, status: 'completed', currency_code: 'USD', customer_id: 'ctm_sample', created_at: now, updated_at: now },
    });
    return { body: Buffer.from(body), headers: { 'content-type': 'application/json' }, signOptions: {} };
  },
};

export const createPaddle: AdapterFactory = (options, path) => {
  asObject(options ?? {}, path, []); // no options: a key here is a typo, not a silent no-op
  return adapter;
};
