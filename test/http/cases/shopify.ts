import { randomUUID } from 'node:crypto';
import { PROVIDERS } from '../../../src/providers/registry.js';
import { fields, rotation, type Case, type Secrets } from './types.js';

const SECRETS: Secrets = { v2: 'shpss_shopify_current_v2', v1: 'shpss_shopify_previous_v1', v0: 'shpss_shopify_retired_v0' };

let orderSeq = 5_223_452_934_372;

/**
 * Shopify signs the body only: the event id, webhook id, topic and Triggered-At headers are not
 * covered, so `changeId` and `changeTimestamp` do not apply (see test/providers/shopify.test.ts for
 * the replay-under-a-new-id behaviour over HTTP).
 */
export const shopifyCase: Case = {
  name: 'shopify', endpoint: 'shopify', adapter: PROVIDERS.shopify!(undefined, 'x'), secrets: SECRETS, tolerance: null, signatureHeader: 'x-shopify-hmac-sha256', json: true,
  config: { id: 'shopify', provider: 'shopify', secrets: rotation(SECRETS) },
  make(text = 'plain', type = 'orders/create', objectId) {
    const n = orderSeq++;
    const gid = objectId ?? `gid://shopify/Order/${n}`;
    const eventId = randomUUID();
    const body = `{\n  "id": ${n},\n  "admin_graphql_api_id": "${gid}",\n  "updated_at": "2024-01-02T03:04:05-05:00",\n  "line_items": [{${fields(text)}}]\n}`;
    return {
      body: Buffer.from(body, 'utf8'),
      headers: {
        'content-type': 'application/json', 'x-shopify-topic': type, 'x-shopify-shop-domain': 'shop1.myshopify.com', 'x-shopify-api-version': '2025-07',
        'x-shopify-event-id': eventId, 'x-shopify-webhook-id': randomUUID(), 'x-shopify-triggered-at': '2024-01-02T08:04:06.123456789Z',
      },
      signOpts: {}, key: `${eventId}:${type}:${gid}`, type, objectId: gid,
    };
  },
  changeId: () => null,
  changeTimestamp: () => null,
};
