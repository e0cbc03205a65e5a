import { afterEach, describe, expect, it } from 'vitest';
import { parseConfig } from '../../src/config/schema.js';
import { prunedProviders, transmissionHorizonMs } from '../../src/http/transmission-pruner.js';
import type { TransmissionBinding } from '../../src/store/port.js';
import { configDoc, startTestApp, type TestApp } from '../helpers/app.js';
import { scrapeMetrics } from '../helpers/engine.js';
import { describeEachStore } from '../helpers/stores.js';

const DAY = 86_400_000;
const WEBHOOK_ID = '4JH86294D6297924G';
const paypal = (over: Record<string, unknown> = {}) => ({ id: 'pp', provider: 'paypal', secrets: [{ version: 'v1', value: WEBHOOK_ID }], ...over });
const binding = (transmissionId: string, receivedAtMs: number): TransmissionBinding => ({
  provider: 'paypal', endpointId: 'pp', transmissionId, payloadHash: Buffer.alloc(32, 1), receivedAtMs,
});

describe('the transmission horizon', () => {
  it("is twice PayPal's widest configurable window (4 days) plus a day, whatever the endpoint's own toleranceSeconds", () => {
    const narrow = parseConfig(configDoc('sqlite:/tmp/x.db', { endpoints: [paypal({ toleranceSeconds: 600 })] }), {});
    const wide = parseConfig(configDoc('sqlite:/tmp/x.db', { endpoints: [paypal()] }), {});
    expect(prunedProviders(narrow.endpoints)).toEqual(new Map([['paypal', 9 * DAY]]));
    expect(prunedProviders(wide.endpoints)).toEqual(new Map([['paypal', 9 * DAY]]));
    expect(transmissionHorizonMs(narrow.endpoints[0]!.adapter)).toBe(9 * DAY);
  });

  it('is not kept for providers whose signatures bind the body (nothing to prune)', () => {
    expect(prunedProviders(parseConfig(configDoc('sqlite:/tmp/x.db'), {}).endpoints).size).toBe(0);
  });
});

describeEachStore('serve prunes transmission bindings', (kind) => {
  let app: TestApp | undefined;
  afterEach(async () => {
    await app?.stop();
    app = undefined;
  });

  /** Whether `id` is still bound: a binding of other bytes is refused while it is. */
  const stillBound = async (id: string) => !(await app!.store.bindTransmissions([{ ...binding(id, Date.now()), payloadHash: Buffer.alloc(32, 2) }]))[0];

  it('with a PayPal endpoint: bindings past 9 days go, in batches, and newer ones stay', async () => {
    app = await startTestApp(kind, { endpoints: [paypal()] }, {}, { pruneSchedule: { firstAfterMs: 200, everyMs: 60_000, batch: 2 } });
    const now = Date.now();
    await app.store.bindTransmissions([binding('t1', now - 30 * DAY), binding('t2', now - 10 * DAY), binding('t3', now - 9 * DAY - 60_000), binding('t4', now - 8 * DAY), binding('t5', now - 1000)]);
    await expect.poll(async () => stillBound('t3'), { timeout: 10_000, interval: 100 }).toBe(false);
    expect(await stillBound('t1')).toBe(false);
    expect(await stillBound('t2')).toBe(false);
    expect(await stillBound('t4')).toBe(true);
    expect(await stillBound('t5')).toBe(true);
    expect((await scrapeMetrics(app.url))('webhook_pruned_rows_total', 'what="transmission"')).toBe(3);
  });

  it('without one: nothing is pruned (another server, with the PayPal endpoints, prunes them)', async () => {
    app = await startTestApp(kind, {}, {}, { pruneSchedule: { firstAfterMs: 0, everyMs: 50, batch: 2 } });
    await app.store.bindTransmissions([binding('t1', Date.now() - 30 * DAY)]);
    await new Promise((r) => setTimeout(r, 400));
    expect(await stillBound('t1')).toBe(true);
  });
});
