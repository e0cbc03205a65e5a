import { afterEach, expect, it } from 'vitest';
import { HandlerRegistry } from '../../src/engine/handlers.js';
import { RetryableError } from '../../src/engine/failure.js';
import { startTestApp, type TestApp } from '../helpers/app.js';
import { FAST_WORKERS, waitFor } from '../helpers/engine.js';
import { post } from '../helpers/http.js';
import { stripeEvent, stripeHeaders } from '../helpers/events.js';
import { describeEachStore } from '../helpers/stores.js';

/**
 * What a backend team's handler and executor code can provoke in the effects outbox: a ledger
 * moved in ctx.tx, a receipt recorded with ctx.effect, an executor calling a mail service.
 */
describeEachStore('effects as handler code uses them', (kind) => {
  let app: TestApp | undefined;
  afterEach(async () => { await app?.stop(); app = undefined; });

  const send = async (eventId: string) => {
    const body = stripeEvent(eventId, { type: 'payment_intent.succeeded' });
    return (await post(`${app!.url}/webhooks/stripe`, body, stripeHeaders(body))).json().inbox_id as string;
  };

  it("an executor's RetryableError retryAfterMs (a 429's Retry-After) is honoured, within retry.capMs", async () => {
    const calls: number[] = [];
    const handlers = new HandlerRegistry()
      .on('payment_intent.succeeded', (_e, ctx) => ctx.effect('send-receipt', { n: 1 }))
      .effect('send-receipt', () => {
        calls.push(Date.now());
        throw new RetryableError('rate_limited', 'mail service: 429', { retryAfterMs: 30_000 });
      });
    app = await startTestApp(kind, { ...FAST_WORKERS, retry: { baseMs: 10, capMs: 60_000, maxAttempts: 5 } }, {}, { workers: true, handlers });
    const id = await send('evt_effect_retry_after');
    const [effect] = await waitFor(async () => {
      const es = await app!.store.listEffects(id);
      return es.length === 1 && es[0]!.status === 'PENDING' && es[0]!.attemptCount === 1 && es[0]!.lastError ? es : null;
    }, 10_000, 'first attempt settled');
    // The mail service asked for 30 s: not before then (before: the 10 ms backoff, and every
    // attempt spent within a second, FAILED retries_exhausted while the service still refused).
    expect(effect!.nextAttemptAtMs! - calls[0]!).toBeGreaterThanOrEqual(29_000);
    await new Promise((r) => setTimeout(r, 1000));
    expect(calls.length).toBe(1);
  });
  it('ctx.effect called after the handler returned (an un-awaited helper) throws to its caller, never vanishes', async () => {
    const seen: unknown[] = [];
    let lateCallDone!: () => void;
    const lateCall = new Promise<void>((r) => { lateCallDone = r; });
    // The handler's helper was not awaited: its ctx.effect comes after the event committed.
    const sendLater = async (ctx: { effect(name: string, data: unknown): void }) => {
      await new Promise((r) => setTimeout(r, 200));
      try {
        ctx.effect('send-receipt', { late: true });
      } finally {
        lateCallDone();
      }
    };
    const calls: unknown[] = [];
    const handlers = new HandlerRegistry()
      .on('payment_intent.succeeded', async (_e, ctx) => {
        await ctx.tx.query('SELECT 1');
        void sendLater(ctx).catch((err) => seen.push(err));
      })
      .effect('send-receipt', (data) => { calls.push(data); });
    app = await startTestApp(kind, { ...FAST_WORKERS }, {}, { workers: true, handlers });
    const id = await send('evt_effect_after_return');
    await waitFor(async () => (await app!.store.getEvent(id))?.status === 'PROCESSED', 10_000, 'PROCESSED');
    await lateCall;
    await new Promise((r) => setTimeout(r, 300));
    // Before: the call returned normally, nothing was recorded and nothing ran: a receipt lost silently.
    expect({ effects: (await app.store.listEffects(id)).length, calls: calls.length }).toEqual({ effects: 0, calls: 0 });
    expect(seen.map((e) => String((e as Error).message))).toEqual([expect.stringMatching(/handler (had )?finished|after the handler/)]);
  });
  it('ctx.effect with a name that is not a string (a JS handler) fails that handler at the call, as bad data does', async () => {
    const handlers = new HandlerRegistry()
      .on('payment_intent.succeeded', async (e, ctx) => {
        await ctx.tx.query('CREATE TABLE IF NOT EXISTS ledger (id TEXT PRIMARY KEY)');
        await ctx.tx.query(kind === 'postgres' ? 'INSERT INTO ledger VALUES ($1)' : 'INSERT INTO ledger VALUES (?)', [e.providerEventId]);
        // The signature mistaken for an options object: ctx.effect({ name, data }).
        (ctx.effect as (n: unknown, d?: unknown) => void)({ name: 'send-receipt', data: { pi: e.objectId } });
      })
      .effect('send-receipt', () => undefined);
    app = await startTestApp(kind, { ...FAST_WORKERS, retry: { baseMs: 10, capMs: 40, maxAttempts: 1 } }, {}, { workers: true, handlers });
    const id = await send('evt_effect_bad_name');
    const event = await waitFor(async () => {
      const e = await app!.store.getEvent(id);
      return e?.status === 'PROCESSED' || e?.status === 'FAILED' ? e : null;
    }, 15_000, 'terminal');
    // Before: PostgreSQL recorded an effect named '{"name":"send-receipt",…}' (FAILED
    // unsupported_effect, the event PROCESSED); SQLite's settle failed on binding it, every attempt
    // waited out its lease, and the event ended attempts_abandoned as if its worker had crashed.
    expect({ status: event.status, reason: event.failureReason, effects: (await app.store.listEffects(id)).length })
      .toEqual({ status: 'FAILED', reason: 'retries_exhausted', effects: 0 });
    expect(event.lastError).toMatch(/effect name must be a non-empty string/);
  });
});
