import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestApp, type TestApp } from '../helpers/app.js';
import { stripeEvent, stripeHeaders } from '../helpers/events.js';
import { post } from '../helpers/http.js';
import { changes, scrape, series } from '../helpers/metric-samples.js';
import { describeEachStore } from '../helpers/stores.js';

/**
 * Step 7 on the event loop: a correctly signed body that is not a usable event envelope is
 * refused with 400 and its reason, nothing is stored, and the request counts as `malformed`.
 * The bodies here are a few dozen bytes, far below the offload threshold (256 KiB by default,
 * where no workers share the process), so they are parsed on the normal path, not the helper
 * thread (test/http/offload.test.ts covers that one). The signature is verified first: the
 * matched-secret counter moves, so the 400 comes from the parse, not from verification.
 */
const REQUESTS = 'webhook_requests_total';
const MATCHES = 'webhook_secret_version_matches_total';
const TYPE = 'payment_intent.succeeded';
const json = (v: unknown) => Buffer.from(JSON.stringify(v));

const REFUSED: [string, string, Buffer][] = [
  ['not JSON (cut short)', 'malformed_payload', Buffer.from(`{"id":"evt_env_cut","object":"event","type":"${TYPE}",`)],
  ['an empty body', 'malformed_payload', Buffer.alloc(0)],
  ['an object followed by more bytes', 'malformed_payload', Buffer.from(`{"id":"evt_env_trail","type":"${TYPE}"} {}`)],
  ['a JSON array holding a whole event', 'malformed_payload', json([{ id: 'evt_env_array', object: 'event', type: TYPE }])],
  ['a JSON string', 'malformed_payload', json('evt_env_string')],
  ['JSON null', 'malformed_payload', Buffer.from('null')],
  ['no id', 'missing_event_id', json({ object: 'event', type: TYPE, data: { object: { id: 'pi_1' } } })],
  ['an empty id', 'missing_event_id', json({ id: '', object: 'event', type: TYPE })],
  ['a null id', 'missing_event_id', json({ id: null, object: 'event', type: TYPE })],
  ['an object as id', 'missing_event_id', json({ id: { v: 'evt_env_obj' }, object: 'event', type: TYPE })],
  ['no type', 'missing_event_type', json({ id: 'evt_env_notype', object: 'event', data: { object: { id: 'pi_2' } } })],
  ['a boolean type', 'missing_event_type', json({ id: 'evt_env_booltype', object: 'event', type: true })],
  ['an array as type', 'missing_event_type', json({ id: 'evt_env_arraytype', object: 'event', type: [TYPE] })],
];

describeEachStore('a verified body that is not an event envelope (step 7, event-loop path)', (kind) => {
  let app: TestApp;
  const url = () => `${app.url}/webhooks/stripe`;
  const send = (body: Buffer, headers = stripeHeaders(body)) => post(url(), body, { ...headers, 'content-length': String(body.length) });
  beforeAll(async () => {
    app = await startTestApp(kind);
  });
  afterAll(async () => {
    await app?.stop();
  });

  describe('→ 400 with its reason, no row, counted as malformed', () => {
    it.each(REFUSED)('%s → 400 %s', async (_name, reason, body) => {
      const rows = await app.store.countRows();
      const before = await scrape(app.url);
      const r = await send(body);
      expect(r.status, r.text).toBe(400);
      expect(r.json().error, r.text).toBe(reason);
      expect(await app.store.countRows()).toEqual(rows);
      const after = await scrape(app.url);
      expect(changes(before, after, REQUESTS)).toEqual({ [series(REQUESTS, { endpoint: 'stripe', outcome: 'malformed' })]: 1 });
      expect(changes(before, after, MATCHES)).toEqual({ [series(MATCHES, { endpoint: 'stripe', version: 'v1' })]: 1 });
      expect(changes(before, after, 'webhook_db_commit_latency_seconds_count')).toEqual({});
    });
  });

  it('the same refusal is not reached without a valid signature: an unparseable body wrongly signed is 401, not 400', async () => {
    const body = REFUSED[0]![2];
    const before = await scrape(app.url);
    const r = await send(body, stripeHeaders(body, 'whsec_wrong'));
    expect(r.status, r.text).toBe(401);
    expect(r.json().error).toBe('invalid_signature');
    const after = await scrape(app.url);
    expect(changes(before, after, REQUESTS)).toEqual({ [series(REQUESTS, { endpoint: 'stripe', outcome: 'invalid_signature' })]: 1 });
    expect(changes(before, after, MATCHES)).toEqual({});
  });

  it('control: a well-formed event signed the same way is accepted, stored and counted as accepted', async () => {
    const rows = await app.store.countRows();
    const before = await scrape(app.url);
    const body = stripeEvent('evt_env_ok');
    const r = await send(body);
    expect(r.status, r.text).toBe(200);
    expect(r.json()).toEqual({ inbox_id: expect.any(String), duplicate: false });
    expect(await app.store.countRows()).toEqual({ inbox: rows.inbox + 1, outbox: rows.outbox + 1, payload: rows.payload + 1 });
    const after = await scrape(app.url);
    expect(changes(before, after, REQUESTS)).toEqual({ [series(REQUESTS, { endpoint: 'stripe', outcome: 'accepted' })]: 1 });
  });
});
