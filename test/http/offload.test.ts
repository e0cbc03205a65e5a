import { readdirSync, readFileSync } from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it, vi, type MockInstance } from 'vitest';
import { parseConfig } from '../../src/config/schema.js';
import { PayloadCipher, sha256 } from '../../src/crypto/payload-cipher.js';
import { BUSY_HOLD_MS, DEFAULT_OFFLOAD_WHEN_IN_FLIGHT, OFFLOAD_THREAD_NICE_STEPS, OffloadLane, offloadThreshold, offloadWhenInFlight } from '../../src/http/offload.js';
import { viewOf } from '../../src/http/request-view.js';
import { configDoc, startTestApp, storedBytes, type TestApp } from '../helpers/app.js';
import { stripeEvent, stripeHeaders } from '../helpers/events.js';
import { post } from '../helpers/http.js';
import { changes, scrape } from '../helpers/metric-samples.js';
import { describeEachStore } from '../helpers/stores.js';
import { CASES } from './cases/index.js';
import { RICH, signed } from './cases/types.js';

/**
 * Large verified bodies are parsed and sealed on a helper thread (limits.offloadBodyBytes).
 * Here the threshold is 1 byte, so every adapter whose envelope can move there goes through
 * it: the stored row, hash and bytes must be exactly what the event-loop path stores, and a
 * parse failure there must answer as it does on the event loop.
 */

describeEachStore('large bodies parsed and sealed off the event loop', (kind) => {
  let app: TestApp;
  /** Every request the app handed to its helper thread (the real lane, watched). */
  let lane: MockInstance<OffloadLane['run']>;
  beforeAll(async () => {
    lane = vi.spyOn(OffloadLane.prototype, 'run');
    app = await startTestApp(kind, { endpoints: CASES.map((c) => c.config), limits: { offloadBodyBytes: 1 } });
  });
  afterAll(async () => {
    lane?.mockRestore();
    await app?.stop();
  });
  /** How many requests to `endpoint` went to the helper thread (run() took them: a promise, not null). */
  const offloadedTo = (endpoint: string) => lane.mock.calls.filter(([ep], i) => ep.id === endpoint && lane.mock.results[i]!.value !== null).length;

  it.each(CASES)('$name: accepted with the same row, hash and exact stored bytes; a retry is a duplicate', async (c) => {
    const m = c.make(RICH);
    const headers = signed(c, m);
    const before = offloadedTo(c.endpoint);
    const r = await post(`${app.url}/webhooks/${c.endpoint}`, m.body, headers);
    // Parsed and sealed on the helper thread, where the adapter's envelope can move there (not a
    // multi-event adapter's, nor PayPal's: its signature metadata holds a URL, which does not clone).
    const stays = Boolean(c.adapter.envelopes || c.adapter.acceptedReply) || c.name === 'paypal';
    expect(offloadedTo(c.endpoint) - before, 'requests handed to the helper thread').toBe(stays ? 0 : 1);
    expect(r.status, r.text).toBe(200);
    expect(r.json()).toEqual({ inbox_id: expect.any(String), duplicate: false });
    const row = (await app.store.getInbox(r.json().inbox_id))!;
    expect(row).toMatchObject({ provider: c.name, endpointId: c.endpoint, providerEventId: m.key, eventType: m.type, matchedSecretVersion: 'v2' });
    expect(row.payloadHash.equals(sha256(m.body))).toBe(true);
    expect((await storedBytes(app, row, { provider: c.name, endpointId: c.endpoint, providerEventId: m.key })).equals(m.body)).toBe(true);
    const again = await post(`${app.url}/webhooks/${c.endpoint}`, m.body, headers);
    expect(again.json()).toEqual({ inbox_id: row.inboxId, duplicate: true });
  });

  describe('a verified body that does not parse answers as on the event loop, and nothing is stored', () => {
    it.each([
      ['not JSON', 'malformed_payload', Buffer.from('{"id": "evt_broken", ')],
      ['no event id', 'missing_event_id', Buffer.from(JSON.stringify({ object: 'event', type: 'payment_intent.succeeded', pad: 'x'.repeat(300_000) }))],
      // The stores' checks (storable.ts) run on the helper thread too: the event loop no longer repeats them for these.
      ['a NUL in the event id', 'invalid_event_id', Buffer.from(JSON.stringify({ id: 'evt_\u0000', object: 'event', type: 'payment_intent.succeeded' }))],
      ['an event id read from invalid UTF-8', 'invalid_event_id', Buffer.concat([Buffer.from('{"id":"evt_off_'), Buffer.from([0xfe]), Buffer.from('","object":"event","type":"payment_intent.succeeded"}')])],
    ])('%s → 400 %s', async (_name, reason, body) => {
      const before = await app.store.countRows();
      const sent = offloadedTo('stripe');
      const r = await post(`${app.url}/webhooks/stripe`, body, stripeHeaders(body, CASES.find((c) => c.name === 'stripe')!.secrets.v2));
      expect(offloadedTo('stripe') - sent, 'parsed on the helper thread').toBe(1);
      expect(r.status, r.text).toBe(400);
      expect(r.json().error).toBe(reason);
      expect(await app.store.countRows()).toEqual(before);
    });
  });

  it('a 900 KiB event and small ones sent together are all stored exactly', async () => {
    const stripe = CASES.find((c) => c.name === 'stripe')!;
    const bodies = [stripe.make('x'.repeat(900 * 1024)), ...Array.from({ length: 20 }, () => stripe.make(RICH))];
    const answers = await Promise.all(bodies.map((m) => post(`${app.url}/webhooks/stripe`, m.body, signed(stripe, m))));
    for (const [i, r] of answers.entries()) {
      expect(r.status, r.text).toBe(200);
      const row = (await app.store.getInbox(r.json().inbox_id))!;
      expect(row.providerEventId).toBe(bodies[i]!.key);
      expect((await storedBytes(app, row, { provider: 'stripe', endpointId: stripe.endpoint, providerEventId: bodies[i]!.key })).equals(bodies[i]!.body)).toBe(true);
    }
  });
});

describe('an adapter whose options hold ${env:} secrets, on the helper thread', () => {
  // A library caller gives its secrets as parseConfig's and startApp's env, not process.env; the
  // helper thread builds its own adapter from the same options and must read the same env.
  let app: TestApp;
  const checkout = CASES.find((c) => c.name === 'checkout')!;
  beforeAll(async () => {
    const endpoint = { ...checkout.config, options: { authorization: '${env:WI_TEST_CKO_AUTHORIZATION}' } };
    app = await startTestApp('sqlite', { endpoints: [endpoint], limits: { offloadBodyBytes: 1 } }, { WI_TEST_CKO_AUTHORIZATION: 'Bearer cko-auth-from-callers-env' });
  });
  afterAll(async () => {
    await app?.stop();
  });

  it('is built from the env the app was started with (not process.env): the event is accepted and stored exactly', async () => {
    expect(process.env.WI_TEST_CKO_AUTHORIZATION).toBeUndefined();
    const m = checkout.make(RICH);
    const r = await post(`${app.url}/webhooks/${checkout.endpoint}`, m.body, { ...signed(checkout, m), authorization: 'Bearer cko-auth-from-callers-env' });
    expect(r.status, r.text).toBe(200);
    const row = (await app.store.getInbox(r.json().inbox_id))!;
    expect(row.providerEventId).toBe(m.key);
    expect((await storedBytes(app, row, { provider: 'checkout', endpointId: checkout.endpoint, providerEventId: m.key })).equals(m.body)).toBe(true);
  });
});

describe('a request snapshot cloned to the helper thread', () => {
  it('answers headers as the original view does, and never an inherited property', () => {
    const headers = Object.assign(Object.create(null), { 'stripe-signature': ['t=1,v1=ab'], 'x-dup': ['a', 'b'] }) as Record<string, string[]>;
    const view = viewOf(structuredClone({ headers, contentType: 'application/json; charset=utf-8', target: '/webhooks/x?a=1' }));
    expect(view.single('stripe-signature')).toBe('t=1,v1=ab');
    expect(() => view.single('x-dup')).toThrow(/appears 2 times/);
    expect(view.single('constructor')).toBeUndefined();
    expect(view.all('__proto__')).toEqual([]);
    expect(view.mediaType).toBe('application/json');
    expect(view.target).toBe('/webhooks/x?a=1');
  });
});

describeEachStore('small bodies on the helper thread while many requests are in progress (limits.offloadWhenInFlight)', (kind) => {
  const stripe = CASES.find((c) => c.name === 'stripe')!;
  const OFFLOADED = 'webhook_offloaded_bodies_total';
  let apps: TestApp[] = [];
  const start = async (whenInFlight: number) => {
    // Large bodies from 256 KiB (the default where no workers share the process): RICH events are ~2 KiB.
    const app = await startTestApp(kind, { endpoints: [stripe.config], limits: { offloadBodyBytes: 256 * 1024, offloadWhenInFlight: whenInFlight } });
    apps.push(app);
    return app;
  };
  afterAll(async () => {
    await Promise.all(apps.map((a) => a.stop()));
    apps = [];
  });
  /** Posts events and checks each is stored exactly (row, hash, the sealed bytes), as on the event loop. */
  const postAndCheck = async (app: TestApp, events: ReturnType<typeof stripe.make>[]) => {
    const answers = await Promise.all(events.map((m) => post(`${app.url}/webhooks/${stripe.endpoint}`, m.body, signed(stripe, m))));
    for (const [i, r] of answers.entries()) {
      expect(r.status, r.text).toBe(200);
      expect(r.json()).toEqual({ inbox_id: expect.any(String), duplicate: false });
      const row = (await app.store.getInbox(r.json().inbox_id))!;
      expect(row.providerEventId).toBe(events[i]!.key);
      expect(row.payloadHash.equals(sha256(events[i]!.body))).toBe(true);
      expect((await storedBytes(app, row, { provider: 'stripe', endpointId: stripe.endpoint, providerEventId: events[i]!.key })).equals(events[i]!.body)).toBe(true);
    }
    return answers;
  };

  it('from 1 in progress (every request counts itself), busy once it has lasted BUSY_HOLD_MS: the first body stays, a later one goes as "busy"; both stored exactly', async () => {
    const app = await start(1);
    const before = await scrape(app.url);
    const first = stripe.make(RICH);
    expect(first.body.length).toBeLessThan(256 * 1024);
    await postAndCheck(app, [first]); // starts the hold: not yet busy long enough
    expect(changes(before, await scrape(app.url), OFFLOADED)).toEqual({});
    await sleep(BUSY_HOLD_MS + 50);
    const m = stripe.make(RICH);
    const [r] = await postAndCheck(app, [m]);
    const again = await post(`${app.url}/webhooks/${stripe.endpoint}`, m.body, signed(stripe, m));
    expect(again.json()).toEqual({ inbox_id: r!.json().inbox_id, duplicate: true });
    expect(changes(before, await scrape(app.url), OFFLOADED)).toEqual({ [`${OFFLOADED}{reason="busy"}`]: 2 });
  });

  it('below the threshold a small body stays on the event loop: one request at a time never reaches 3 in progress', async () => {
    const app = await start(3);
    const before = await scrape(app.url);
    for (let i = 0; i < 4; i++) await postAndCheck(app, [stripe.make(RICH)]);
    await sleep(BUSY_HOLD_MS + 50);
    await postAndCheck(app, [stripe.make(RICH)]);
    expect(changes(before, await scrape(app.url), OFFLOADED)).toEqual({});
  });
});

describe('OffloadLane.applies: when a small body counts as busy', () => {
  const stripeAdapter = CASES.find((c) => c.name === 'stripe')!.adapter;
  const small = Buffer.alloc(1000);
  it('only after every sample for BUSY_HOLD_MS was at or over the threshold; one sample below starts it again', async () => {
    const lane = new OffloadLane(256 * 1024, 16);
    expect(lane.applies(stripeAdapter, Buffer.alloc(256 * 1024), 0)).toBe('large');
    expect(lane.applies(stripeAdapter, small, 15)).toBeUndefined();
    expect(lane.applies(stripeAdapter, small, 16)).toBeUndefined(); // busy starts now
    expect(lane.applies(stripeAdapter, small, 40)).toBeUndefined(); // still within the hold
    await sleep(BUSY_HOLD_MS + 20);
    expect(lane.applies(stripeAdapter, small, 17)).toBe('busy');
    expect(lane.applies(stripeAdapter, small, 3)).toBeUndefined(); // a burst ended: the hold starts again
    expect(lane.applies(stripeAdapter, small, 20)).toBeUndefined();
    await sleep(BUSY_HOLD_MS + 20);
    expect(lane.applies(stripeAdapter, small, 20)).toBe('busy');
    await lane.close();
  });

  it('never with whenInFlight 0, nor for a multi-event adapter', async () => {
    const off = new OffloadLane(256 * 1024, 0);
    expect(off.applies(stripeAdapter, small, 1000)).toBeUndefined();
    const multi = CASES.find((c) => c.adapter.envelopes)!.adapter;
    const lane = new OffloadLane(256 * 1024, 1);
    lane.applies(stripeAdapter, small, 5);
    await sleep(BUSY_HOLD_MS + 20);
    expect(lane.applies(multi, small, 5)).toBeUndefined();
    expect(lane.applies(stripeAdapter, small, 5)).toBe('busy');
    await Promise.all([off.close(), lane.close()]);
  });
});

describe('offloadWhenInFlight', () => {
  it('defaults to on for PostgreSQL and off for SQLite (whose writer thread needs the other core); a configured value always wins', () => {
    expect(offloadWhenInFlight(undefined, 'postgres')).toBe(DEFAULT_OFFLOAD_WHEN_IN_FLIGHT);
    expect(DEFAULT_OFFLOAD_WHEN_IN_FLIGHT).toBe(16);
    expect(offloadWhenInFlight(undefined, 'sqlite')).toBe(0);
    expect(offloadWhenInFlight(0, 'postgres')).toBe(0);
    expect(offloadWhenInFlight(4, 'sqlite')).toBe(4);
  });
});

describe('offloadThreshold', () => {
  it('by default offloads only where the workers do not share the process; a configured value always wins', () => {
    expect(offloadThreshold(undefined, false)).toBe(256 * 1024);
    expect(offloadThreshold(undefined, true)).toBe(0);
    expect(offloadThreshold(0, false)).toBe(0);
    expect(offloadThreshold(4096, true)).toBe(4096);
  });
});

describe('the helper thread dying', () => {
  it('fails the requests it held (→ 503, nothing accepted) and the next large body starts a new thread', async () => {
    const endpoint = parseConfig(configDoc('sqlite::memory:'), {}).endpoints[0]!;
    const cipher = new PayloadCipher(new Map([['k1', Buffer.alloc(32, 3)]]), 'k1');
    const snapshot = { headers: {}, contentType: 'application/json', target: '/webhooks/stripe' };
    const lane = new OffloadLane(1);
    try {
      const first = await lane.run(endpoint, snapshot, { timestamp: null }, stripeEvent('evt_first'), cipher)!;
      expect(first.envelope.eventId).toBe('evt_first');
      const thread = (lane as unknown as { calls: { worker: { terminate(): Promise<number> } } }).calls.worker;
      const dying = thread.terminate();
      // Sent to a thread that is stopping: never answered, failed when the thread exits.
      await expect(lane.run(endpoint, snapshot, { timestamp: null }, stripeEvent('evt_lost'), cipher)).rejects.toThrow(/parse thread stopped/);
      await dying;
      const next = await lane.run(endpoint, snapshot, { timestamp: null }, stripeEvent('evt_next'), cipher)!;
      expect(next.envelope.eventId).toBe('evt_next');
      expect(cipher.open(next.payload, { provider: 'stripe', endpointId: endpoint.id, providerEventId: 'evt_next' }).equals(stripeEvent('evt_next'))).toBe(true);
    } finally {
      await lane.close();
    }
  });
});

/** tid → nice value of every thread of this process (Linux: field 19 of /proc/self/task/<tid>/stat). */
function threadNices(): Map<number, number> {
  const out = new Map<number, number>();
  for (const tid of readdirSync('/proc/self/task')) {
    let stat: string;
    try {
      stat = readFileSync(`/proc/self/task/${tid}/stat`, 'utf8');
    } catch {
      continue; // the thread ended meanwhile
    }
    // Fields after the command name (which may hold spaces) start at field 3.
    out.set(Number(tid), Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[19 - 3]));
  }
  return out;
}

describe.runIf(process.platform === 'linux')('the helper thread\'s CPU priority (Linux)', () => {
  it('is lowered for the helper thread only: the event loop, which serves every request, keeps its own', async () => {
    const endpoint = parseConfig(configDoc('sqlite::memory:'), {}).endpoints[0]!;
    const cipher = new PayloadCipher(new Map([['k1', Buffer.alloc(32, 3)]]), 'k1');
    const loopNice = threadNices().get(process.pid)!;
    const helperNice = Math.min(19, loopNice + OFFLOAD_THREAD_NICE_STEPS);
    const before = new Set(threadNices().keys());
    const lane = new OffloadLane(1);
    try {
      const done = await lane.run(endpoint, { headers: {}, contentType: 'application/json', target: '/webhooks/stripe' }, { timestamp: null }, stripeEvent('evt_nice'), cipher)!;
      expect(done.envelope.eventId).toBe('evt_nice');
      const nices = threadNices();
      // The lane's thread is among the new ones (V8 and libuv may start others, at the loop's nice).
      const lowered = [...nices].filter(([tid, nice]) => !before.has(tid) && nice === helperNice);
      expect(lowered).toHaveLength(1);
      expect(nices.get(process.pid)).toBe(loopNice);
    } finally {
      await lane.close();
    }
  });
});
