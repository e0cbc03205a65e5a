import pino from 'pino';
import { afterEach, expect, it } from 'vitest';
import { parseConfig } from '../../src/config/schema.js';
import { HandlerRegistry } from '../../src/engine/handlers.js';
import { NeedsDecisionError, RetryableError } from '../../src/engine/failure.js';
import { startWorkers } from '../../src/workers.js';
import { configDoc, startTestApp, type TestApp } from '../helpers/app.js';
import { FAST_WORKERS, waitFor } from '../helpers/engine.js';
import { post } from '../helpers/http.js';
import { stripeEvent, stripeHeaders } from '../helpers/events.js';
import { describeEachStore } from '../helpers/stores.js';

/**
 * One effect per name per event (its idempotency key is <inbox_id>:<name>). Two handlers of one
 * event that recorded the same name: the second's effect was skipped as a repeated key, its
 * handler's work committed and the event PROCESSED, and its effect never executed, silently.
 */
describeEachStore('two handlers of one event recording the same effect name', (kind) => {
  let app: TestApp | undefined;
  afterEach(async () => { await app?.stop(); app = undefined; });

  const run = async (handlers: HandlerRegistry) => {
    app = await startTestApp(kind, { ...FAST_WORKERS }, {}, { workers: true, handlers });
    const body = stripeEvent('evt_dup_effect', { type: 'payment_intent.succeeded' });
    const id = (await post(`${app.url}/webhooks/stripe`, body, stripeHeaders(body))).json().inbox_id as string;
    const event = await waitFor(async () => {
      const e = await app!.store.getEvent(id);
      return e?.status === 'PROCESSED' || e?.status === 'FAILED' ? e : null;
    }, 10_000, 'terminal');
    await waitFor(async () => (await app!.store.listEffects(id)).every((e) => e.status === 'DONE') || null, 5000, 'effects DONE');
    return { id, event, effects: await app.store.listEffects(id) };
  };

  it('in the same attempt: the second handler fails at the call (effect_name_taken), nothing is dropped silently', async () => {
    const calls: unknown[] = [];
    const handlers = new HandlerRegistry()
      .on('payment_intent.succeeded', (_e, ctx) => ctx.effect('notify', { by: 'a' }), { name: 'a', version: '1' })
      .on('payment_intent.succeeded', (_e, ctx) => ctx.effect('notify', { by: 'b' }), { name: 'b', version: '1' })
      .effect('notify', (data) => { calls.push(data); });
    const { event, effects } = await run(handlers);
    expect({ status: event.status, reason: event.failureReason, effects: effects.length, calls })
      .toEqual({ status: 'FAILED', reason: 'effect_name_taken', effects: 1, calls: [{ by: 'a' }] });
  });

  it('in a later attempt (the first handler committed it before): the same', async () => {
    const calls: unknown[] = [];
    const handlers = new HandlerRegistry()
      .on('payment_intent.succeeded', (_e, ctx) => ctx.effect('notify', { by: 'a' }), { name: 'a', version: '1' })
      .on('payment_intent.succeeded', (e, ctx) => {
        if (e.attempt === 1) throw new RetryableError('busy', 'not yet');
        ctx.effect('notify', { by: 'b' });
      }, { name: 'b', version: '1' })
      .effect('notify', (data) => { calls.push(data); });
    const { event, effects } = await run(handlers);
    expect({ status: event.status, reason: event.failureReason, attempt: event.attemptCount, effects: effects.length, calls })
      .toEqual({ status: 'FAILED', reason: 'effect_name_taken', attempt: 2, effects: 1, calls: [{ by: 'a' }] });
  });

  /**
   * An earlier attempt's effects were read only where one of the event's handlers, by its name
   * now, was done. A handler renamed since (its marker under the old name) left that at none, so
   * the name its old self had recorded looked free: another handler recording it was skipped as a
   * repeated key, the event PROCESSED, that effect never executed, silently.
   */
  it('in a later attempt, the handler that recorded it renamed since: the same', async () => {
    const calls: unknown[] = [];
    const notify = (data: unknown) => { calls.push(data); };
    app = await startTestApp(kind, { ...FAST_WORKERS }, {}, { workers: false });
    const body = stripeEvent('evt_dup_effect_renamed', { type: 'payment_intent.succeeded' });
    const id = (await post(`${app.url}/webhooks/stripe`, body, stripeHeaders(body))).json().inbox_id as string;
    const terminal = () => waitFor(async () => {
      const e = await app!.store.getEvent(id);
      return e?.status === 'PROCESSED' || e?.status === 'FAILED' ? e : null;
    }, 10_000, 'terminal');
    const work = async (handlers: HandlerRegistry) => {
      const workers = await startWorkers(parseConfig(configDoc(app!.db.url, { ...FAST_WORKERS })), { handlers, logger: pino({ level: 'silent' }), migrate: false });
      try {
        const event = await terminal();
        await waitFor(async () => (await app!.store.listEffects(id)).every((e) => e.status === 'DONE') || null, 5000, 'effects DONE');
        return event;
      } finally {
        await workers.stop();
      }
    };
    // First: a records "notify"; b is not ready (FAILED, for an operator's retry).
    const first = await work(new HandlerRegistry()
      .on('payment_intent.succeeded', (_e, ctx) => ctx.effect('notify', { by: 'a' }), { name: 'a' })
      .on('payment_intent.succeeded', () => { throw new NeedsDecisionError('not_yet', 'not yet'); }, { name: 'b' })
      .effect('notify', notify));
    expect(first.failureReason).toBe('not_yet');
    expect(await app.store.retryFailed(id, Date.now())).toBe('requeued');
    // Then a deploy renamed a (to a2, recording nothing now), and b records "notify".
    const event = await work(new HandlerRegistry()
      .on('payment_intent.succeeded', () => undefined, { name: 'a2' })
      .on('payment_intent.succeeded', (_e, ctx) => ctx.effect('notify', { by: 'b' }), { name: 'b' })
      .effect('notify', notify));
    const effects = await app.store.listEffects(id);
    expect({ status: event.status, reason: event.failureReason, effects: effects.length, calls })
      .toEqual({ status: 'FAILED', reason: 'effect_name_taken', effects: 1, calls: [{ by: 'a' }] });
  });
});
