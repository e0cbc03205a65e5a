import { afterAll, beforeAll, expect, it } from 'vitest';
import { PROVIDERS } from '../../src/providers/registry.js';
import { describeEachStore } from '../helpers/stores.js';
import { startTestApp, STRIPE_SECRET, type TestApp } from '../helpers/app.js';
import { post } from '../helpers/http.js';

describeEachStore('smoke', (kind) => {
  let app: TestApp;
  beforeAll(async () => { app = await startTestApp(kind); });
  afterAll(async () => { await app?.stop(); });

  it('accepts a signed Stripe event and answers a duplicate with the same inbox id', async () => {
    const adapter = PROVIDERS.stripe!(undefined, 'x');
    const body = Buffer.from(JSON.stringify({ id: 'evt_1', type: 'payment_intent.succeeded', created: 1, data: { object: { id: 'pi_1' } } }));
    const headers = { 'content-type': 'application/json', ...adapter.sign(body, STRIPE_SECRET, {}) };
    const r1 = await post(`${app.url}/webhooks/stripe`, body, headers);
    expect(r1.status, r1.text).toBe(200);
    expect(r1.json().duplicate).toBe(false);
    const r2 = await post(`${app.url}/webhooks/stripe`, body, headers);
    expect(r2.json()).toEqual({ inbox_id: r1.json().inbox_id, duplicate: true });
    expect(await app.store.countRows()).toEqual({ inbox: 1, outbox: 1, payload: 1 });
  });
});
