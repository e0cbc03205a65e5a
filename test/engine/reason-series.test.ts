import { afterEach, expect, it } from 'vitest';
import { HandlerRegistry } from '../../src/engine/handlers.js';
import { NeedsDecisionError } from '../../src/engine/failure.js';
import { MAX_REASON_SERIES, OTHER_REASONS } from '../../src/metrics/engine.js';
import { startTestApp, type TestApp } from '../helpers/app.js';
import { FAST_WORKERS, waitFor } from '../helpers/engine.js';
import { stripeEvent, stripeHeaders } from '../helpers/events.js';
import { post } from '../helpers/http.js';

let app: TestApp | undefined;
afterEach(async () => {
  await app?.stop();
  app = undefined;
});

const EVENTS = MAX_REASON_SERIES + 20;

/**
 * A failure reason is the thrower's text: a handler writing the event's own id into it made a
 * metrics series per event, kept for the process's life (the scrape grew with every event).
 */
it('failure reasons past MAX_REASON_SERIES count under one (other) series; the rows keep each reason', async () => {
  const handlers = new HandlerRegistry().on('payment_intent.succeeded', (event) => {
    throw new NeedsDecisionError(`no order for ${event.providerEventId}`, 'unknown order');
  });
  app = await startTestApp('sqlite', { ...FAST_WORKERS }, {}, { workers: true, handlers });
  const ids: string[] = [];
  for (let i = 0; i < EVENTS; i += 20) {
    ids.push(...await Promise.all(Array.from({ length: 20 }, async (_, j) => {
      const body = stripeEvent(`evt_reason_${i + j}`);
      const r = await post(`${app!.url}/webhooks/stripe`, body, stripeHeaders(body));
      expect(r.status).toBe(200);
      return r.json().inbox_id as string;
    })));
  }
  await waitFor(async () => {
    for (const id of ids) if ((await app!.store.getEvent(id))?.status !== 'FAILED') return false;
    return true;
  }, 30_000, 'every event FAILED');
  const text = (await post(`${app.url}/metrics`, '', {}, 'GET')).text;
  const failed = text.split('\n').filter((l) => l.startsWith('webhook_worker_attempts_total{') && l.includes('result="failed"'));
  expect(failed).toHaveLength(MAX_REASON_SERIES + 1);
  const other = failed.find((l) => l.includes(`reason="${OTHER_REASONS}"`));
  expect(Number(other?.split(' ').pop())).toBe(EVENTS - MAX_REASON_SERIES);
  expect(failed.reduce((n, l) => n + Number(l.split(' ').pop()), 0)).toBe(EVENTS);
  expect((await app.store.getEvent(ids[EVENTS - 1]!))?.failureReason).toBe(`no order for evt_reason_${EVENTS - 1}`);
}, 60_000);
