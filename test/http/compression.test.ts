import { afterEach, expect, it, vi } from 'vitest';
import { OffloadLane } from '../../src/http/offload.js';
import { sha256 } from '../../src/crypto/payload-cipher.js';
import { HandlerRegistry } from '../../src/engine/handlers.js';
import { startTestApp, type TestApp } from '../helpers/app.js';
import { FAST_WORKERS, waitFor } from '../helpers/engine.js';
import { largeEvent, stripeHeaders } from '../helpers/events.js';
import { post } from '../helpers/http.js';
import { describeEachStore } from '../helpers/stores.js';

/**
 * A large verified body is stored compressed (limits.compressBodyBytes, 256 KiB by default):
 * what the database writes is ~6x smaller for JSON, and everything that reads it back gets the
 * exact bytes that were signed. On the event loop and on the helper thread alike.
 */

describeEachStore('large bodies stored compressed', (kind) => {
  let app: TestApp | undefined;
  afterEach(async () => {
    vi.restoreAllMocks();
    await app?.stop();
    app = undefined;
  });

  it.each([
    ['on the event loop', 0],
    ['on the helper thread', 1],
  ])('%s: stored as brotli with its raw size, ~6x smaller; the handler gets the exact signed bytes; a retry is a duplicate', async (_where, offloadBodyBytes) => {
    const seen = new Map<string, Buffer>();
    const handlers = new HandlerRegistry().on('payment_intent.succeeded', (event) => {
      seen.set(event.providerEventId, event.raw);
    });
    const lane = vi.spyOn(OffloadLane.prototype, 'run'); // the real lane, watched
    app = await startTestApp(kind, { ...FAST_WORKERS, limits: { offloadBodyBytes } }, {}, { workers: true, handlers });
    const body = largeEvent('evt_large');
    const small = Buffer.from(JSON.stringify({ id: 'evt_small', object: 'event', type: 'payment_intent.succeeded', created: 1700000000, data: { object: { id: 'pi_s' } } }));
    // Over 512 KiB, a 16th of the fresh-bodies bound: the worker reads it back from the store, not from memory.
    expect(body.length).toBeGreaterThan(512 * 1024);
    const [big, little] = await Promise.all([body, small].map((b) => post(`${app!.url}/webhooks/stripe`, b, stripeHeaders(b))));
    expect(big!.status, big!.text).toBe(200);
    expect(little!.status, little!.text).toBe(200);
    // Where it was compressed: both bodies went to the helper thread, or neither did.
    expect(lane.mock.results.filter((r) => r.value !== null)).toHaveLength(offloadBodyBytes ? 2 : 0);

    const row = (await app.store.getInbox(big!.json().inbox_id))!;
    expect(row.payloadHash.equals(sha256(body))).toBe(true);
    const sealed = (await app.store.getPayload(row.rawPayloadRef!))!;
    expect(sealed).toMatchObject({ encoding: 'br', rawBytes: body.length });
    expect(sealed.ciphertext.length).toBeLessThan(body.length / 4);
    const smallRow = (await app.store.getInbox(little!.json().inbox_id))!;
    expect(await app.store.getPayload(smallRow.rawPayloadRef!)).not.toHaveProperty('encoding');

    await waitFor(() => seen.size === 2, 10_000, 'both handled');
    expect(seen.get('evt_large')!.equals(body)).toBe(true);
    expect(seen.get('evt_small')!.equals(small)).toBe(true);
    const again = await post(`${app.url}/webhooks/stripe`, body, stripeHeaders(body));
    expect(again.json()).toEqual({ inbox_id: row.inboxId, duplicate: true });
  });

  it('limits.compressBodyBytes: 0 stores every body as it came', async () => {
    app = await startTestApp(kind, { limits: { compressBodyBytes: 0 } });
    const body = largeEvent('evt_plain');
    const r = await post(`${app.url}/webhooks/stripe`, body, stripeHeaders(body));
    expect(r.status, r.text).toBe(200);
    const row = (await app.store.getInbox(r.json().inbox_id))!;
    const sealed = (await app.store.getPayload(row.rawPayloadRef!))!;
    expect(sealed).not.toHaveProperty('encoding');
    expect(sealed.ciphertext.length).toBe(body.length + 16);
  });
});
