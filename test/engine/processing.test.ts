import { createServer, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import pino from 'pino';
import { Webhook } from 'standardwebhooks';
import { afterEach, expect, it } from 'vitest';
import { parseConfig } from '../../src/config/schema.js';
import { startWorkers } from '../../src/workers.js';
import { chunkByHandlers } from '../../src/engine/inbox-worker.js';
import { HandlerRegistry } from '../../src/engine/handlers.js';
import { NeedsDecisionError, RetryableError } from '../../src/engine/failure.js';
import { REQUEUE_CLASSES } from '../../src/cli/events.js';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { configDoc, PAYLOAD_KEY, startTestApp, STRIPE_SECRET, type TestApp } from '../helpers/app.js';
import { DestinationServer, FAST_WORKERS, FORWARD_SECRET, scrapeMetrics, waitFor } from '../helpers/engine.js';
import { stripeEvent, stripeHeaders } from '../helpers/events.js';
import { post } from '../helpers/http.js';
import { describeEachStore } from '../helpers/stores.js';

const endpoint = (over: Record<string, unknown> = {}) => ({ id: 'stripe', provider: 'stripe', secrets: [{ version: 'v1', value: STRIPE_SECRET }], ...over });

describeEachStore('processing engine', (kind) => {
  let app: TestApp | undefined;
  const dest = new DestinationServer();
  afterEach(async () => {
    await app?.stop();
    app = undefined;
    await dest.stop();
    dest.received.length = 0;
    dest.status = () => 200;
    dest.headers = () => ({});
  });

  const send = (id: string, type = 'payment_intent.succeeded', extra = '') => {
    const body = stripeEvent(id, { type, size: 600 + extra.length });
    const withMarker = extra ? Buffer.from(body.toString().replace('"pad":"', `"pad":"${extra}`)) : body;
    return post(`${app!.url}/webhooks/stripe`, withMarker, stripeHeaders(withMarker));
  };
  const sql = (pg: string) => (kind === 'postgres' ? pg : pg.replace(/\$\d+/g, '?'));
  const userTable = async () => {
    await app!.store.transaction(async (tx) => {
      await tx.query('CREATE TABLE paid_orders (event_id TEXT PRIMARY KEY, amount INTEGER NOT NULL)');
    });
  };
  const countPaid = async () => {
    const rows = await app!.store.transaction((tx) => tx.query<{ n: number | string }>('SELECT count(*) AS n FROM paid_orders'));
    return Number(rows[0]!.n);
  };

  it('300 concurrent copies of one event: one inbox row, one handler mutation, one forward', async () => {
    await dest.start();
    let handlerRuns = 0;
    let seen: { payloadId?: string; rawLength?: number } = {};
    const handlers = new HandlerRegistry().on('payment_intent.*', async (event, ctx) => {
      handlerRuns++;
      seen = { payloadId: (event.payload as { id: string }).id, rawLength: event.raw.length };
      await ctx.tx.query(sql('INSERT INTO paid_orders (event_id, amount) VALUES ($1, $2)'), [event.providerEventId, 2000]);
    }, { version: '7', name: 'mark-paid' });
    app = await startTestApp(kind, {
      ...FAST_WORKERS,
      destinations: [{ id: 'orders-api', type: 'http', url: dest.url, secret: FORWARD_SECRET, timeoutMs: 2000 }],
      endpoints: [endpoint({ routes: [{ events: ['payment_intent.*'], destination: 'orders-api' }] })],
    }, {}, { workers: true, handlers });
    await userTable();

    const answers = await Promise.all(Array.from({ length: 300 }, () => send('evt_dup_storm')));
    expect(answers.every((a) => a.status === 200)).toBe(true);
    const inboxIds = new Set(answers.map((a) => a.json().inbox_id as string));
    expect(inboxIds.size).toBe(1);
    const [inboxId] = [...inboxIds];

    const done = await waitFor(async () => {
      const e = await app!.store.getEvent(inboxId!);
      return e?.status === 'PROCESSED' ? e : null;
    }, 10_000, 'PROCESSED');
    expect(done.handlerVersion).toBe('mark-paid@7');
    expect(done.processedAtMs).toBeGreaterThanOrEqual(done.receivedAtMs);
    expect((await app.store.countRows()).inbox).toBe(1);
    expect(await countPaid()).toBe(1);
    expect(handlerRuns).toBe(1);
    expect(seen).toEqual({ payloadId: 'evt_dup_storm', rawLength: stripeEvent('evt_dup_storm', { type: 'payment_intent.succeeded', size: 600 }).length });
    expect(dest.received).toHaveLength(1);
    expect(dest.received[0]).toMatchObject({ idempotencyKey: inboxId, verified: true });
    expect(dest.received[0]!.body.equals(stripeEvent('evt_dup_storm', { type: 'payment_intent.succeeded', size: 600 }))).toBe(true);
  });

  it('destination down: ingress keeps answering 200, the backlog and its oldest age grow; back up: it drains to PROCESSED', async () => {
    await dest.start();
    const port = dest.port;
    await dest.stop(); // the port is now closed: every forward fails with a connection error
    app = await startTestApp(kind, {
      workers: { pollMs: 50, leaseMs: 2000 },
      retry: { baseMs: 20, capMs: 200, maxAttempts: 1000 },
      destinations: [{ id: 'orders-api', type: 'http', url: `http://127.0.0.1:${port}/hooks`, secret: FORWARD_SECRET, timeoutMs: 1000 }],
      endpoints: [endpoint({ routes: [{ events: ['*'], destination: 'orders-api' }] })],
    }, {}, { workers: true });

    const ids: string[] = [];
    for (let i = 0; i < 20; i++) {
      const r = await send(`evt_outage_${i}`);
      expect(r.status).toBe(200);
      ids.push(r.json().inbox_id);
    }
    // One scrape, many readings: values from two scrapes would mix two moments.
    const scrape = async () => {
      const text = await (await fetch(`${app!.url}/metrics`)).text();
      return (name: string, label = '') => {
        const line = text.split('\n').find((l) => l.startsWith(name) && l.includes(label));
        return line ? Number(line.split(' ').pop()) : NaN;
      };
    };
    const gauge = async (name: string, label = '') => (await scrape())(name, label);
    const age1 = await gauge('webhook_inbox_oldest_unprocessed_age_seconds', 'type="payment_intent.succeeded"');
    await new Promise((r) => setTimeout(r, 400));
    const age2 = await gauge('webhook_inbox_oldest_unprocessed_age_seconds', 'type="payment_intent.succeeded"');
    expect(age2).toBeGreaterThan(age1);
    const during = await scrape();
    expect(during('webhook_inbox_rows', 'status="PENDING"') + during('webhook_inbox_rows', 'status="PROCESSING"')).toBe(20);
    const retried = await waitFor(() => app!.store.getEvent(ids[0]!).then((e) => (e && e.attemptCount >= 2 ? e : null)), 5000, 'a retry');
    expect(retried.lastError).toMatch(/connection/i);

    await dest.start(port);
    await waitFor(async () => (await app!.store.listEvents({ status: 'PROCESSED', limit: 100 })).length === 20, 15_000, 'drain');
    expect(dest.keys()).toEqual(new Set(ids));
    expect(await gauge('webhook_inbox_rows', 'status="PENDING"')).toBe(0);
    expect(await gauge('webhook_worker_attempts_total', 'result="success"')).toBe(20);
    expect(await gauge('webhook_inbox_oldest_unprocessed_age_seconds')).toBeNaN(); // no unprocessed group left
  });

  it('a poison event (technical error every time) is FAILED after maxAttempts with a bounded diagnostic and no body', async () => {
    const handlers = new HandlerRegistry().on('payment_intent.succeeded', () => {
      throw new Error('ledger service timed out');
    });
    app = await startTestApp(kind, { ...FAST_WORKERS }, {}, { workers: true, handlers });
    const r = await send('evt_poison', 'payment_intent.succeeded', 'BODY_MARKER_42');
    const failed = await waitFor(() => app!.store.getEvent(r.json().inbox_id).then((e) => (e?.status === 'FAILED' ? e : null)), 10_000, 'FAILED');
    expect(failed).toMatchObject({ failureReason: 'retries_exhausted', attemptCount: 3 });
    expect(failed.lastError).toBe('Error: ledger service timed out');
    expect(failed.lastError).not.toContain('BODY_MARKER_42');
    expect(app.engine.metrics.attempts.get(['retry', 'error'])).toBe(2);
    expect(app.engine.metrics.attempts.get(['failed', 'retries_exhausted'])).toBe(1);
  });

  it('errors that quote the data they refused keep it out of last_error: a body field in a PostgreSQL data exception, in a failed JSON.parse', async () => {
    const MARKER = 'CARD 4242 4242 4242 4242';
    const handlers = new HandlerRegistry().on('payment_intent.succeeded', async (event, ctx) => {
      const pad = (event.payload as { pad: string }).pad; // the body field holding the marker
      if (event.providerEventId === 'evt_echo_sql' && kind === 'postgres') await ctx.tx.query('SELECT $1::int AS n', [pad]);
      JSON.parse(pad);
    });
    app = await startTestApp(kind, { ...FAST_WORKERS }, {}, { workers: true, handlers });
    const ids = ['evt_echo_sql', 'evt_echo_json'];
    const inboxIds = await Promise.all(ids.map(async (id) => (await send(id, 'payment_intent.succeeded', MARKER)).json().inbox_id as string));
    const tried = await Promise.all(inboxIds.map((inboxId) => waitFor(() => app!.store.getEvent(inboxId).then((e) => (e?.lastError ? e : null)), 10_000, 'a failed attempt')));
    for (const e of tried) {
      expect(e.lastError).not.toContain('4242');
      expect(e.lastError).not.toContain('CARD');
    }
    // What went wrong is still said: the error, its code or position, without the value.
    expect(tried[1]!.lastError).toBe('SyntaxError: Unexpected token \'C\', "…" is not valid JSON');
    if (kind === 'postgres') expect(tried[0]!.lastError).toBe('error [22P02]: invalid input syntax for type integer: "…"');
  });

  it("a handler's retry is counted under its own reason (a typed error, a timeout), not as a bare \"error\"", async () => {
    const handlers = new HandlerRegistry().on('payment_intent.succeeded', () => {
      throw new RetryableError('ledger_busy', 'ledger is busy');
    });
    app = await startTestApp(kind, { ...FAST_WORKERS }, {}, { workers: true, handlers });
    const r = await send('evt_typed_retry');
    await waitFor(() => app!.store.getEvent(r.json().inbox_id).then((e) => (e?.status === 'FAILED' ? e : null)), 10_000, 'FAILED');
    expect(app.engine.metrics.attempts.get(['retry', 'ledger_busy'])).toBe(2);
    expect(app.engine.metrics.attempts.get(['retry', 'error']) ?? 0).toBe(0);
  });

  it('a needs-decision error is FAILED at once with its reason; an unknown type is FAILED as unsupported_type', async () => {
    const handlers = new HandlerRegistry().on('charge.refunded', () => {
      throw new NeedsDecisionError('amount_mismatch', 'refund 2000 exceeds captured 1500');
    });
    app = await startTestApp(kind, { ...FAST_WORKERS }, {}, { workers: true, handlers });
    const a = (await send('evt_decide', 'charge.refunded')).json().inbox_id;
    const b = (await send('evt_unknown', 'customer.created')).json().inbox_id;
    const fa = await waitFor(() => app!.store.getEvent(a).then((e) => (e?.status === 'FAILED' ? e : null)), 5000, 'FAILED a');
    const fb = await waitFor(() => app!.store.getEvent(b).then((e) => (e?.status === 'FAILED' ? e : null)), 5000, 'FAILED b');
    expect(fa).toMatchObject({ failureReason: 'amount_mismatch', attemptCount: 1 });
    expect(fa.lastError).toContain('refund 2000 exceeds captured 1500');
    expect(fb).toMatchObject({ failureReason: 'unsupported_type', attemptCount: 1 });
  });

  it('effects run after the commit with the stable key <inbox_id>:<name>, retried until DONE', async () => {
    const calls: { key: string; data: unknown; attempt: number }[] = [];
    const handlers = new HandlerRegistry()
      .on('payment_intent.succeeded', (event, ctx) => ctx.effect('send-receipt', { to: 'buyer@example.com', event: event.providerEventId }))
      .effect('send-receipt', (data, ctx) => {
        calls.push({ key: ctx.idempotencyKey, data, attempt: ctx.attempt });
        if (calls.length === 1) throw new Error('smtp 421 try later');
      });
    app = await startTestApp(kind, { ...FAST_WORKERS }, {}, { workers: true, handlers });
    const id = (await send('evt_effect')).json().inbox_id;
    await waitFor(async () => (await app!.store.listEffects(id))[0]?.status === 'DONE', 5000, 'effect DONE');
    expect(calls.map((c) => c.key)).toEqual([`${id}:send-receipt`, `${id}:send-receipt`]);
    expect(calls[1]).toMatchObject({ data: { to: 'buyer@example.com', event: 'evt_effect' }, attempt: 2 });
    expect((await app.store.getEvent(id))?.status).toBe('PROCESSED');
  });

  it('at most workers.effectsConcurrency effects execute at once; all of them reach DONE', async () => {
    let running = 0;
    let most = 0;
    const handlers = new HandlerRegistry()
      .on('payment_intent.succeeded', (event, ctx) => ctx.effect('notify', { event: event.providerEventId }))
      .effect('notify', async () => {
        most = Math.max(most, ++running);
        await new Promise((r) => setTimeout(r, 30));
        running--;
      });
    app = await startTestApp(kind, { ...FAST_WORKERS, workers: { ...FAST_WORKERS.workers, effectsConcurrency: 3 } }, {}, { workers: true, handlers });
    const ids = await Promise.all(Array.from({ length: 20 }, async (_, i) => (await send(`evt_fx_${i}`)).json().inbox_id as string));
    await waitFor(async () => {
      const all = await Promise.all(ids.map((id) => app!.store.listEffects(id)));
      return all.every((e) => e[0]?.status === 'DONE');
    }, 10_000, 'every effect DONE');
    expect(most).toBe(3);
  });

  /** Tries that failed with `reason` and were retried, as the app's engine counted them. */
  const retries = async (reason: string) => (await scrapeMetrics(app!.url))('webhook_worker_attempts_total', `result="retry",reason="${reason}"`);

  it('a destination whose secret is missing does not stop ingress: /readyz names it, its events wait and retry without spending attempts', async () => {
    app = await startTestApp(kind, {
      ...FAST_WORKERS,
      retry: { baseMs: 10, capMs: 40, maxAttempts: 1000 },
      destinations: [{ id: 'orders-api', type: 'http', url: 'http://127.0.0.1:9/hooks', secret: '${env:MISSING_FWD_SECRET}' }],
      endpoints: [endpoint({ routes: [{ events: ['*'], destination: 'orders-api' }] })],
    }, {}, { workers: true });
    const r = await send('evt_no_secret');
    expect(r.status).toBe(200);
    const ready = await fetch(`${app.url}/readyz`);
    expect(ready.status).toBe(503);
    expect(JSON.stringify(await ready.json())).toContain('destinations[0].secret');
    await waitFor(async () => (await retries('destination_unavailable')) >= 3, 5000, 'three tries');
    const waiting = (await app.store.getEvent(r.json().inbox_id))!;
    expect(waiting.status).not.toBe('FAILED');
    expect(waiting.attemptCount).toBeLessThanOrEqual(1); // 1 while a try holds it
    expect(waiting.lastError).toContain('destination_unavailable');
  });

  it('a destination secret that loads late, or is rotated, signs the next forward once the secrets are re-read (SIGHUP, the 10 s retry)', async () => {
    await dest.start();
    const env: NodeJS.ProcessEnv = {};
    app = await startTestApp(kind, {
      ...FAST_WORKERS,
      retry: { baseMs: 10, capMs: 40, maxAttempts: 1000 },
      destinations: [{ id: 'orders-api', type: 'http', url: dest.url, secret: '${env:FWD_SECRET}' }],
      endpoints: [endpoint({ routes: [{ events: ['*'], destination: 'orders-api' }] })],
    }, env, { workers: true });
    const first = (await send('evt_late_secret')).json().inbox_id as string;
    await waitFor(async () => (await retries('destination_unavailable')) >= 2, 5000, 'a retry');
    expect((await app.store.getEvent(first))!.lastError).toContain('destination_unavailable');
    expect(dest.received).toHaveLength(0);

    // The secret is mounted; `serve` re-reads on SIGHUP (and every 10 s while one is missing).
    env.FWD_SECRET = FORWARD_SECRET;
    app.keyring.reload();
    await waitFor(() => dest.received.some((r) => r.idempotencyKey === first), 5000, 'the forward once the secret loaded');
    expect(dest.received.find((r) => r.idempotencyKey === first)!.verified).toBe(true);

    // Rotated: the next forward is signed with the new key only.
    const rotated = `whsec_${Buffer.from('another-forward-secret-32-bytes!').toString('base64')}`;
    env.FWD_SECRET = rotated;
    app.keyring.reload();
    const second = (await send('evt_rotated_secret')).json().inbox_id as string;
    const got = await waitFor(() => dest.received.find((r) => r.idempotencyKey === second), 5000, 'the forward after the rotation');
    expect(got.verified).toBe(false);
    expect(() => new Webhook(rotated).verify(got.body.toString('utf8'), got.headers as Record<string, string>)).not.toThrow();
  });

  it('a handler whose transaction fails leaves no partial mutation and is retried', async () => {
    let runs = 0;
    const handlers = new HandlerRegistry().on('payment_intent.succeeded', async (event, ctx) => {
      runs++;
      await ctx.tx.query(sql('INSERT INTO paid_orders (event_id, amount) VALUES ($1, $2)'), [event.providerEventId, 1]);
      if (runs === 1) throw new Error('crash after the first write');
    });
    app = await startTestApp(kind, { ...FAST_WORKERS }, {}, { workers: true, handlers });
    await userTable();
    const id = (await send('evt_partial')).json().inbox_id;
    await waitFor(() => app!.store.getEvent(id).then((e) => e?.status === 'PROCESSED'), 5000, 'PROCESSED');
    expect(runs).toBe(2);
    expect(await countPaid()).toBe(1);
  });

  it('a handler in a separate work process that holds its transaction for 3 s: accepts in serve meanwhile wait and are answered 200 (SQLite: they got 503 past a 2 s busy timeout)', async () => {
    app = await startTestApp(kind, { ...FAST_WORKERS }, {}, { workers: false });
    let inHandler!: () => void;
    const handlerQueried = new Promise<void>((r) => (inHandler = r));
    const handlers = new HandlerRegistry().on('payment_intent.succeeded', async (event, ctx) => {
      if (event.providerEventId !== 'evt_slow_holder') return;
      await ctx.tx.query('SELECT 1 AS x'); // the transaction (SQLite: the write lock) is now held
      inHandler();
      await new Promise((r) => setTimeout(r, 3000));
    });
    // A lease longer than the handler: its heartbeat waits for the transaction the handler holds.
    const config = parseConfig(configDoc(app.db.url, { ...FAST_WORKERS, workers: { ...FAST_WORKERS.workers, leaseMs: 10_000 }, endpoints: [endpoint()] }));
    const workers = await startWorkers(config, { handlers, logger: pino({ level: 'silent' }), migrate: false });
    try {
      const holder = (await send('evt_slow_holder')).json().inbox_id as string;
      await handlerQueried;
      const started = performance.now();
      const during = await Promise.all([send('evt_during_1'), send('evt_during_2')]);
      expect(during.map((r) => r.status), during.map((r) => r.text).join(' ')).toEqual([200, 200]);
      if (kind === 'sqlite') expect(performance.now() - started).toBeGreaterThan(1000); // they did wait for the lock
      await waitFor(async () => (await app!.store.getEvent(holder))?.status === 'PROCESSED', 15_000, 'PROCESSED');
    } finally {
      await workers.stop();
    }
  });

  it('a forward answered 429 with Retry-After, or a handler throwing RetryableError with retryAfterMs, is not retried sooner than it asks (a floor under the backoff, within retry.capMs); without it the backoff alone applies', async () => {
    await dest.start();
    dest.status = () => 429;
    // Two destinations on one server: the one at /busy asks for 600 s, the one at /plain says nothing.
    dest.headers = (req): Record<string, string> => (req.url === '/busy' ? { 'retry-after': '600' } : {});
    const base = `http://127.0.0.1:${dest.port}`;
    app = await startTestApp(kind, {
      workers: { pollMs: 50, leaseMs: 2000 },
      retry: { baseMs: 10, capMs: 3_600_000, maxAttempts: 5 },
      destinations: [
        { id: 'busy-api', type: 'http', url: `${base}/busy`, secret: FORWARD_SECRET, timeoutMs: 2000 },
        { id: 'plain-api', type: 'http', url: `${base}/plain`, secret: FORWARD_SECRET, timeoutMs: 2000 },
      ],
      endpoints: [endpoint({ routes: [{ events: ['payment_intent.*'], destination: 'busy-api' }, { events: ['customer.*'], destination: 'plain-api' }] })],
    }, {}, {
      workers: true,
      // A handler asks the same way.
      handlers: new HandlerRegistry().on('charge.*', () => {
        throw new RetryableError('ledger_busy', 'the ledger asked us to come back later', { retryAfterMs: 600_000 });
      }),
    });
    const waitingId = (await send('evt_retry_after', 'payment_intent.succeeded')).json().inbox_id as string;
    const plain = (await send('evt_no_retry_after', 'customer.created')).json().inbox_id as string;
    const handled = (await send('evt_handler_later', 'charge.captured')).json().inbox_id as string;
    const sentAt = Date.now();
    const waiting = await waitFor(async () => {
      const e = await app!.store.getEvent(waitingId);
      return e?.status === 'PENDING' && e.attemptCount === 1 ? e : null;
    }, 10_000, 'the first attempt settled');
    expect(waiting.nextAttemptAtMs! - sentAt).toBeGreaterThan(590_000);
    expect(waiting.lastError).toContain('HTTP 429 (Retry-After: 600 s)');
    const later = await waitFor(async () => {
      const e = await app!.store.getEvent(handled);
      return e?.status === 'PENDING' && e.attemptCount === 1 ? e : null;
    }, 10_000, 'the handler failed once');
    expect(later.nextAttemptAtMs! - sentAt).toBeGreaterThan(590_000);
    // The other one, with no Retry-After, is retried on its (10 ms-based) backoff: a few attempts soon.
    await waitFor(async () => ((await app!.store.getEvent(plain))?.attemptCount ?? 0) >= 3, 10_000, 'quick retries');
    expect((await app.store.getEvent(waitingId))!.attemptCount).toBe(1);
    expect((await app.store.getEvent(handled))!.attemptCount).toBe(1);
  });

  it('an event forwarded to two services, one answering 429 Retry-After: 600 and one failing first with a 500, is not retried sooner than the 429 asked', async () => {
    await dest.start();
    dest.status = () => 500; // at once, without Retry-After
    // The busy service answers a little later, so the 500 is the attempt's first failure.
    const busy = createServer((req, res) => {
      req.resume().on('end', () => setTimeout(() => res.writeHead(429, { 'retry-after': '600' }).end(), 300));
    });
    await new Promise<void>((r) => busy.listen(0, '127.0.0.1', r));
    try {
      app = await startTestApp(kind, {
        workers: { pollMs: 50, leaseMs: 2000 },
        retry: { baseMs: 10, capMs: 3_600_000, maxAttempts: 5 },
        destinations: [
          { id: 'busy-api', type: 'http', url: `http://127.0.0.1:${(busy.address() as AddressInfo).port}/busy`, secret: FORWARD_SECRET, timeoutMs: 2000 },
          { id: 'broken-api', type: 'http', url: dest.url, secret: FORWARD_SECRET, timeoutMs: 2000 },
        ],
        endpoints: [endpoint({ routes: [{ events: ['payment_intent.*'], destination: 'busy-api' }, { events: ['payment_intent.*'], destination: 'broken-api' }] })],
      }, {}, { workers: true });
      const inboxId = (await send('evt_two_forwards')).json().inbox_id as string;
      const sentAt = Date.now();
      const waiting = await waitFor(async () => {
        const e = await app!.store.getEvent(inboxId);
        return e?.lastError ? e : null;
      }, 10_000, 'the first attempt settled');
      // Retried on the 10 ms backoff, the busy service was asked again within moments, and every
      // attempt was spent against its Retry-After.
      expect(waiting.nextAttemptAtMs! - sentAt).toBeGreaterThan(590_000);
      expect([waiting.status, waiting.attemptCount]).toEqual(['PENDING', 1]);
      // The error kept says why it waits.
      expect(waiting.lastError).toContain('HTTP 429 (Retry-After: 600 s)');
    } finally {
      busy.closeAllConnections();
      await new Promise<void>((r) => busy.close(() => r()));
    }
  });

  it('a batch of 100 events whose handlers all query: every event PROCESSED; on PostgreSQL no settle transaction runs more than 64 handlers (its subtransaction cache)', async () => {
    app = await startTestApp(kind, { ...FAST_WORKERS }, {}, { workers: false });
    const inboxIds: string[] = [];
    for (let i = 0; i < 100; i++) inboxIds.push((await send(`evt_many_${i}`)).json().inbox_id);
    const txOf = new Map<string, string>();
    const handlers = new HandlerRegistry().on('payment_intent.succeeded', async (event, ctx) => {
      // Each handler that queries opens a savepoint: one subtransaction of the settle transaction.
      // (SQLite has no subtransaction cache, so its batch settles in one transaction.)
      const [row] = await ctx.tx.query<{ x: string }>(kind === 'postgres' ? 'SELECT txid_current()::text AS x' : "SELECT 'one' AS x");
      txOf.set(event.providerEventId, row!.x);
    });
    const config = parseConfig(configDoc(app.db.url, { ...FAST_WORKERS, workers: { ...FAST_WORKERS.workers, batchSize: 100, concurrency: 100 }, endpoints: [endpoint()] }));
    const workers = await startWorkers(config, { handlers, logger: pino({ level: 'silent' }), migrate: false });
    try {
      for (const id of inboxIds) await waitFor(async () => (await app!.store.getEvent(id))?.status === 'PROCESSED', 10_000, 'PROCESSED');
    } finally {
      await workers.stop();
    }
    expect(txOf.size).toBe(100);
    if (kind === 'postgres') {
      const perTx = new Map<string, number>();
      for (const x of txOf.values()) perTx.set(x, (perTx.get(x) ?? 0) + 1);
      // All 100 were claimed together; no transaction ran more than 64 handlers.
      expect(perTx.size).toBeGreaterThanOrEqual(2);
      expect(Math.max(...perTx.values())).toBeLessThanOrEqual(64);
    }
  });

  it('bodies past workers.maxInFlightBodyBytes: batches read and settle them a slice at a time, every event PROCESSED with its own bytes, held bytes within the budget; a body bigger than the budget still goes through', async () => {
    app = await startTestApp(kind, { ...FAST_WORKERS }, {}, { workers: false });
    const bodies = new Map<string, Buffer>();
    const accept = async (id: string, size: number) => {
      const body = stripeEvent(id, { size });
      bodies.set(id, body);
      expect((await post(`${app!.url}/webhooks/stripe`, body, stripeHeaders(body))).status).toBe(200);
    };
    for (let i = 0; i < 24; i++) await accept(`evt_budget_${i}`, 6_000);
    const budget = 64 * 1024;
    const seen: { id: string; ok: boolean; size: number; held: number }[] = [];
    let workers: Awaited<ReturnType<typeof startWorkers>> | undefined;
    const handlers = new HandlerRegistry().on('payment_intent.succeeded', (event) => {
      const ok = (event.payload as { id: string }).id === event.providerEventId && event.raw.equals(bodies.get(event.providerEventId)!);
      seen.push({ id: event.providerEventId, ok, size: event.raw.length, held: workers!.engine.metrics.bodyBytes.get()! });
    });
    const processed = (n: number) => waitFor(async () => (await app!.store.listEvents({ status: 'PROCESSED', limit: 100 })).length === n, 15_000, `${n} PROCESSED`);
    // Batches of 8, three in flight: without the budget they would hold ~290 KB at once.
    const config = parseConfig(configDoc(app.db.url, { ...FAST_WORKERS, workers: { ...FAST_WORKERS.workers, batchSize: 8, concurrency: 24, maxInFlightBodyBytes: budget }, endpoints: [endpoint()] }));
    workers = await startWorkers(config, { handlers, logger: pino({ level: 'silent' }), migrate: false });
    try {
      await processed(24);
      // Then one body larger than the whole budget: read alone, it passes the budget by its own size only.
      await accept('evt_budget_big', 100_000);
      await processed(25);
    } finally {
      await workers.stop();
    }
    expect(seen.map((x) => x.id).sort()).toEqual([...bodies.keys()].sort());
    expect(seen.every((x) => x.ok)).toBe(true);
    // A stored body counts twice: its ciphertext (16 bytes of tag more) and its plaintext.
    for (const x of seen.slice(0, 24)) {
      expect(x.held).toBeGreaterThanOrEqual(2 * x.size);
      expect(x.held).toBeLessThanOrEqual(budget);
    }
    expect(seen[24]!.held).toBe(2 * (100_000 + 16));
    expect(workers.engine.metrics.bodyBytes.get()).toBe(0); // everything given back
    expect(workers.engine.metrics.bodies.get(['store'])).toBe(25);
  });

  it('serve with a small body budget: bodies from memory and from the store (retries) mix in batches, all PROCESSED, every byte given back', async () => {
    const failedOnce = new Set<string>();
    const handlers = new HandlerRegistry().on('payment_intent.succeeded', (event) => {
      expect((event.payload as { id: string }).id).toBe(event.providerEventId);
      // Every third event fails its first attempt: its retry reads the store under the budget.
      const n = Number(event.providerEventId.split('_').pop());
      if (n % 3 === 0 && !failedOnce.has(event.providerEventId)) {
        failedOnce.add(event.providerEventId);
        throw new Error('technical failure, first attempt');
      }
    });
    app = await startTestApp(kind, { ...FAST_WORKERS, workers: { ...FAST_WORKERS.workers, maxInFlightBodyBytes: 64 * 1024 } }, {}, { workers: true, handlers });
    const answers = await Promise.all(Array.from({ length: 60 }, (_, i) => {
      const body = stripeEvent(`evt_mix_${i}`, { size: 6_000 });
      return post(`${app!.url}/webhooks/stripe`, body, stripeHeaders(body));
    }));
    expect(answers.every((a) => a.status === 200)).toBe(true);
    await waitFor(async () => (await app!.store.listEvents({ status: 'PROCESSED', limit: 100 })).length === 60, 15_000, 'all PROCESSED');
    const m = app.engine.metrics;
    expect(m.bodies.get(['memory'])! + m.bodies.get(['store'])!).toBe(80); // 60 first attempts + 20 retries
    expect(m.bodies.get(['store'])).toBeGreaterThanOrEqual(20);
    expect(m.bodyBytes.get() ?? 0).toBe(0);
    expect(app.engine.fresh!.heldBytes).toBe(0); // every body taken from memory was given back
  });

  it('serve: duplicates of a processed event leave no body held in memory (the bound stays free for new events)', async () => {
    const handlers = new HandlerRegistry().on('payment_intent.succeeded', () => undefined);
    app = await startTestApp(kind, { ...FAST_WORKERS }, {}, { workers: true, handlers });
    const body = stripeEvent('evt_dup_mem', { size: 4_000 });
    const first = await post(`${app.url}/webhooks/stripe`, body, stripeHeaders(body));
    await waitFor(() => app!.store.getEvent(first.json().inbox_id).then((x) => x?.status === 'PROCESSED'), 10_000, 'PROCESSED');
    await waitFor(async () => app!.engine.fresh!.heldBytes === 0, 5_000, 'the first body given back');
    for (let i = 0; i < 20; i++) {
      const again = await post(`${app.url}/webhooks/stripe`, body, stripeHeaders(body));
      expect(again.json()).toEqual({ inbox_id: first.json().inbox_id, duplicate: true });
    }
    expect(app.engine.fresh!.heldBytes).toBe(0); // each was kept before its commit, and dropped when it proved a duplicate
  });

  it('workers in the accepting process use the body it just accepted; a retry reads the stored bytes, so a payload the first attempt mutated is not seen again', async () => {
    const seen: { attempt: number; id: string; rawOk: boolean }[] = [];
    const handlers = new HandlerRegistry().on('payment_intent.succeeded', (event) => {
      const payload = event.payload as { id: string };
      seen.push({ attempt: event.attempt, id: payload.id, rawOk: event.raw.equals(stripeEvent(event.providerEventId, { type: 'payment_intent.succeeded', size: 600 })) });
      if (event.attempt === 1) {
        payload.id = 'tampered by attempt 1';
        throw new Error('technical failure after mutating the payload');
      }
    });
    app = await startTestApp(kind, { ...FAST_WORKERS }, {}, { workers: true, handlers });
    const id = (await send('evt_fresh')).json().inbox_id as string;
    const e = await waitFor(() => app!.store.getEvent(id).then((x) => (x?.status === 'PROCESSED' ? x : null)), 10_000, 'PROCESSED');
    expect(e.attemptCount).toBe(2);
    expect(seen).toEqual([{ attempt: 1, id: 'evt_fresh', rawOk: true }, { attempt: 2, id: 'evt_fresh', rawOk: true }]);
    expect(app.engine.metrics.bodies.get(['memory'])).toBe(1);
    expect(app.engine.metrics.bodies.get(['store'])).toBe(1);
  });

  /** Runs the store's workers with these handlers until `until` resolves. */
  async function withWorkers<T>(handlers: HandlerRegistry, until: () => Promise<T>): Promise<T> {
    const config = parseConfig(configDoc(app!.db.url, { ...FAST_WORKERS, endpoints: [endpoint()] }));
    const workers = await startWorkers(config, { handlers, logger: pino({ level: 'silent' }), migrate: false });
    try {
      return await until();
    } finally {
      await workers.stop();
    }
  }
  const terminal = (inboxId: string) => waitFor(() => app!.store.getEvent(inboxId).then((e) => (e?.status === 'PROCESSED' || e?.status === 'FAILED' ? e : null)), 10_000, `${inboxId} terminal`);

  it('a handler registered with readsPayload: false runs on the identity alone: PROCESSED even after the body was purged, where a reading handler fails payload_unavailable', async () => {
    app = await startTestApp(kind, { ...FAST_WORKERS }, {}, { workers: false });
    const meta = (await send('evt_meta', 'charge.refunded')).json().inbox_id as string;
    const body = (await send('evt_body', 'payment_intent.succeeded')).json().inbox_id as string;
    for (const id of [meta, body]) {
      const ref = (await app.store.getInbox(id))!.rawPayloadRef!;
      await app.store.transaction((tx) => tx.query(sql('DELETE FROM webhook_payload WHERE payload_id = $1'), [ref])); // retention purged it
    }
    const seen: unknown[] = [];
    const handlers = new HandlerRegistry()
      .on('charge.refunded', (e) => void seen.push([e.providerEventId, e.type, e.attempt]), { readsPayload: false })
      .on('payment_intent.succeeded', (e) => void seen.push(e.payload));
    const [m, b] = await withWorkers(handlers, () => Promise.all([terminal(meta), terminal(body)]));
    expect(m).toMatchObject({ status: 'PROCESSED', handlerVersion: 'charge.refunded@1', attemptCount: 1 });
    expect(b).toMatchObject({ status: 'FAILED', failureReason: 'payload_unavailable', attemptCount: 1 });
    expect(seen).toEqual([['evt_meta', 'charge.refunded', 1]]);
  });

  it('readsPayload: false is kept per handler: reading event.payload there fails that handler (retried, then FAILED) even when another handler of the event reads it', async () => {
    app = await startTestApp(kind, { ...FAST_WORKERS }, {}, { workers: false });
    const id = (await send('evt_misdeclared', 'charge.refunded')).json().inbox_id as string;
    const read: unknown[] = [];
    const handlers = new HandlerRegistry()
      .on('charge.refunded', (e) => void read.push((e.payload as { id: string }).id, e.raw.length > 0), { name: 'reader' })
      .on('charge.refunded', (e) => void read.push(e.payload), { name: 'ids-only', readsPayload: false });
    const e = await withWorkers(handlers, () => terminal(id));
    expect(e).toMatchObject({ status: 'FAILED', failureReason: 'retries_exhausted', attemptCount: 3 });
    expect(e.lastError).toBe('Error: this handler was registered with readsPayload: false, so event.payload and event.raw are not read for it');
    // The reader ran once (its marker made the retries skip it); the other never got a payload.
    expect(read).toEqual(['evt_misdeclared', true]);
  });

  it('a work process started before its payload key was mounted picks it up when it appears, and processes', async () => {
    app = await startTestApp(kind, { ...FAST_WORKERS }, {}, { workers: false });
    const id = (await send('evt_late_key')).json().inbox_id;
    const keyFile = join(mkdtempSync(join(tmpdir(), 'wi-late-key-')), 'payload-key');
    const handlers = new HandlerRegistry().on('payment_intent.succeeded', (event) => {
      expect((event.payload as { id: string }).id).toBe('evt_late_key');
    });
    const config = parseConfig(configDoc(app.db.url, { ...FAST_WORKERS, payloadKeys: { current: 'k1', keys: { k1: `\${file:${keyFile}}` } }, endpoints: [endpoint()] }));
    const workers = await startWorkers(config, { handlers, logger: pino({ level: 'silent' }), migrate: false, secretCheckMs: 100 });
    try {
      expect(workers.keyring.problems).toEqual([expect.stringMatching(/^payloadKeys\.keys\.k1: cannot read/)]);
      await new Promise((r) => setTimeout(r, 300));
      expect((await app.store.getEvent(id))?.status).toBe('PENDING'); // nothing can open its body yet
      writeFileSync(keyFile, `${PAYLOAD_KEY}\n`);
      await waitFor(() => app!.store.getEvent(id).then((e) => e?.status === 'PROCESSED'), 5000, 'PROCESSED once the key loads');
    } finally {
      await workers.stop();
    }
  });

  it('a destination slow to answer holds back only the events routed to it: the batch around them (handlers, a healthy destination) settles meanwhile, and their places go to new events', async () => {
    await dest.start();
    // The slow service holds every request until the test lets it answer.
    const held: ServerResponse[] = [];
    let answering = false;
    const answer = () => {
      answering = true;
      for (const res of held.splice(0)) res.end('ok');
    };
    const slow = createServer((req, res) => {
      req.resume();
      req.on('end', () => (answering ? res.end('ok') : held.push(res)));
    });
    await new Promise<void>((r) => slow.listen(0, '127.0.0.1', r));
    try {
      const routes = [{ events: ['payment_intent.*'], destination: 'slow' }, { events: ['invoice.*'], destination: 'orders-api' }];
      // One batch fills workers.concurrency: a new event is claimed only once the settled ones give their places back.
      const doc = {
        ...FAST_WORKERS,
        workers: { ...FAST_WORKERS.workers, concurrency: 4, batchSize: 4 },
        destinations: [
          { id: 'slow', type: 'http', url: `http://127.0.0.1:${(slow.address() as AddressInfo).port}/hooks`, secret: FORWARD_SECRET, timeoutMs: 60_000, maxConnections: 1 },
          { id: 'orders-api', type: 'http', url: dest.url, secret: FORWARD_SECRET, timeoutMs: 5000 },
        ],
        endpoints: [endpoint({ routes })],
      };
      app = await startTestApp(kind, doc, {}, { workers: false });
      // Accepted first, so one claim takes them all: one batch.
      const toSlow = [(await send('evt_slow_1')).json().inbox_id, (await send('evt_slow_2')).json().inbox_id] as string[];
      const handled = (await send('evt_handled', 'charge.refunded')).json().inbox_id as string;
      const forwarded = (await send('evt_fast', 'invoice.paid')).json().inbox_id as string;
      const handlers = new HandlerRegistry().on('charge.refunded', () => undefined);
      const workers = await startWorkers(parseConfig(configDoc(app.db.url, doc)), { handlers, logger: pino({ level: 'silent' }), migrate: false });
      try {
        await waitFor(() => held.length === 1, 10_000, 'the slow destination holding a request');
        const status = async (id: string) => (await app!.store.getEvent(id))?.status;
        await waitFor(async () => (await status(handled)) === 'PROCESSED' && (await status(forwarded)) === 'PROCESSED', 10_000, 'the events beside the slow forwards PROCESSED');
        expect(await Promise.all(toSlow.map(status))).toEqual(['PROCESSING', 'PROCESSING']);
        expect(dest.keys()).toEqual(new Set([forwarded]));
        const later = (await send('evt_handled_later', 'charge.refunded')).json().inbox_id as string;
        await waitFor(async () => (await status(later)) === 'PROCESSED', 10_000, 'a new event PROCESSED while the slow forwards are held');
        answer();
        await waitFor(async () => (await Promise.all(toSlow.map(status))).every((s) => s === 'PROCESSED'), 10_000, 'the slow forwards PROCESSED');
      } finally {
        answer(); // a failed wait must not leave the workers' stop waiting for held requests
        await workers.stop();
      }
    } finally {
      slow.closeAllConnections();
      await new Promise<void>((r) => slow.close(() => r()));
    }
  });

  it('a destination that stops answering does not hold the workers: once its circuit opens, its queued forwards fail at once (destination_down, no request) and the places go to other events', async () => {
    await dest.start();
    // The dead service takes every request and never answers.
    const requests: ServerResponse[] = [];
    const dead = createServer((req, res) => {
      req.resume();
      requests.push(res);
    });
    await new Promise<void>((r) => dead.listen(0, '127.0.0.1', r));
    try {
      const routes = [{ events: ['payment_intent.*'], destination: 'dead' }, { events: ['invoice.*'], destination: 'orders-api' }];
      app = await startTestApp(kind, {
        ...FAST_WORKERS,
        // Four places: the four events for the dead service fill them (one request open, three waiting for its one connection).
        workers: { ...FAST_WORKERS.workers, concurrency: 4, batchSize: 4 },
        destinations: [
          { id: 'dead', type: 'http', url: `http://127.0.0.1:${(dead.address() as AddressInfo).port}/hooks`, secret: FORWARD_SECRET, timeoutMs: 1000, maxConnections: 1, circuitBreaker: { failures: 1, cooldownMs: 60_000 } },
          { id: 'orders-api', type: 'http', url: dest.url, secret: FORWARD_SECRET, timeoutMs: 5000 },
        ],
        endpoints: [endpoint({ routes })],
      }, {}, { workers: true });
      const toDead: string[] = [];
      for (let i = 0; i < 4; i++) toDead.push((await send(`evt_dead_${i}`)).json().inbox_id as string);
      const healthy = (await send('evt_healthy', 'invoice.paid')).json().inbox_id as string;
      const event = (id: string) => app!.store.getEvent(id);
      await waitFor(async () => (await event(healthy))?.status === 'PROCESSED', 10_000, 'the healthy destination\'s event PROCESSED');
      expect(dest.keys()).toEqual(new Set([healthy]));
      // Every attempt after the one timeout failed without a request (maxAttempts 3 each; without the
      // circuit, each of the 12 attempts would have sent one and waited out its second).
      const failed = await waitFor(async () => {
        const rows = await Promise.all(toDead.map(event));
        return rows.every((e) => e?.status === 'FAILED') ? rows : null;
      }, 10_000, 'the dead destination\'s events FAILED');
      expect(requests).toHaveLength(1);
      for (const e of failed) {
        expect(e).toMatchObject({ failureReason: 'retries_exhausted', attemptCount: 3 });
        expect(e!.lastError).toContain('[destination_down]');
        expect(e!.lastError).toContain('http destination "dead" is not answering: circuit open, no request sent');
      }
      const metric = await scrapeMetrics(app.url);
      expect(metric('webhook_destination_circuit_open', 'destination="dead"')).toBe(1);
      expect(metric('webhook_worker_attempts_total', 'reason="destination_down"')).toBeGreaterThanOrEqual(7);
    } finally {
      for (const res of requests) res.destroy();
      dead.closeAllConnections();
      await new Promise<void>((r) => dead.close(() => r()));
    }
  });

  it('a payload key this process has not loaded holds its events back without spending their attempts (payload_key_unavailable); once it loads they run', async () => {
    let runs = 0;
    let opened = 0;
    const handlers = new HandlerRegistry().on('payment_intent.succeeded', (event) => {
      runs++;
      void event.payload; // cannot be opened until k1 loads
      opened++;
    });
    app = await startTestApp(kind, { ...FAST_WORKERS }, {}, { workers: false }); // seals under k1
    const id = (await send('evt_sealed_k1')).json().inbox_id as string;
    // A worker whose k1 is a reference not yet resolvable (a secret mount that comes late).
    const env: NodeJS.ProcessEnv = {};
    const doc = { ...FAST_WORKERS, payloadKeys: { current: 'k2', keys: { k1: '${env:LATE_K1}', k2: Buffer.alloc(32, 9).toString('base64') } }, endpoints: [endpoint()] };
    const workers = await startWorkers(parseConfig(configDoc(app.db.url, doc), env), { handlers, env, logger: pino({ level: 'silent' }), migrate: false, secretCheckMs: 50 });
    try {
      // Twice its maxAttempts (3): before, the third failure was FAILED retries_exhausted.
      await waitFor(() => runs >= 6, 10_000, 'six tries');
      const waiting = (await app.store.getEvent(id))!;
      expect(['PENDING', 'PROCESSING']).toContain(waiting.status);
      expect(waiting.attemptCount).toBeLessThanOrEqual(1); // 1 while a try holds it
      expect(waiting.lastError).toContain('[payload_key_unavailable]');
      expect(waiting.lastError).toContain('payload key "k1" is configured but not loaded');
      expect(opened).toBe(0);
      env.LATE_K1 = PAYLOAD_KEY;
      const done = await waitFor(() => app!.store.getEvent(id).then((e) => (e?.status === 'PROCESSED' ? e : null)), 10_000, 'PROCESSED once k1 loads');
      expect(done.attemptCount).toBe(1);
      expect(opened).toBe(1);
    } finally {
      await workers.stop();
    }
  });

  it('a payload key the config does not name at all is not a passing state: its events spend their attempts and end FAILED, for a requeue once the key is configured', async () => {
    let runs = 0;
    const handlers = new HandlerRegistry().on('payment_intent.succeeded', (event) => {
      runs++;
      void event.payload;
    });
    app = await startTestApp(kind, { ...FAST_WORKERS }, {}, { workers: false }); // seals under k1
    const id = (await send('evt_key_removed')).json().inbox_id as string;
    const doc = { ...FAST_WORKERS, payloadKeys: { current: 'k2', keys: { k2: Buffer.alloc(32, 9).toString('base64') } }, endpoints: [endpoint()] };
    const workers = await startWorkers(parseConfig(configDoc(app.db.url, doc), {}), { handlers, logger: pino({ level: 'silent' }), migrate: false });
    try {
      const failed = await waitFor(() => app!.store.getEvent(id).then((e) => (e?.status === 'FAILED' ? e : null)), 10_000, 'FAILED');
      expect(failed).toMatchObject({ failureReason: 'retries_exhausted', attemptCount: 3 });
      expect(failed.lastError).toContain('payload key "k1" is not configured (payloadKeys.keys)');
      expect(runs).toBe(3);
    } finally {
      await workers.stop();
    }
  });

  it('a failure of the event itself still spends its attempt when a setup failure came first: a handler that throws beside a forward whose secret is not loaded ends FAILED after maxAttempts', async () => {
    let runs = 0;
    const handlers = new HandlerRegistry().on('payment_intent.succeeded', () => {
      runs++;
      throw new Error('ledger refused the entry');
    });
    app = await startTestApp(kind, {
      ...FAST_WORKERS,
      destinations: [{ id: 'orders-api', type: 'http', url: 'http://127.0.0.1:9/hooks', secret: '${env:FWD_SECRET_NOT_SET}', timeoutMs: 500 }],
      endpoints: [endpoint({ routes: [{ events: ['*'], destination: 'orders-api' }] })],
    }, {}, { workers: true, handlers });
    const id = (await send('evt_both_fail')).json().inbox_id as string;
    const failed = await waitFor(() => app!.store.getEvent(id).then((e) => (e?.status === 'FAILED' ? e : null)), 10_000, 'FAILED');
    expect(failed).toMatchObject({ failureReason: 'retries_exhausted', attemptCount: 3, lastError: 'Error: ledger refused the entry' });
    expect(runs).toBe(3);
  });

  it('attempts that never finished (crashed or hung workers) end FAILED attempts_abandoned, apart from retries_exhausted: requeue technical leaves them, requeue abandoned sends them back', async () => {
    let runs = 0;
    const handlers = new HandlerRegistry().on('payment_intent.succeeded', () => {
      runs++;
    });
    app = await startTestApp(kind, { ...FAST_WORKERS }, {}, { workers: false });
    const id = (await send('evt_crasher')).json().inbox_id as string;
    // Three workers claim it and die before settling (maxAttempts 3): each lease lapses unsettled.
    for (let i = 1; i <= 3; i++) {
      const claimed = await app.store.claimInbox(1, `crashed-worker-${i}`, 1, Date.now());
      expect(claimed.map((c) => [c.inboxId, c.attemptCount])).toEqual([[id, i]]);
      await new Promise((r) => setTimeout(r, 5));
    }
    const config = parseConfig(configDoc(app.db.url, { ...FAST_WORKERS, endpoints: [endpoint()] }));
    const workers = await startWorkers(config, { handlers, logger: pino({ level: 'silent' }), migrate: false });
    try {
      const failed = await waitFor(() => app!.store.getEvent(id).then((e) => (e?.status === 'FAILED' ? e : null)), 10_000, 'FAILED');
      expect(failed).toMatchObject({ failureReason: 'attempts_abandoned', attemptCount: 4 });
      expect(failed.lastError).toContain('attempt 4 exceeds maxAttempts 3: the last attempt never finished');
      expect(runs).toBe(0); // not tried a fourth time
      // The operator's routine bulk requeue of technical failures does not send a crasher back…
      expect(await app.store.requeueFailed(REQUEUE_CLASSES.technical!, Date.now())).toBe(0);
      expect((await app.store.getEvent(id))!.status).toBe('FAILED');
      // …asking for the abandoned ones by name does, and the (fixed) worker processes it.
      expect(await app.store.requeueFailed(REQUEUE_CLASSES.abandoned!, Date.now())).toBe(1);
      await waitFor(() => app!.store.getEvent(id).then((e) => e?.status === 'PROCESSED'), 10_000, 'PROCESSED');
      expect(runs).toBe(1);
    } finally {
      await workers.stop();
    }
  });

  it("a route's own retry policy holds beyond its endpoint's: a forward allowed 5 attempts gets 5, though the endpoint allows 2", async () => {
    await dest.start();
    const port = dest.port;
    await dest.stop(); // closed: every forward fails with a connection error
    app = await startTestApp(kind, {
      ...FAST_WORKERS,
      destinations: [{ id: 'orders-api', type: 'http', url: `http://127.0.0.1:${port}/hooks`, secret: FORWARD_SECRET, timeoutMs: 500 }],
      endpoints: [endpoint({ retry: { baseMs: 10, capMs: 20, maxAttempts: 2 }, routes: [{ events: ['*'], destination: 'orders-api', retry: { baseMs: 10, capMs: 20, maxAttempts: 5 } }] })],
    }, {}, { workers: true });
    const id = (await send('evt_route_retry')).json().inbox_id;
    const failed = await waitFor(() => app!.store.getEvent(id).then((e) => (e?.status === 'FAILED' ? e : null)), 10_000, 'FAILED');
    expect(failed).toMatchObject({ failureReason: 'retries_exhausted', attemptCount: 5 });
    expect(failed.lastError).not.toContain('earlier attempts did not finish');
  });

  it('a hung effect executor is cut off after leaseMs and retried (effect_timeout): its slot does not stay taken', async () => {
    let calls = 0;
    const handlers = new HandlerRegistry()
      .on('payment_intent.succeeded', (_event, ctx) => ctx.effect('notify', {}))
      .effect('notify', () => (++calls === 1 ? new Promise<void>(() => undefined) : undefined)); // the first call never returns
    app = await startTestApp(kind, { ...FAST_WORKERS, workers: { ...FAST_WORKERS.workers, leaseMs: 1000, effectsConcurrency: 1 } }, {}, { workers: true, handlers });
    const id = (await send('evt_hung_effect')).json().inbox_id;
    const done = await waitFor(async () => (await app!.store.listEffects(id)).find((e) => e.status === 'DONE') ?? null, 10_000, 'effect DONE');
    expect(done.attemptCount).toBe(2);
    expect(app.engine.metrics.effects.get(['retry', 'effect_timeout'])).toBe(1);
  });

  it('an effect executor throwing a value with no string form is retried and FAILED after maxAttempts, not left PROCESSING', async () => {
    const handlers = new HandlerRegistry()
      .on('payment_intent.succeeded', (_event, ctx) => ctx.effect('odd', {}))
      .effect('odd', () => {
        throw Object.create(null);
      });
    app = await startTestApp(kind, { ...FAST_WORKERS }, {}, { workers: true, handlers });
    const id = (await send('evt_odd_effect')).json().inbox_id;
    const effect = await waitFor(async () => (await app!.store.listEffects(id)).find((e) => e.status === 'FAILED') ?? null, 10_000, 'effect FAILED');
    expect(effect).toMatchObject({ failureReason: 'retries_exhausted', attemptCount: 3 });
  });

  it('a settle that fails for one event outside its handler (here a store trigger) does not fail the events beside it', async () => {
    app = await startTestApp(kind, { ...FAST_WORKERS }, {}, { workers: false });
    await userTable();
    const poison = kind === 'postgres'
      ? ["CREATE FUNCTION poison() RETURNS trigger AS $$ BEGIN IF NEW.provider_event_id = 'evt_poison_marker' THEN RAISE EXCEPTION 'poisoned marker'; END IF; RETURN NEW; END $$ LANGUAGE plpgsql",
        'CREATE TRIGGER poison BEFORE INSERT ON processed_events FOR EACH ROW EXECUTE FUNCTION poison()']
      : ["CREATE TRIGGER poison BEFORE INSERT ON processed_events WHEN NEW.provider_event_id = 'evt_poison_marker' BEGIN SELECT RAISE(ABORT, 'poisoned marker'); END"];
    for (const s of poison) await app.store.transaction((tx) => tx.query(s));
    const ids = ['evt_side_a', 'evt_poison_marker', 'evt_side_b'];
    const inboxIds = new Map<string, string>();
    for (const id of ids) inboxIds.set(id, (await send(id)).json().inbox_id);
    const handlers = new HandlerRegistry().on('payment_intent.succeeded', async (event, ctx) => {
      await ctx.tx.query(sql('INSERT INTO paid_orders (event_id, amount) VALUES ($1, $2)'), [event.providerEventId, event.attempt]);
    });
    const config = parseConfig(configDoc(app.db.url, { ...FAST_WORKERS, workers: { ...FAST_WORKERS.workers, batchSize: 64, concurrency: 64 }, endpoints: [endpoint()] }));
    const workers = await startWorkers(config, { handlers, logger: pino({ level: 'silent' }), migrate: false });
    try {
      for (const id of ['evt_side_a', 'evt_side_b']) {
        const e = await waitFor(() => app!.store.getEvent(inboxIds.get(id)!).then((x) => (x?.status === 'PROCESSED' ? x : null)), 10_000, `${id} PROCESSED`);
        expect(e.attemptCount, id).toBe(1); // settled at their first attempt, though claimed with the poisoned one
      }
      // Its own failed attempts (retried with backoff, then FAILED with the store's error), not
      // left to its lease each time (5103dd4: it ended attempts_abandoned, the error nowhere).
      const poisoned = await waitFor(() => app!.store.getEvent(inboxIds.get('evt_poison_marker')!).then((x) => (x?.status === 'FAILED' ? x : null)), 10_000, 'poisoned FAILED');
      expect({ reason: poisoned.failureReason, attempts: poisoned.attemptCount }).toEqual({ reason: 'retries_exhausted', attempts: 3 });
      expect(poisoned.lastError).toContain('poisoned marker');
    } finally {
      await workers.stop();
    }
    const rows = await app.store.transaction((tx) => tx.query<{ event_id: string }>('SELECT event_id FROM paid_orders ORDER BY event_id'));
    expect(rows.map((r) => r.event_id)).toEqual(['evt_side_a', 'evt_side_b']);
  });

  it('a write the handler started but did not await is part of its savepoint: undone when the handler fails, kept when it succeeds', async () => {
    app = await startTestApp(kind, { ...FAST_WORKERS }, {}, { workers: false });
    await app.store.transaction((tx) => tx.query('CREATE TABLE stray (attempt INTEGER NOT NULL)'));
    const id = (await send('evt_stray')).json().inbox_id;
    const handlers = new HandlerRegistry().on('payment_intent.succeeded', (event, ctx) => {
      void ctx.tx.query(sql('INSERT INTO stray (attempt) VALUES ($1)'), [event.attempt]); // no await
      if (event.attempt === 1) throw new Error('technical failure after starting a write');
    });
    const config = parseConfig(configDoc(app.db.url, { ...FAST_WORKERS, endpoints: [endpoint()] }));
    const workers = await startWorkers(config, { handlers, logger: pino({ level: 'silent' }), migrate: false });
    try {
      const e = await waitFor(() => app!.store.getEvent(id).then((x) => (x?.status === 'PROCESSED' ? x : null)), 10_000, 'PROCESSED');
      expect(e.attemptCount).toBe(2);
    } finally {
      await workers.stop();
    }
    const rows = await app.store.transaction((tx) => tx.query<{ attempt: number | string }>('SELECT attempt FROM stray'));
    expect(rows.map((r) => Number(r.attempt))).toEqual([2]);
  });

  it('a write the handler did not await that fails fails the handler, on both stores, and only that event', async () => {
    app = await startTestApp(kind, { ...FAST_WORKERS }, {}, { workers: false });
    await userTable();
    await app.store.transaction((tx) => tx.query(sql('INSERT INTO paid_orders (event_id, amount) VALUES ($1, $2)'), ['taken', 0]));
    const ids = ['evt_fine_1', 'evt_stray_dup', 'evt_fine_2'];
    const inboxIds = new Map<string, string>();
    for (const id of ids) inboxIds.set(id, (await send(id)).json().inbox_id);
    const handlers = new HandlerRegistry().on('payment_intent.succeeded', async (event, ctx) => {
      if (event.providerEventId === 'evt_stray_dup') {
        void ctx.tx.query(sql('INSERT INTO paid_orders (event_id, amount) VALUES ($1, $2)'), ['taken', 1]); // no await: it fails later
        return;
      }
      await ctx.tx.query(sql('INSERT INTO paid_orders (event_id, amount) VALUES ($1, $2)'), [event.providerEventId, event.attempt]);
    });
    const config = parseConfig(configDoc(app.db.url, { ...FAST_WORKERS, workers: { ...FAST_WORKERS.workers, batchSize: 64, concurrency: 64 }, endpoints: [endpoint()] }));
    const workers = await startWorkers(config, { handlers, logger: pino({ level: 'silent' }), migrate: false });
    try {
      const terminal = (id: string) => waitFor(async () => {
        const e = await app!.store.getEvent(inboxIds.get(id)!);
        return e?.status === 'PROCESSED' || e?.status === 'FAILED' ? e : null;
      }, 10_000, `${id} terminal`);
      for (const id of ['evt_fine_1', 'evt_fine_2']) expect(await terminal(id), id).toMatchObject({ status: 'PROCESSED', attemptCount: 1 });
      const bad = await terminal('evt_stray_dup');
      expect(bad).toMatchObject({ status: 'FAILED', failureReason: 'retries_exhausted' });
      expect(bad.lastError).toContain('went on after a failed query');
    } finally {
      await workers.stop();
    }
  });

  it('handler mistakes fail only their own event, on both stores: a caught failed query, effect data that is not JSON, a thrown value with no string form', async () => {
    app = await startTestApp(kind, { ...FAST_WORKERS }, {}, { workers: false });
    await userTable();
    await app.store.transaction((tx) => tx.query(sql('INSERT INTO paid_orders (event_id, amount) VALUES ($1, $2)'), ['taken', 0]));
    const ids = ['evt_ok', 'evt_swallow', 'evt_bigint', 'evt_weird'];
    const inboxIds = new Map<string, string>();
    for (const id of ids) inboxIds.set(id, (await send(id)).json().inbox_id);
    const effectData: unknown[] = [];
    const handlers = new HandlerRegistry()
      .on('payment_intent.succeeded', async (event, ctx) => {
        const id = event.providerEventId;
        if (id === 'evt_weird') throw Object.create(null); // String() of it throws
        await ctx.tx.query(sql('INSERT INTO paid_orders (event_id, amount) VALUES ($1, $2)'), [id, event.attempt]);
        if (id === 'evt_swallow') {
          // "Insert, ignore the duplicate" by catching: PostgreSQL cannot go on after it.
          await ctx.tx.query(sql('INSERT INTO paid_orders (event_id, amount) VALUES ($1, $2)'), ['taken', 1]).catch(() => undefined);
        }
        if (id === 'evt_bigint') ctx.effect('charge', { amount: event.attempt === 1 ? 10n : '10' });
      })
      .effect('charge', (data) => void effectData.push(data));
    const config = parseConfig(configDoc(app.db.url, { ...FAST_WORKERS, workers: { ...FAST_WORKERS.workers, batchSize: 64, concurrency: 64 }, endpoints: [endpoint()] }));
    const workers = await startWorkers(config, { handlers, logger: pino({ level: 'silent' }), migrate: false });
    try {
      const final = async (id: string) => waitFor(async () => {
        const ev = await app!.store.getEvent(inboxIds.get(id)!);
        return ev?.status === 'PROCESSED' || ev?.status === 'FAILED' ? ev : null;
      }, 10_000, `${id} terminal`);
      expect(await final('evt_ok')).toMatchObject({ status: 'PROCESSED', attemptCount: 1 });
      const swallow = await final('evt_swallow');
      expect(swallow).toMatchObject({ status: 'FAILED', failureReason: 'retries_exhausted', attemptCount: 3 });
      expect(swallow.lastError).toContain('went on after a failed query');
      const bigint = await final('evt_bigint');
      expect(bigint).toMatchObject({ status: 'PROCESSED', attemptCount: 2 });
      const weird = await final('evt_weird');
      expect(weird).toMatchObject({ status: 'FAILED', failureReason: 'retries_exhausted', attemptCount: 3 });
      expect(weird.lastError).toContain('(a thrown value with no string form)');
      await waitFor(async () => (await app!.store.listEffects(inboxIds.get('evt_bigint')!))[0]?.status === 'DONE', 5000, 'effect DONE');
    } finally {
      await workers.stop();
    }
    // The effect recorded with data that is not JSON made no row: only attempt 2's ran.
    expect(effectData).toEqual([{ amount: '10' }]);
    expect(await app.store.listEffects(inboxIds.get('evt_bigint')!)).toHaveLength(1);
    // evt_swallow's own write was undone every time; the others kept theirs (evt_bigint's from attempt 2).
    const rows = await app.store.transaction((tx) => tx.query<{ event_id: string; amount: number | string }>('SELECT event_id, amount FROM paid_orders ORDER BY event_id'));
    expect(rows.map((r) => [r.event_id, Number(r.amount)])).toEqual([['evt_bigint', 2], ['evt_ok', 1], ['taken', 0]]);
  });

  it('in one batch, failing handlers roll back only their own writes: the other events commit at their first attempt', async () => {
    app = await startTestApp(kind, { ...FAST_WORKERS }, {}, { workers: false });
    await userTable();
    const ids = Array.from({ length: 10 }, (_, i) => `evt_batch_${i}`);
    const inboxIds = new Map<string, string>();
    for (const id of ids) inboxIds.set(id, (await send(id)).json().inbox_id);
    // All ten are PENDING before any worker runs, so the first claim (batchSize 64) takes them together.
    const attempts = new Map<string, number>();
    const handlers = new HandlerRegistry().on('payment_intent.succeeded', async (event, ctx) => {
      attempts.set(event.providerEventId, event.attempt);
      await ctx.tx.query(sql('INSERT INTO paid_orders (event_id, amount) VALUES ($1, $2)'), [event.providerEventId, event.attempt]);
      if (Number(event.providerEventId.slice(-1)) % 2 === 1 && event.attempt === 1) throw new Error('technical failure after the write');
    });
    const config = parseConfig(configDoc(app.db.url, { ...FAST_WORKERS, workers: { ...FAST_WORKERS.workers, batchSize: 64, concurrency: 64 }, endpoints: [endpoint()] }));
    const workers = await startWorkers(config, { handlers, logger: pino({ level: 'silent' }), migrate: false });
    try {
      for (const [id, inboxId] of inboxIds) {
        const e = await waitFor(async () => {
          const ev = await app!.store.getEvent(inboxId);
          return ev?.status === 'PROCESSED' ? ev : null;
        }, 10_000, `${id} PROCESSED`);
        // Even events succeeded at their first attempt although odd ones failed beside them; odd ones on the retry.
        expect(e.attemptCount, id).toBe(Number(id.slice(-1)) % 2 === 1 ? 2 : 1);
      }
    } finally {
      await workers.stop();
    }
    // One row per event: the failed attempts' writes are gone, none of the successful ones.
    const rows = await app.store.transaction((tx) => tx.query<{ event_id: string; amount: number | string }>('SELECT event_id, amount FROM paid_orders ORDER BY event_id'));
    expect(rows.map((r) => [r.event_id, Number(r.amount)])).toEqual(ids.map((id) => [id, Number(id.slice(-1)) % 2 === 1 ? 2 : 1]));
  });
});

it('chunkByHandlers: consecutive runs of at most max handlers, an event never split', () => {
  const plans = (...counts: number[]) => counts.map((n, i) => ({ i, handlers: Array.from({ length: n }) }));
  const shape = (chunks: { i: number }[][]) => chunks.map((c) => c.map((p) => p.i));
  expect(shape(chunkByHandlers(plans(1, 1, 1, 1, 1), 2))).toEqual([[0, 1], [2, 3], [4]]);
  expect(shape(chunkByHandlers(plans(0, 0, 3, 1), 3))).toEqual([[0, 1, 2], [3]]);
  expect(shape(chunkByHandlers(plans(5, 1), 3))).toEqual([[0], [1]]); // an event with more than max stays whole
  expect(chunkByHandlers([], 3)).toEqual([]);
});

it('config: a route to an unknown destination names its path', async () => {
  const { parseConfig } = await import('../../src/config/schema.js');
  expect(() => parseConfig(configDoc('sqlite:/tmp/x.db', { endpoints: [endpoint({ routes: [{ destination: 'nope' }] })] }))).toThrow(/endpoints\[0\]\.routes\[0\]\.destination/);
});

it('SQLite: a batch whose handlers outlast the store\'s transaction limit settles in several transactions, and one handler too slow for it fails alone (handler_timeout)', async () => {
  // txTimeoutMs 1000: settle transactions stay under 500 ms, and so does each handler.
  const app = await startTestApp('sqlite', { ...FAST_WORKERS }, {}, { workers: false, urlSuffix: '?txTimeoutMs=1000' });
  try {
    await app.store.transaction((tx) => tx.query('CREATE TABLE paid_orders (event_id TEXT PRIMARY KEY)'));
    const ids = [...Array.from({ length: 12 }, (_, i) => `evt_long_${i}`), 'evt_slow'];
    const inboxIds = new Map<string, string>();
    for (const id of ids) {
      const body = stripeEvent(id, { size: 600 });
      inboxIds.set(id, (await post(`${app.url}/webhooks/stripe`, body, stripeHeaders(body))).json().inbox_id);
    }
    const handlers = new HandlerRegistry().on('payment_intent.succeeded', async (event, ctx) => {
      await ctx.tx.query('INSERT INTO paid_orders (event_id) VALUES (?)', [event.providerEventId]);
      await new Promise((r) => setTimeout(r, event.providerEventId === 'evt_slow' ? 1500 : 150)); // 12 × 150 ms > 1 s
    });
    const config = parseConfig(configDoc(app.db.url + '?txTimeoutMs=1000', { ...FAST_WORKERS, workers: { ...FAST_WORKERS.workers, batchSize: 64, concurrency: 64 }, endpoints: [endpoint()] }));
    const workers = await startWorkers(config, { handlers, logger: pino({ level: 'silent' }), migrate: false });
    try {
      const terminal = (id: string) => waitFor(async () => {
        const e = await app.store.getEvent(inboxIds.get(id)!);
        return e?.status === 'PROCESSED' || e?.status === 'FAILED' ? e : null;
      }, 20_000, `${id} terminal`);
      for (const id of ids.slice(0, 12)) expect(await terminal(id), id).toMatchObject({ status: 'PROCESSED', attemptCount: 1 });
      const slow = await terminal('evt_slow');
      expect(slow).toMatchObject({ status: 'FAILED', failureReason: 'retries_exhausted' });
      expect(slow.lastError).toContain('did not finish within 500 ms');
      // Its retries are counted under their own reason, not as a bare "error" (maxAttempts 3: two retries).
      expect(workers.engine.metrics.attempts.get(['retry', 'handler_timeout'])).toBe(2);
      expect(workers.engine.metrics.attempts.get(['retry', 'error']) ?? 0).toBe(0);
    } finally {
      await workers.stop();
    }
    const rows = await app.store.transaction((tx) => tx.query<{ n: number }>('SELECT count(*) AS n FROM paid_orders'));
    expect(rows[0]!.n).toBe(12); // the slow one's write was undone each time
  } finally {
    await app.stop();
  }
});
