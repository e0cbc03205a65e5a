import { afterEach, expect, it } from 'vitest';
import { startTestApp, STRIPE_SECRET, type TestApp } from '../helpers/app.js';
import { captureLog } from '../helpers/log.js';
import { DestinationServer, FAST_WORKERS, FORWARD_SECRET, scrapeMetrics, waitFor } from '../helpers/engine.js';
import { sendStripeEvent } from '../helpers/events.js';
import { describeEachStore } from '../helpers/stores.js';

/**
 * A receiver's rate limit as many are built: a request that comes while it is limiting gets 429
 * Retry-After: 1 and restarts the second (a client that does not wait is kept out); the first
 * request starts it. `limited` counts its 429s.
 */
class RateLimited extends DestinationServer {
  limited = 0;
  private until = 0;
  private last = 200;
  private started = false;

  constructor() {
    super();
    this.status = () => {
      const now = Date.now();
      if (!this.started || now < this.until) {
        this.started = true;
        this.until = now + 1000;
        this.limited++;
        return (this.last = 429);
      }
      return (this.last = 200);
    };
    this.headers = (): Record<string, string> => (this.last === 429 ? { 'retry-after': '1' } : {});
  }
}

/** How many requests the receiver saw per idempotency key (= inbox id). */
const requestsPer = (received: readonly { idempotencyKey: string }[]) => {
  const n = new Map<string, number>();
  for (const r of received) n.set(r.idempotencyKey, (n.get(r.idempotencyKey) ?? 0) + 1);
  return n;
};

const MAX_ATTEMPTS = 3;
const N = 20;

describeEachStore('a destination that answers 429 with Retry-After', (kind) => {
  let app: TestApp | undefined;
  let limitedApi: RateLimited;
  let healthyApi: DestinationServer;
  let lines: string[];
  afterEach(async () => {
    await app?.stop();
    app = undefined;
    await limitedApi.stop();
    await healthyApi.stop();
  });

  /** Starts both receivers (`always429`: the limited one never lets a request through) and sends the burst. */
  const start = async (always429 = false) => {
    limitedApi = await new RateLimited().start();
    healthyApi = await new DestinationServer().start();
    lines = [];
    if (always429) {
      limitedApi.status = () => {
        limitedApi.limited++;
        return 429;
      };
      limitedApi.headers = () => ({ 'retry-after': '1' });
    }
    app = await startTestApp(kind, {
      ...FAST_WORKERS,
      // capMs above the Retry-After: the retry of the request that got the 429 honours it.
      retry: { baseMs: 10, capMs: 2000, maxAttempts: MAX_ATTEMPTS },
      destinations: [
        { id: 'limited-api', type: 'http', url: limitedApi.url, secret: FORWARD_SECRET, timeoutMs: 2000 },
        { id: 'healthy-api', type: 'http', url: healthyApi.url, secret: FORWARD_SECRET, timeoutMs: 2000 },
      ],
      endpoints: [{
        id: 'stripe', provider: 'stripe', secrets: [{ version: 'v1', value: STRIPE_SECRET }],
        routes: [{ events: ['payment_intent.*'], destination: 'limited-api' }, { events: ['payment_intent.*'], destination: 'healthy-api' }],
      }],
    }, {}, { workers: true, logger: captureLog(lines) });
    const ids: string[] = [];
    for (let i = 0; i < N; i++) ids.push(((await sendStripeEvent(app.url, `evt_burst_${i}`)).json() as { inbox_id: string }).inbox_id);
    return ids;
  };

  it('pauses the whole destination: a burst is delivered once the limit is over, no event FAILED, and the deliveries refused by the pause spent no attempt', async () => {
    const ids = await start();
    const rows = await waitFor(async () => {
      const r = await Promise.all(ids.map((id) => app!.store.getEvent(id)));
      return r.every((e) => e?.status === 'PROCESSED' || e?.status === 'FAILED') ? r : null;
    }, 20_000, 'every event settled for good');
    expect(rows.map((e) => e!.status)).toEqual(ids.map(() => 'PROCESSED'));
    // Only the requests sent before the first 429 came back met the limit, not one per event.
    expect(limitedApi.limited).toBeLessThan(N);
    expect(limitedApi.received.length).toBeLessThan(N * MAX_ATTEMPTS);
    // An attempt counts only where a request went: the refused ones were given back.
    const sent = requestsPer(limitedApi.received);
    for (const e of rows) expect(e!.attemptCount, e!.inboxId).toBe(sent.get(e!.inboxId));
    const metric = await scrapeMetrics(app!.url);
    expect(metric('webhook_worker_attempts_total', 'reason="destination_paused"')).toBeGreaterThan(0);
    // The other destination of the same events took each exactly once: a retry for the paused one
    // does not send it again.
    expect([...requestsPer(healthyApi.received).values()]).toEqual(ids.map(() => 1));
    expect(healthyApi.keys()).toEqual(new Set(ids));
    // One warning as the pause began, none per refused delivery.
    const paused = lines.map((l) => JSON.parse(l) as Record<string, unknown>).filter((l) => l.msg?.toString().includes('destination_paused'));
    expect(paused).toHaveLength(1);
    expect(paused[0]).toMatchObject({ level: 40, destination: 'limited-api', status: 429 });
    expect(paused[0]!.pauseMs).toBeGreaterThan(0);
    expect(paused[0]!.pauseMs).toBeLessThanOrEqual(1000);
  });

  it('a receiver that keeps answering 429 still ends its events FAILED after maxAttempts: each real request spends one', async () => {
    const ids = await start(true);
    const rows = await waitFor(async () => {
      const r = await Promise.all(ids.map((id) => app!.store.getEvent(id)));
      return r.every((e) => e?.status === 'FAILED') ? r : null;
    }, 30_000, 'every event FAILED');
    const sent = requestsPer(limitedApi.received);
    for (const e of rows) {
      expect(e).toMatchObject({ failureReason: 'retries_exhausted', attemptCount: MAX_ATTEMPTS });
      expect(sent.get(e!.inboxId), e!.inboxId).toBe(MAX_ATTEMPTS);
    }
  });
});
