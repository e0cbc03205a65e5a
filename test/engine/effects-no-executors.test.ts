import pino from 'pino';
import { afterEach, expect, it } from 'vitest';
import { startApp, type RunningApp } from '../../src/app.js';
import { parseConfig } from '../../src/config/schema.js';
import { RetryableError } from '../../src/engine/failure.js';
import { HandlerRegistry } from '../../src/engine/handlers.js';
import { configDoc } from '../helpers/app.js';
import { FAST_WORKERS, waitFor } from '../helpers/engine.js';
import { stripeEvent, stripeHeaders } from '../helpers/events.js';
import { post } from '../helpers/http.js';
import { describeEachStore, freshDatabase, type TestDatabase } from '../helpers/stores.js';

/**
 * Scaled apart: a `serve` without --handlers (workers on, the default) beside a `work --handlers`
 * whose handler records an effect. serve records no effect and can run none, so every effect it
 * claimed ended FAILED unsupported_effect, its executor never called. It claims none now; the
 * process with the executor runs them.
 */
describeEachStore('a process with no handlers and no effect executors', (kind) => {
  let db: TestDatabase | undefined;
  const apps: RunningApp[] = [];
  afterEach(async () => {
    for (const a of apps.splice(0).reverse()) await a.close();
    await db?.cleanup();
    db = undefined;
  });

  const start = async (handlers?: HandlerRegistry) => {
    const config = parseConfig(configDoc(db!.url, { ...FAST_WORKERS, retry: { baseMs: 10, capMs: 1000, maxAttempts: 5 } }), {});
    const app = await startApp(config, { logger: pino({ level: 'silent' }), shutdownGraceMs: 500, workers: true, handlers });
    apps.push(app);
    return app;
  };

  it('claims no effect: one another process recorded waits for a process that has its executor', async () => {
    db = await freshDatabase(kind);
    const calls: string[] = [];
    // The first process records the effect; its executor asks to be called again in 600 ms (the
    // runner honours that, within retry.capMs), and the process stops before then: the effect is
    // PENDING, due once the next process has run a while, and nobody there can run it.
    const recording = new HandlerRegistry()
      .on('payment_intent.succeeded', (_e, ctx) => ctx.effect('notify', { n: 1 }), { name: 'notify-customer', version: '1' })
      .effect('notify', () => {
        calls.push('first');
        throw new RetryableError('busy', 'later', { retryAfterMs: 600 });
      });
    const first = await start(recording);
    const body = stripeEvent('evt_effect_elsewhere', { type: 'payment_intent.succeeded' });
    const id = (await post(`${first.url}/webhooks/stripe`, body, stripeHeaders(body))).json().inbox_id as string;
    await waitFor(async () => calls.length > 0 || null, 10_000, 'the first executor call');
    await first.close();
    apps.splice(apps.indexOf(first), 1);

    await start(); // serve without --handlers: workers on
    await new Promise((r) => setTimeout(r, 1500)); // many polls past the effect's due time
    const [effect] = await effects();
    expect({ status: effect!.status, reason: effect!.failureReason ?? null }).toEqual({ status: 'PENDING', reason: null });

    // A process with the executor runs it.
    await start(new HandlerRegistry().effect('notify', () => void calls.push('second')));
    await waitFor(async () => (await effects()).every((e) => e.status === 'DONE') || null, 10_000, 'effect DONE');
    expect(calls).toEqual(['first', 'second']);

    function effects() {
      return apps[0]!.store.listEffects(id);
    }
  });
});
