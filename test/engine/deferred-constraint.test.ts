import pino from 'pino';
import { afterEach, describe, expect, it } from 'vitest';
import { parseConfig } from '../../src/config/schema.js';
import { HandlerRegistry } from '../../src/engine/handlers.js';
import type { InboxDetail } from '../../src/store/work-port.js';
import { startWorkers } from '../../src/workers.js';
import { configDoc, startTestApp, type TestApp } from '../helpers/app.js';
import { FAST_WORKERS, waitFor } from '../helpers/engine.js';
import { stripeEvent, stripeHeaders } from '../helpers/events.js';
import { post } from '../helpers/http.js';
import { pgAvailable } from '../helpers/pg.js';

/**
 * Double-entry bookkeeping checks its rules at COMMIT (a DEFERRABLE INITIALLY DEFERRED foreign
 * key, a deferred constraint trigger). A handler whose entries break one passes every statement;
 * the settle transaction fails at COMMIT, outside any handler. Its batch neighbours settle one at a
 * time, as they should; but the culprit's failure was only logged: each attempt waited out its
 * lease, and it ended FAILED attempts_abandoned ("its worker crashed…"), the constraint nowhere in
 * last_error. It is an attempt that failed: retried with backoff, then FAILED retries_exhausted
 * with the constraint's message.
 */
(await pgAvailable() ? describe : describe.skip)('a handler breaking a deferred constraint [postgres]', () => {
  let app: TestApp | undefined;
  afterEach(async () => { await app?.stop(); app = undefined; });

  it('fails its own event as an attempt, with the constraint in last_error; its neighbours are applied once', async () => {
    app = await startTestApp('postgres', { ...FAST_WORKERS }, {}, { workers: false });
    await app.store.transaction(async (tx) => {
      await tx.query('CREATE TABLE accounts (id text PRIMARY KEY)');
      await tx.query(`CREATE TABLE entries (event_id text NOT NULL, account_id text NOT NULL
        REFERENCES accounts (id) DEFERRABLE INITIALLY DEFERRED)`);
      await tx.query("INSERT INTO accounts VALUES ('acct')");
    });
    const ids = new Map<string, string>();
    for (const id of ['evt_ok_1', 'evt_bad', 'evt_ok_2']) {
      const body = stripeEvent(id);
      ids.set(id, (await post(`${app.url}/webhooks/stripe`, body, stripeHeaders(body))).json().inbox_id as string);
    }
    const handlers = new HandlerRegistry().on('payment_intent.succeeded', async (e, ctx) => {
      await ctx.tx.query('INSERT INTO entries VALUES ($1, $2)', [e.providerEventId, e.providerEventId === 'evt_bad' ? 'no_such_account' : 'acct']);
    });
    const config = parseConfig(configDoc(app.db.url, { ...FAST_WORKERS, workers: { ...FAST_WORKERS.workers, leaseMs: 5000 }, retry: { baseMs: 10, capMs: 40, maxAttempts: 2 } }));
    const started = Date.now();
    const workers = await startWorkers(config, { handlers, logger: pino({ level: 'silent' }), migrate: false });
    try {
      const final = (id: string) => waitFor(async () => {
        const e = await app!.store.getEvent(ids.get(id)!);
        return e?.status === 'PROCESSED' || e?.status === 'FAILED' ? e : null;
      }, 30_000, `${id} terminal`) as Promise<InboxDetail>;
      for (const id of ['evt_ok_1', 'evt_ok_2']) expect(await final(id), id).toMatchObject({ status: 'PROCESSED' });
      const bad = await final('evt_bad');
      expect({ status: bad.status, reason: bad.failureReason }).toEqual({ status: 'FAILED', reason: 'retries_exhausted' });
      expect(bad.lastError).toMatch(/violates foreign key constraint "entries_account_id_fkey"/);
      expect(bad.lastError).not.toContain('no_such_account');
      // Not a lease per attempt (5 s each).
      expect(Date.now() - started).toBeLessThan(5000);
    } finally {
      await workers.stop();
    }
    const rows = await app.store.transaction((tx) => tx.query('SELECT event_id FROM entries ORDER BY event_id'));
    expect(rows.map((r) => r.event_id)).toEqual(['evt_ok_1', 'evt_ok_2']);
  });
});
