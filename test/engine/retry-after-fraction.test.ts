import { afterEach, expect, it } from 'vitest';
import { RetryableError } from '../../src/engine/failure.js';
import { HandlerRegistry } from '../../src/engine/handlers.js';
import { startTestApp, type TestApp } from '../helpers/app.js';
import { FAST_WORKERS, waitFor } from '../helpers/engine.js';
import { sendStripeEvent } from '../helpers/events.js';
import { describeEachStore } from '../helpers/stores.js';

/**
 * A handler's RetryableError may ask for a wait that is not a whole number of ms (computed from a
 * service's reset time in fractional seconds, say). The wait became the retry's next_attempt_at,
 * which SQLite keeps in a STRICT INTEGER column: the REAL was refused, the settle failed, and the
 * event waited out its lease, attempt after attempt, without its retry ever being recorded.
 */
describeEachStore('a retry asked for in fractional ms', (kind) => {
  let app: TestApp | undefined;
  afterEach(async () => {
    await app?.stop();
    app = undefined;
  });

  it('is settled PENDING with a whole-ms next_attempt_at at least that far off', async () => {
    const handlers = new HandlerRegistry().on('payment_intent.succeeded', () => {
      throw new RetryableError('ledger_busy', 'the ledger asked us to come back later', { retryAfterMs: 30_000.5 });
    });
    app = await startTestApp(kind, { ...FAST_WORKERS, retry: { baseMs: 10, capMs: 60_000, maxAttempts: 3 } }, {}, { workers: true, handlers });
    const res = await sendStripeEvent(app.url, 'evt_fraction');
    expect(res.status).toBe(200);
    const { inbox_id: inboxId } = res.json() as { inbox_id: string };
    const sentAt = Date.now();
    const e = await waitFor(async () => {
      const x = await app!.store.getEvent(inboxId);
      return x?.status === 'PENDING' && x.attemptCount === 1 ? x : null;
    }, 5_000, 'the first attempt settled PENDING');
    expect(e.lastError).toContain('the ledger asked us to come back later');
    expect(Number.isInteger(e.nextAttemptAtMs)).toBe(true);
    expect(e.nextAttemptAtMs! - sentAt).toBeGreaterThan(29_000);
  });
});
