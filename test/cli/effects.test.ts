import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { stringify } from 'yaml';
import { HandlerRegistry } from '../../src/engine/handlers.js';
import type { EffectRow } from '../../src/store/work-port.js';
import { configDoc, startTestApp, type TestApp } from '../helpers/app.js';
import { FAST_WORKERS, waitFor } from '../helpers/engine.js';
import { stripeEvent, stripeHeaders } from '../helpers/events.js';
import { post } from '../helpers/http.js';
import { runCli as cli } from '../helpers/server-process.js';
import { describeEachStore } from '../helpers/stores.js';

/** The customer detail each receipt effect carries: it must never reach the operator's terminal. */
const EMAIL = 'buyer-4711@example.com';
const RETRY = { baseMs: 10, capMs: 40, maxAttempts: 2 };

/**
 * `effects failed` / `effects retry` from the operator's side: a real engine (in this process)
 * whose mail executor throws while the mail service is "down", so its effects end FAILED
 * retries_exhausted; then the shipped CLI, in its own process, against the same database while
 * the engine keeps running. The tests run in order.
 */
describeEachStore('operator CLI: FAILED effects', (kind) => {
  let app: TestApp;
  let dir: string;
  let config: string;
  let mailDown = true;
  /** Idempotency key of every call the executors got, in order. */
  const receiptCalls: string[] = [];
  const welcomeCalls: string[] = [];
  /** event id → inbox id */
  const inbox = new Map<string, string>();
  const effectOf = async (eventId: string): Promise<EffectRow> => (await app.store.listEffects(inbox.get(eventId)!))[0]!;
  const calls = (eventId: string) => receiptCalls.filter((k) => k === `${inbox.get(eventId)}:send-receipt`).length;

  beforeAll(async () => {
    const handlers = new HandlerRegistry()
      .on('payment_intent.succeeded', (event, ctx) => ctx.effect('send-receipt', { to: EMAIL, event: event.providerEventId }))
      .on('customer.created', (event, ctx) => ctx.effect('welcome', { to: EMAIL }))
      .effect('send-receipt', (_data, { idempotencyKey }) => {
        receiptCalls.push(idempotencyKey);
        if (mailDown) throw new Error('mail service unavailable');
      })
      .effect('welcome', (_data, { idempotencyKey }) => void welcomeCalls.push(idempotencyKey));
    app = await startTestApp(kind, { ...FAST_WORKERS, retry: RETRY }, {}, { workers: true, handlers });
    for (const [eventId, type] of [['evt_a', 'payment_intent.succeeded'], ['evt_b', 'payment_intent.succeeded'], ['evt_c', 'payment_intent.succeeded'], ['evt_ok', 'customer.created']]) {
      const body = stripeEvent(eventId!, { type });
      const r = await post(`${app.url}/webhooks/stripe`, body, stripeHeaders(body));
      expect(r.status).toBe(200);
      inbox.set(eventId!, r.json().inbox_id);
      // One at a time, so "oldest first" has an order to show.
      await waitFor(async () => (await app.store.listEffects(inbox.get(eventId!)!)).length === 1, 10_000, `${eventId} effect recorded`);
    }
    await waitFor(async () => {
      for (const e of ['evt_a', 'evt_b', 'evt_c']) if ((await effectOf(e)).status !== 'FAILED') return false;
      return (await effectOf('evt_ok')).status === 'DONE';
    }, 15_000, 'receipts FAILED, welcome DONE');
    dir = mkdtempSync(join(tmpdir(), 'wi-effects-cli-'));
    config = join(dir, 'cli.yaml');
    writeFileSync(config, stringify(configDoc(app.db.url)));
  });

  afterAll(async () => {
    await app?.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  it('effects failed lists the FAILED effects oldest first, with key, attempts, reason and last error, never their data', async () => {
    const r = await cli(['effects', 'failed', '--config', config, '--json']);
    expect(r.code, r.err).toBe(0);
    const rows = r.out.trim().split('\n').map((l) => JSON.parse(l) as Record<string, unknown>);
    const expected = await Promise.all(['evt_a', 'evt_b', 'evt_c'].map(async (e) => {
      const effect = await effectOf(e);
      return {
      effect_id: effect.effectId, inbox_id: inbox.get(e), name: 'send-receipt', idempotency_key: `${inbox.get(e)}:send-receipt`,
      created_at: new Date(effect.createdAtMs).toISOString(), failed_at: new Date(effect.doneAtMs!).toISOString(), attempt_count: 2, failure_reason: 'retries_exhausted',
      last_error: expect.stringContaining('mail service unavailable'),
      };
    }));
    expect(rows).toEqual(expected);
    // It failed after its retry's backoff, so after it was recorded.
    for (const row of rows) expect(Date.parse(row.failed_at as string)).toBeGreaterThan(Date.parse(row.created_at as string));
    expect(r.out).not.toContain(EMAIL);

    const table = await cli(['effects', 'failed', '--config', config]);
    expect(table.code, table.err).toBe(0);
    const [header, ...lines] = table.out.trimEnd().split('\n');
    expect(header!.split(/\s+/)).toEqual(['effect_id', 'inbox_id', 'name', 'attempts', 'reason', 'created_at', 'failed_at', 'last_error']);
    expect(lines.map((l) => l.split(/\s+/)[6])).toEqual(expected.map((e) => e.failed_at));
    expect(lines.map((l) => l.split(/\s+/).slice(0, 5))).toEqual(expected.map((e) => [e.effect_id, e.inbox_id, 'send-receipt', '2', 'retries_exhausted']));
    expect(table.out).toContain('mail service unavailable');
    expect(table.out).not.toContain(EMAIL);
    expect(table.err).toBe('3 failed effect(s)\n');
    const limited = await cli(['effects', 'failed', '--config', config, '--limit', '1']);
    expect(limited.out.trimEnd().split('\n').slice(1).map((l) => l.split(/\s+/)[0])).toEqual([expected[0]!.effect_id]);
    expect(limited.err).toBe('1 failed effect(s) (the oldest 1: --limit for more)\n');
    // Exactly --limit of them: there are no more to ask for.
    const exact = await cli(['effects', 'failed', '--config', config, '--limit', '3']);
    expect(exact.err).toBe('3 failed effect(s)\n');
  });

  it('usage errors exit 2 and change nothing', async () => {
    const { effectId } = await effectOf('evt_a');
    const cases: [args: string[], message: string][] = [
      [['bogus'], 'unknown effects subcommand "bogus" (failed or retry)'],
      [['retry'], 'effects retry needs either --all or EFFECT_IDs'],
      [['retry', '--all', effectId], 'effects retry needs either --all or EFFECT_IDs'],
      [['retry', 'not-an-id'], '"not-an-id" is not an effect id'],
      [['retry', '--all', '--limit', '5'], '--limit is for effects failed'],
      [['retry', effectId, '--json'], '--json is for effects failed'],
      [['failed', '--all'], '--all is for effects retry'],
      [['failed', 'extra'], 'unexpected argument "extra"'],
      [['failed', '--limit', '0'], '--limit must be an integer from 1 to 1000'],
      [['failed', '--limit', '1001'], '--limit must be an integer from 1 to 1000'],
    ];
    const got = await Promise.all(cases.map(([args]) => cli(['effects', '--config', config, ...args])));
    cases.forEach(([args, message], i) => {
      expect(got[i]!.code, args.join(' ')).toBe(2);
      expect(got[i]!.err).toContain(message);
    });
    expect((await cli(['effects', '--config', config])).code).toBe(2); // no subcommand
    expect((await effectOf('evt_a')).status).toBe('FAILED');
  });

  it('effects retry of a DONE effect (or an unknown id) exits 1, says how many were not FAILED, and runs nothing again', async () => {
    const done = await effectOf('evt_ok');
    const r = await cli(['effects', 'retry', '--config', config, done.effectId, '00000000-0000-7000-8000-000000000000']);
    expect(r.code).toBe(1);
    expect(r.out.trim()).toBe('requeued 0 FAILED effect(s): due now, same idempotency keys');
    expect(r.err).toContain('2 of the 2 id(s) given were not FAILED effects');
    expect(await effectOf('evt_ok')).toMatchObject({ status: 'DONE', attemptCount: 1, doneAtMs: done.doneAtMs });
  });

  it('effects retry ID, once the cause is fixed: that effect runs again with the same idempotency key and ends DONE; the others stay FAILED', async () => {
    mailDown = false;
    const { effectId } = await effectOf('evt_a');
    const r = await cli(['effects', 'retry', '--config', config, effectId.toUpperCase()]);
    expect(r.code, r.err).toBe(0);
    expect(r.out.trim()).toBe('requeued 1 FAILED effect(s): due now, same idempotency keys');
    const a = await waitFor(async () => {
      const e = await effectOf('evt_a');
      return e.status === 'DONE' ? e : null;
    }, 10_000, 'evt_a effect DONE');
    // Two failed attempts and the one after the retry, all under the key the downstream dedups on.
    expect(calls('evt_a')).toBe(3);
    expect(a).toMatchObject({ attemptCount: 1, failureReason: null, idempotencyKey: `${inbox.get('evt_a')}:send-receipt` });
    expect([calls('evt_b'), calls('evt_c')]).toEqual([2, 2]);
    const left = await cli(['effects', 'failed', '--config', config, '--json']);
    expect(left.out.trim().split('\n').map((l) => JSON.parse(l).inbox_id)).toEqual([inbox.get('evt_b'), inbox.get('evt_c')]);
    // The DONE welcome effect of the earlier test never ran again.
    expect(welcomeCalls).toEqual([`${inbox.get('evt_ok')}:welcome`]);
  });

  it('effects retry --all requeues every FAILED effect; they run again and end DONE', async () => {
    const r = await cli(['effects', 'retry', '--config', config, '--all']);
    expect(r.code, r.err).toBe(0);
    expect(r.out.trim()).toBe('requeued 2 FAILED effect(s): due now, same idempotency keys');
    await waitFor(async () => (await effectOf('evt_b')).status === 'DONE' && (await effectOf('evt_c')).status === 'DONE', 10_000, 'evt_b, evt_c effects DONE');
    expect([calls('evt_a'), calls('evt_b'), calls('evt_c')]).toEqual([3, 3, 3]);
    const none = await cli(['effects', 'failed', '--config', config]);
    expect(none.err).toBe('0 failed effect(s)\n');
    const again = await cli(['effects', 'retry', '--config', config, '--all']);
    expect(again.code).toBe(0);
    expect(again.out.trim()).toBe('requeued 0 FAILED effect(s): due now, same idempotency keys');
    expect(welcomeCalls).toHaveLength(1);
  });
});
