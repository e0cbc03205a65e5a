import { randomUUID } from 'node:crypto';
import { rmSync } from 'node:fs';
import { crc32 as zlibCrc32 } from 'node:zlib';
import Database from 'better-sqlite3';
import pino from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startApp, type RunningApp } from '../../src/app.js';
import { parseConfig } from '../../src/config/schema.js';
import { configDoc, startTestApp } from '../helpers/app.js';
import { post, type HttpResponse } from '../helpers/http.js';
import { captureLog } from '../helpers/log.js';
import { certId, forgeSameCrc, isoSeconds, makeCert, paypalHeaders, startFakePaypal, type FakePaypal } from '../helpers/paypal.js';
import { pgAvailable } from '../helpers/pg.js';
import { proxiedPostgres } from '../helpers/tcp-proxy.js';
import { holdInTransaction } from '../helpers/stores.js';

/*
 * PayPal's transmission binding (store.bindTransmissions, group-committed, before any parse) when the store cannot
 * answer it: the request must fail closed and retryable — 503 storage_unavailable with Retry-After
 * — never 401 (PayPal would not retry a refusal of its own genuine delivery as a 5xx), never 2xx
 * (the binding the forgery defence rests on was not made), and within the commit deadline as an
 * accept would be. Once the store is back the genuine bytes bind and a CRC-32 forgery is refused.
 */

const SIGNING = makeCert();
const WEBHOOK_ID = '4JH86294D6297924G';
const CERT_PATH = `/v1/notifications/certs/${certId('CERT-bind-outage')}`;
const CERT_URL = `https://api.sandbox.paypal.com${CERT_PATH}`;

let fake: FakePaypal;
beforeAll(async () => {
  fake = await startFakePaypal();
  fake.routes.set(CERT_PATH, { pem: SIGNING.certPem });
});
afterAll(async () => {
  await fake?.close();
});

const endpoints = () => [{ id: 'paypal', provider: 'paypal', secrets: [{ version: 'v1', value: WEBHOOK_ID }], options: { certFetcher: fake.fetcher } }];

interface Delivery { readonly body: Buffer; readonly headers: Record<string, string> }
function delivery(): Delivery {
  const body = Buffer.from(`{"id":"WH-${randomUUID()}","event_type":"PAYMENT.CAPTURE.COMPLETED","resource":{"id":"CAPTURE1","amount":{"value":"1.00"}}}`);
  const headers = paypalHeaders(SIGNING.privateKey, CERT_URL, { transmissionId: randomUUID(), time: isoSeconds(Date.now()), webhookId: WEBHOOK_ID, body });
  return { body, headers };
}
/** Other bytes with the captured delivery's CRC-32: its signature verifies them too. */
const forgeryOf = (d: Delivery): Delivery => ({
  body: forgeSameCrc(zlibCrc32(d.body), `{"id":"WH-FORGED-${randomUUID()}","event_type":"PAYMENT.CAPTURE.COMPLETED","resource":{"id":"EVIL"},"pad":"`, '"}'),
  headers: d.headers,
});
const send = (url: string, d: Delivery) => post(`${url}/webhooks/paypal`, d.body, d.headers);

function expectUnavailable(r: HttpResponse): void {
  expect(r.status, r.text).toBe(503);
  expect(r.json().error).toBe('storage_unavailable');
  expect(r.headers['retry-after']).toBe('5');
}

/**
 * Back up: the genuine bytes are accepted (nothing was stored before), and a forgery of them is
 * refused. Retried on 503 as PayPal would: a binding that timed out still holds its slot until its
 * call returns (GroupCommitter: "stuck"), and a request in that moment is answered 503 at once.
 */
async function genuineWinsAfterwards(url: string, d: Delivery): Promise<void> {
  let ok = await send(url, d);
  for (let tries = 0; ok.status === 503 && tries < 100; tries++) {
    await new Promise((r) => setTimeout(r, 50));
    ok = await send(url, d);
  }
  expect(ok.status, ok.text).toBe(200);
  expect(ok.json().duplicate).toBe(false);
  const forged = await send(url, forgeryOf(d));
  expect(forged.status, forged.text).toBe(401);
  expect(forged.json().error).toBe('invalid_signature');
}

describe('paypal transmission binding, storage unavailable [sqlite]', () => {
  it('another process holds the write lock past busyTimeoutMs: 503 with Retry-After, /readyz not ready, no transmission id logged; afterwards the genuine bytes bind', async () => {
    const lines: string[] = [];
    const app = await startTestApp('sqlite', { endpoints: endpoints() }, {}, { urlSuffix: '?busyTimeoutMs=200', logger: captureLog(lines) });
    const blocker = new Database(app.db.url.slice('sqlite:'.length));
    try {
      const d = delivery();
      blocker.exec('BEGIN IMMEDIATE');
      expectUnavailable(await send(app.url, d));
      // The database answers a ping (a read) but refuses writes: /readyz must not say ready, as after a failed accept commit.
      const ready = await post(`${app.url}/readyz`, '', {}, 'GET');
      expect(ready.status, ready.text).toBe(503);
      expect(ready.text).toMatch(/transmission binding failed/);
      blocker.exec('ROLLBACK');
      await genuineWinsAfterwards(app.url, d);
      expect((await post(`${app.url}/readyz`, '', {}, 'GET')).status).toBe(200);
      const secrets = [d.headers['paypal-transmission-id']!, d.headers['paypal-transmission-sig']!, 'CAPTURE1', 'EVIL'];
      for (const line of lines) for (const s of secrets) expect(line).not.toContain(s);
    } finally {
      blocker.close();
      await app.stop();
    }
  });

  // SQLite goes on committing to a file deleted under it; a binding made there is gone at the next start.
  it.each([['database file', ''], ['WAL file', '-wal']])('the %s deleted under it: 503 for a transmission whose event the endpoint ignores too (its binding is its only write)', async (_what, suffix) => {
    const ignoring = [{ ...endpoints()[0]!, events: ['CUSTOMER.*'] }];
    const app = await startTestApp('sqlite', { endpoints: ignoring });
    try {
      const before = await send(app.url, delivery());
      expect(before.status, before.text).toBe(200);
      expect(before.json().ignored).toBe('unsupported_event_type');
      rmSync(`${app.db.url.slice('sqlite:'.length)}${suffix}`);
      expectUnavailable(await send(app.url, delivery()));
    } finally {
      await app.stop();
    }
  });

  it('the writer is held by a handler transaction past commitTimeoutMs: 503 while it is still held (as an accept gets), not a wait for the transaction to end', async () => {
    const app = await startTestApp('sqlite', { endpoints: endpoints(), groupCommit: { commitTimeoutMs: 300 } }, {}, { urlSuffix: '?txTimeoutMs=20000' });
    const { release, ended: tx } = await holdInTransaction(app.store);
    try {
      const d = delivery();
      // Answered (or not) while the transaction is still open: the race's other side is the transaction's own end.
      const r = await Promise.race([send(app.url, d), tx.then(() => 'the handler transaction ended first')]);
      expect(typeof r === 'string' ? r : r.status).toBe(503);
      expectUnavailable(r as HttpResponse);
      release();
      await tx;
      await genuineWinsAfterwards(app.url, d);
    } finally {
      release();
      await tx.catch(() => undefined);
      await app.stop();
    }
  }, 90_000);
});

describe.runIf(await pgAvailable())('paypal transmission binding, storage unavailable [postgres]', () => {
  const cleanups: (() => Promise<void>)[] = [];
  afterAll(async () => { for (const c of cleanups.reverse()) await c(); });

  async function appBehindProxy(commitTimeoutMs: number): Promise<{ app: RunningApp; proxy: Awaited<ReturnType<typeof proxiedPostgres>>['proxy'] }> {
    const { proxy, url } = await proxiedPostgres(cleanups);
    const config = parseConfig(configDoc(url, { endpoints: endpoints(), groupCommit: { commitTimeoutMs } }), {});
    const app = await startApp(config, { logger: pino({ level: 'silent' }), env: {}, shutdownGraceMs: 200, workers: false });
    cleanups.push(() => app.close());
    return { app, proxy };
  }

  it('unreachable: 503 with Retry-After; once it is back the genuine bytes bind and a forgery is refused', async () => {
    const { app, proxy } = await appBehindProxy(3000);
    const d = delivery();
    await proxy.stop();
    expectUnavailable(await send(app.url, d));
    await proxy.start();
    await genuineWinsAfterwards(app.url, d);
  });

  it('hung (its connections silent): 503 with Retry-After, not a request left waiting', async () => {
    const { app, proxy } = await appBehindProxy(500);
    expect((await send(app.url, delivery())).status).toBe(200);
    proxy.hang();
    expectUnavailable(await send(app.url, delivery()));
  });

  it('the binding reaches the database but its answer is lost: 503; the row it left binds the same verified bytes, so the retry is accepted and a forgery refused', async () => {
    const { db, proxy, url, direct } = await proxiedPostgres(cleanups);
    // Before the app connects: the connection that sends the binding's INSERT hears nothing after it.
    proxy.muteAnswersAfter((chunk) => chunk.includes('INSERT INTO webhook_transmission'));
    const config = parseConfig(configDoc(url, { endpoints: endpoints(), groupCommit: { commitTimeoutMs: 500 } }), {});
    const app = await startApp(config, { logger: pino({ level: 'silent' }), env: {}, shutdownGraceMs: 200, workers: false });
    cleanups.push(() => app.close());
    const d = delivery();
    expectUnavailable(await send(app.url, d));
    const bound = await direct.query('SELECT count(*)::int AS n FROM webhook_transmission WHERE transmission_id = $1', [d.headers['paypal-transmission-id']]);
    expect(bound.rows[0].n, db.url).toBe(1); // committed though the request was answered 503
    proxy.muteAnswersAfter(() => false);
    await genuineWinsAfterwards(app.url, d);
  });

  it('hung, and the server is closed: a request waiting on its binding gets 503 with Retry-After when the grace ends (as one waiting on a commit does), not a reset', async () => {
    // The commit timeout outlasts the grace (200 ms): the grace's end must answer the request.
    const { app, proxy } = await appBehindProxy(30_000);
    expect((await send(app.url, delivery())).status).toBe(200);
    proxy.hang();
    const answer = send(app.url, delivery()).then((r) => r, (err: Error) => err);
    await new Promise((r) => setTimeout(r, 300)); // its binding has been sent and is waiting
    await app.close();
    const r = await answer;
    expect(r instanceof Error ? `no answer: ${r.message}` : r.status).toBe(503);
    expectUnavailable(r as HttpResponse);
  }, 60_000);
});
