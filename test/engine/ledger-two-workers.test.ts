import pino from 'pino';
import { afterEach, expect, it } from 'vitest';
import { parseConfig } from '../../src/config/schema.js';
import { HandlerRegistry } from '../../src/engine/handlers.js';
import { NeedsDecisionError, RetryableError } from '../../src/engine/failure.js';
import { startWorkers, type RunningWorkers } from '../../src/workers.js';
import { configDoc, startTestApp, type TestApp } from '../helpers/app.js';
import { FAST_WORKERS, waitFor } from '../helpers/engine.js';
import { post } from '../helpers/http.js';
import { stripeEvent, stripeHeaders } from '../helpers/events.js';
import { describeEachStore } from '../helpers/stores.js';

/**
 * A backend team's ledger on the inbox database, two `work` processes (startWorkers) on it:
 * every event credits one account in ctx.tx and records a receipt effect. Handlers fail their
 * first attempt on some events, executors their first call on some keys, one event needs a
 * decision. Each credit is applied once, each receipt sent once with a stable key, and a
 * decided event's effect and credit never happen.
 */
describeEachStore('a ledger and its receipts under two workers, retries and failures', (kind) => {
  let app: TestApp | undefined;
  const workers: RunningWorkers[] = [];
  afterEach(async () => {
    for (const w of workers.splice(0)) await w.stop();
    await app?.stop();
    app = undefined;
  });

  it('credits once per event, sends each receipt once under one key, nothing for a decided event', async () => {
    const N = 40;
    const sent = new Map<string, number>();
    const failedOnce = new Set<string>();
    const p = (i: number) => (kind === 'postgres' ? `$${i}` : '?');
    const registry = () => new HandlerRegistry()
      .on('payment_intent.succeeded', async (e, ctx) => {
        await ctx.tx.query(`UPDATE accounts SET balance = balance + 100 WHERE id = ${p(1)}`, ['acct']);
        await ctx.tx.query(`INSERT INTO ledger (event_id) VALUES (${p(1)})`, [e.providerEventId]);
        ctx.effect('receipt', { event: e.providerEventId });
        const n = Number(e.providerEventId.split('_').pop());
        if (n === 7) throw new NeedsDecisionError('amount_mismatch', 'amount differs from the order');
        if (n % 5 === 0 && e.attempt === 1) throw new RetryableError('busy', 'ledger service busy');
      }, { name: 'ledger', version: '1' })
      .effect('receipt', (data, { idempotencyKey }) => {
        if (Number((data as { event: string }).event.split('_').pop()) % 3 === 0 && !failedOnce.has(idempotencyKey)) {
          failedOnce.add(idempotencyKey);
          throw new Error('mail service 502');
        }
        sent.set(idempotencyKey, (sent.get(idempotencyKey) ?? 0) + 1);
      });
    app = await startTestApp(kind, { ...FAST_WORKERS }, {}, { workers: false });
    // The team's own tables, made as their migration would.
    await app.store.transaction(async (tx) => {
      await tx.query('CREATE TABLE accounts (id TEXT PRIMARY KEY, balance INTEGER NOT NULL)');
      await tx.query('CREATE TABLE ledger (event_id TEXT NOT NULL)');
      await tx.query(`INSERT INTO accounts VALUES (${p(1)}, 0)`, ['acct']);
    });
    const ids: string[] = [];
    for (let i = 0; i < N; i++) {
      const body = stripeEvent(`evt_ledger_${i}`);
      ids.push((await post(`${app.url}/webhooks/stripe`, body, stripeHeaders(body))).json().inbox_id as string);
    }
    // A duplicate delivery of one of them: no new work.
    const dup = stripeEvent('evt_ledger_3');
    expect((await post(`${app.url}/webhooks/stripe`, dup, stripeHeaders(dup))).json().duplicate).toBe(true);
    const config = parseConfig(configDoc(app.db.url, { ...FAST_WORKERS, retry: { baseMs: 10, capMs: 40, maxAttempts: 4 } }), {});
    for (let i = 0; i < 2; i++) workers.push(await startWorkers(config, { handlers: registry(), logger: pino({ level: 'silent' }) }));
    const events = await waitFor(async () => {
      const es = await Promise.all(ids.map((id) => app!.store.getEvent(id)));
      return es.every((e) => e?.status === 'PROCESSED' || e?.status === 'FAILED') ? es : null;
    }, 30_000, 'every event terminal');
    await waitFor(async () => {
      const effects = (await Promise.all(ids.map((id) => app!.store.listEffects(id)))).flat();
      return effects.length === N - 1 && effects.every((e) => e.status === 'DONE') ? effects : null;
    }, 30_000, 'every effect DONE');
    const failed = events.filter((e) => e!.status === 'FAILED').map((e) => [e!.providerEventId, e!.failureReason]);
    expect(failed).toEqual([['evt_ledger_7', 'amount_mismatch']]);
    const [account] = await app.store.transaction((tx) => tx.query(`SELECT balance FROM accounts WHERE id = ${p(1)}`, ['acct']));
    const ledger = await app.store.transaction((tx) => tx.query('SELECT event_id FROM ledger'));
    expect(Number(account!.balance)).toBe((N - 1) * 100);
    expect(ledger.length).toBe(N - 1);
    expect(new Set(ledger.map((r) => r.event_id)).size).toBe(N - 1);
    expect(sent.size).toBe(N - 1);
    expect([...sent.values()].every((n) => n === 1)).toBe(true);
    expect([...sent.keys()].sort()).toEqual(ids.filter((_, i) => i !== 7).map((id) => `${id}:receipt`).sort());
  });
});
