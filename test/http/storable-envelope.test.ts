import { afterAll, beforeAll, expect, it } from 'vitest';
import { MAX_KEY_BYTES } from '../../src/providers/storable.js';
import { startTestApp, storedBytes, type TestApp } from '../helpers/app.js';
import { post } from '../helpers/http.js';
import { describeEachStore } from '../helpers/stores.js';
import { stripeCase as stripe } from './cases/stripe.js';
import { signed, uid } from './cases/types.js';

/**
 * A verified event whose envelope a store cannot keep exactly is answered 400 on its own, before
 * any row is built. Each of these used to reach the group-commit batch: a lone surrogate was
 * stored as U+FFFD (the payload's AAD no longer matched its row, so it could never be opened,
 * and on PostgreSQL every retry got 503), and a NUL or an over-long key failed the whole batch on
 * PostgreSQL, answering 503 to the unrelated requests sharing it.
 */
describeEachStore('envelopes the stores must keep exactly', (kind) => {
  let app: TestApp;
  beforeAll(async () => {
    app = await startTestApp(kind, { endpoints: [stripe.config] });
  });
  afterAll(async () => {
    await app?.stop();
  });

  /** A signed Stripe event; `id`, `type` and `objectId` are JSON string contents (escapes allowed), `created` a JSON number. */
  function send(f: { id: string; type?: string; objectId?: string; created?: string }) {
    const body = Buffer.from(
      `{"id":"${f.id}","object":"event","type":"${f.type ?? 'payment_intent.succeeded'}","created":${f.created ?? '1700000000'},"data":{"object":{"id":"${f.objectId ?? 'pi_1'}"}}}`,
      'utf8',
    );
    const made = { body, headers: { 'content-type': 'application/json' }, signOpts: {}, key: f.id, type: 'x' };
    return { body, response: post(`${app.url}/webhooks/${stripe.endpoint}`, body, signed(stripe, made)) };
  }

  async function expectRejected(f: Parameters<typeof send>[0], reason: string, detail: RegExp): Promise<void> {
    const before = await app.store.countRows();
    const r = await send(f).response;
    expect(r.status, r.text).toBe(400);
    expect(r.json(), r.text).toMatchObject({ error: reason });
    expect(r.text).toMatch(detail);
    expect(await app.store.countRows()).toEqual(before);
  }

  it('an event id with a lone surrogate escape → 400 invalid_event_id, every time, nothing stored', async () => {
    const id = `evt_${uid()}\\ud800x`;
    await expectRejected({ id }, 'invalid_event_id', /well-formed/);
    await expectRejected({ id }, 'invalid_event_id', /well-formed/); // the provider's retry: the same answer
    await expectRejected({ id: `evt_${uid()}\\udc00` }, 'invalid_event_id', /well-formed/);
  });

  it('event ids that differ only in invalid UTF-8 bytes (both read as U+FFFD) → 400 invalid_event_id, not one row and a "duplicate"', async () => {
    const before = await app.store.countRows();
    const base = `evt_${uid()}_`;
    for (const bad of [0xfe, 0xff]) {
      const body = Buffer.concat([Buffer.from(`{"id":"${base}`), Buffer.from([bad]), Buffer.from('","object":"event","type":"payment_intent.succeeded","created":1700000000,"data":{"object":{"id":"pi_1"}}}')]);
      const made = { body, headers: { 'content-type': 'application/json' }, signOpts: {}, key: 'x', type: 'x' };
      const r = await post(`${app.url}/webhooks/${stripe.endpoint}`, body, signed(stripe, made));
      expect(r.status, r.text).toBe(400);
      expect(r.json()).toMatchObject({ error: 'invalid_event_id' });
      expect(r.text).toMatch(/not valid UTF-8/);
    }
    expect(await app.store.countRows()).toEqual(before);
  });

  it('a NUL in the event id → 400 invalid_event_id; in the type or a lone surrogate in the object id → 400 invalid_envelope', async () => {
    await expectRejected({ id: `evt_${uid()}\\u0000` }, 'invalid_event_id', /NUL/);
    await expectRejected({ id: `evt_${uid()}`, type: 'payment_intent.succeeded\\u0000' }, 'invalid_envelope', /event type contains a NUL/);
    await expectRejected({ id: `evt_${uid()}`, objectId: 'pi_\\ud83d' }, 'invalid_envelope', /object id is not well-formed/);
  });

  it(`an event id of ${MAX_KEY_BYTES} UTF-8 bytes is accepted and de-duplicated; one byte more → 400 invalid_event_id`, async () => {
    const head = `evt_${uid()}`; // 36 bytes
    const id = head + '東'.repeat((MAX_KEY_BYTES - head.length) / 3); // 3 bytes each: 1,023 in all
    const longest = id + 'x';
    expect(Buffer.byteLength(longest)).toBe(MAX_KEY_BYTES);
    const first = await send({ id: longest }).response;
    expect(first.status, first.text).toBe(200);
    const again = await send({ id: longest }).response;
    expect(again.json()).toEqual({ inbox_id: first.json().inbox_id, duplicate: true });
    expect(await app.store.getInbox(first.json().inbox_id)).toMatchObject({ providerEventId: longest });
    await expectRejected({ id: longest + 'x' }, 'invalid_event_id', new RegExp(`longer than ${MAX_KEY_BYTES} bytes`));
  });

  it('astral characters (escaped surrogate pairs) in the id round-trip: the stored payload opens under the row key', async () => {
    const id = `evt_${uid()}_\\ud83d\\ude00`;
    const { body, response } = send({ id });
    const r = await response;
    expect(r.status, r.text).toBe(200);
    const row = (await app.store.getInbox(r.json().inbox_id))!;
    expect(row.providerEventId).toBe(JSON.parse(`"${id}"`));
    expect((await storedBytes(app, row)).equals(body)).toBe(true);
    expect((await send({ id }).response).json()).toEqual({ inbox_id: row.inboxId, duplicate: true });
  });

  it('a provider time outside years 1–9999 is stored as unknown instead of failing the batch', async () => {
    const far = await send({ id: `evt_${uid()}`, created: '1e20' }).response;
    expect(far.status, far.text).toBe(200);
    expect(await app.store.getInbox(far.json().inbox_id)).toMatchObject({ providerCreatedAtMs: null });
    const usual = await send({ id: `evt_${uid()}`, created: '1700000000' }).response;
    expect(await app.store.getInbox(usual.json().inbox_id)).toMatchObject({ providerCreatedAtMs: 1_700_000_000_000 });
  });
});
