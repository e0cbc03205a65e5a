import { afterEach, expect, it, vi } from 'vitest';
import { HandlerRegistry } from '../../src/engine/handlers.js';
import { startTestApp, type TestApp } from '../helpers/app.js';
import { FAST_WORKERS, waitFor } from '../helpers/engine.js';
import { sendStripeEvent } from '../helpers/events.js';
import { describeEachStore } from '../helpers/stores.js';

/**
 * A server started before the host's clock was set (a VM booting, chrony stepping it minutes
 * later) has a monotonic clock whose origin is off by that step for its whole life. received_at
 * was read from it (timeOrigin + the request's start), and it is also the new row's
 * next_attempt_at: with the wall clock stepped back 10 minutes after the start, every event was
 * stored 10 minutes in the future and no worker touched it for 10 minutes. It is read from the
 * wall clock, as freshness and the workers' "due" are.
 */
describeEachStore('received_at after the wall clock was stepped back', (kind) => {
  let app: TestApp | undefined;
  afterEach(async () => {
    vi.useRealTimers();
    await app?.stop();
    app = undefined;
  });

  it('is the wall-clock time of the request, and its event is processed at once', async () => {
    const handled: string[] = [];
    const handlers = new HandlerRegistry().on('payment_intent.succeeded', async (event) => {
      handled.push(event.providerEventId);
    });
    // A wall clock the test can step (it runs on from where it is set); the monotonic one stays.
    vi.useFakeTimers({ toFake: ['Date'], shouldAdvanceTime: true });
    app = await startTestApp(kind, { ...FAST_WORKERS }, {}, { workers: true, handlers });
    // The wall clock goes back 10 minutes, for the workers as for everything else.
    vi.setSystemTime(Date.now() - 10 * 60_000);

    const sentAt = Date.now();
    const res = await sendStripeEvent(app.url, 'evt_clock_stepped');
    expect(res.status).toBe(200);
    const { inbox_id: inboxId } = res.json() as { inbox_id: string };
    const row = await app.store.getInbox(inboxId);
    expect(Math.abs(row!.receivedAtMs - sentAt)).toBeLessThan(5_000);
    await waitFor(() => handled.includes('evt_clock_stepped'), 5_000, 'the event handled');
  });
});
