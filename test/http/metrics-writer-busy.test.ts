import { afterEach, expect, it, describe } from 'vitest';
import { startTestApp, STRIPE_SECRET, type TestApp } from '../helpers/app.js';
import { stripeEvent, stripeHeaders } from '../helpers/events.js';
import { post } from '../helpers/http.js';
import { scrape, series, valueOf, type Samples } from '../helpers/metric-samples.js';
import { holdInTransaction } from '../helpers/stores.js';

/**
 * On SQLite every write runs on the store's one writer thread. The queue gauges' reads (backlog,
 * queue stats) ran there too: a scrape waited behind a handler transaction (up to txTimeoutMs),
 * and every accept waited behind a scrape (~340 ms at 300,000 PENDING rows). They run on a
 * read-only connection of their own, so a scrape answers with fresh numbers while the writer is held.
 */
describe('/metrics while the SQLite writer is held by a handler transaction', () => {
  let app: TestApp | undefined;
  let release: () => void = () => undefined;
  let tx: Promise<void> | undefined;
  afterEach(async () => {
    release();
    await tx?.catch(() => undefined);
    await app?.stop();
    app = undefined;
    tx = undefined;
  });

  // Routed to a broker never reached (workers and relay off): each event leaves an unpublished outbox row too.
  const start = () => startTestApp('sqlite', {
    destinations: [{ id: 'bus', type: 'nats', url: 'nats://127.0.0.1:1', subject: 'wi.{provider}.{type}', timeoutMs: 1000 }],
    endpoints: [{ id: 'stripe', provider: 'stripe', secrets: [{ version: 'v1', value: STRIPE_SECRET }], routes: [{ events: ['*'], destination: 'bus' }] }],
  }, {}, { urlSuffix: '?txTimeoutMs=60000' });

  async function accept(a: TestApp, id: string): Promise<void> {
    const body = stripeEvent(id);
    const r = await post(`${a.url}/webhooks/stripe`, body, stripeHeaders(body));
    expect(r.status, r.text).toBe(200);
  }

  /** Holds the writer with an open handler transaction until release(). */
  async function holdWriter(a: TestApp): Promise<void> {
    ({ release, ended: tx } = await holdInTransaction(a.store));
  }

  const pending = series('webhook_inbox_rows', { status: 'PENDING' });
  const unpublished = series('webhook_outbox_unpublished');
  const numbers = (s: Samples) => ({ pending: valueOf(s, pending), unpublished: valueOf(s, unpublished) });

  it('a scrape answers with the current backlog and outbox counts, read while the writer is held', async () => {
    app = await start();
    for (const id of ['evt_held_1', 'evt_held_2', 'evt_held_3']) await accept(app, id);
    // No scrape before: a value shown now was read now, not kept from an earlier read.
    await holdWriter(app);
    expect(numbers(await scrape(app.url))).toEqual({ pending: 3, unpublished: 3 });
  });

  it('concurrent scrapes all give the current numbers, and a scrape after a commit sees it', async () => {
    app = await start();
    for (const id of ['evt_burst_1', 'evt_burst_2']) await accept(app, id);
    await holdWriter(app);
    const burst = await Promise.all(Array.from({ length: 6 }, () => scrape(app!.url)));
    for (const s of burst) expect(numbers(s)).toEqual({ pending: 2, unpublished: 2 });
    release();
    await tx;
    await accept(app, 'evt_burst_3');
    expect(numbers(await scrape(app.url))).toEqual({ pending: 3, unpublished: 3 });
  });
});
