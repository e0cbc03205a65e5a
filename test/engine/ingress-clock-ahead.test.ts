import pino from 'pino';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { parseConfig } from '../../src/config/schema.js';
import { HandlerRegistry } from '../../src/engine/handlers.js';
import { startWorkers, type RunningWorkers } from '../../src/workers.js';
import { configDoc, startTestApp, type TestApp } from '../helpers/app.js';
import { FAST_WORKERS, waitFor } from '../helpers/engine.js';
import { sendStripeEvent } from '../helpers/events.js';
import { pgAvailable } from '../helpers/pg.js';

/**
 * `serve` without workers, beside `work` processes on other hosts (PostgreSQL). A new row's
 * next_attempt_at was its received_at, read from the receiving process's clock, which nothing
 * watches there (clock-skew.ts runs with the workers): a receiving host whose clock ran 10 minutes
 * ahead stored every event 10 minutes in the workers' future, and none was touched for 10
 * minutes (and the oldest-unprocessed gauge said 0 s, its age being negative). A new row is due
 * by the database's clock at the latest, the clock the workers' are watched against.
 */
describe.runIf(await pgAvailable())('events received by a process whose clock is ahead [postgres]', () => {
  let app: TestApp | undefined;
  let workers: RunningWorkers | undefined;
  afterEach(async () => {
    vi.useRealTimers();
    await workers?.stop();
    await app?.stop();
    app = workers = undefined;
  });

  it('are processed at once by workers whose clock is right', async () => {
    // The receiving process's wall clock, 10 minutes ahead (it runs on from where it is set).
    vi.useFakeTimers({ toFake: ['Date'], shouldAdvanceTime: true });
    vi.setSystemTime(Date.now() + 10 * 60_000);
    app = await startTestApp('postgres', { ...FAST_WORKERS }, {}, { workers: false });
    const res = await sendStripeEvent(app.url, 'evt_ingress_ahead');
    expect(res.status).toBe(200);
    const { inbox_id: inboxId } = res.json() as { inbox_id: string };

    // The workers run on another host, whose clock is right.
    vi.useRealTimers();
    const handled: string[] = [];
    const handlers = new HandlerRegistry().on('payment_intent.succeeded', async (event) => {
      handled.push(event.providerEventId);
    });
    workers = await startWorkers(parseConfig(configDoc(app.db.url, { ...FAST_WORKERS })), { handlers, logger: pino({ level: 'silent' }), migrate: false });
    await waitFor(() => handled.includes('evt_ingress_ahead'), 5_000, 'the event handled');
    expect((await app.store.getEvent(inboxId))?.status).toBe('PROCESSED');
  });
});
