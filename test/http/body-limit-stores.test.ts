import { afterAll, beforeAll, expect, it } from 'vitest';
import { PayloadCipher } from '../../src/crypto/payload-cipher.js';
import { PAYLOAD_KEY, STRIPE_SECRET, startTestApp, type TestApp } from '../helpers/app.js';
import { stripeEvent, stripeHeaders } from '../helpers/events.js';
import { rawExchange, statusOf } from '../helpers/http.js';
import { describeEachStore } from '../helpers/stores.js';

/**
 * maxBodyBytes at its edge, on every store: a body of exactly the limit is accepted and committed
 * (its row's payload opens to the very bytes sent), one byte more is 413 and leaves no row. Both
 * framings: Content-Length (refused from the header) and chunked (refused while streaming).
 * test/http/limits.test.ts covers the same edge on SQLite only, without looking at the row.
 */

const MAX = 2048;
/** The payload key startTestApp configures, held here independently of the app's keyring. */
const cipher = new PayloadCipher(new Map([['k1', Buffer.from(PAYLOAD_KEY, 'base64')]]), 'k1');

const head = (body: Buffer, framing: string) =>
  Buffer.from(`POST /webhooks/stripe HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\nstripe-signature: ${stripeHeaders(body)['stripe-signature']}\r\n${framing}\r\nconnection: close\r\n\r\n`);

/** The request with its body sent whole, after a Content-Length header. */
const withLength = (body: Buffer) => Buffer.concat([head(body, `content-length: ${body.length}`), body]);

/** The request with its body in two chunks (1000 bytes, the rest), chunked transfer coding. */
const chunked = (body: Buffer) => {
  const chunk = (b: Buffer) => Buffer.concat([Buffer.from(`${b.length.toString(16)}\r\n`), b, Buffer.from('\r\n')]);
  return Buffer.concat([head(body, 'transfer-encoding: chunked'), chunk(body.subarray(0, 1000)), chunk(body.subarray(1000)), Buffer.from('0\r\n\r\n')]);
};

const FRAMINGS = [['Content-Length', withLength], ['chunked', chunked]] as const;

describeEachStore('maxBodyBytes at its edge, committed', (kind) => {
  let app: TestApp;
  let port: number;
  beforeAll(async () => {
    app = await startTestApp(kind, {
      endpoints: [{ id: 'stripe', provider: 'stripe', secrets: [{ version: 'v1', value: STRIPE_SECRET }], maxBodyBytes: MAX }],
    });
    port = Number(new URL(app.url).port);
  });
  afterAll(async () => { await app?.stop(); });

  const send = async (bytes: Buffer) => {
    const r = await rawExchange(port, bytes, 5000);
    return { status: statusOf(r.text), text: r.text, body: r.text.slice(r.text.indexOf('\r\n\r\n') + 4) };
  };

  it.each(FRAMINGS)('%s: a body of exactly maxBodyBytes is accepted, and its stored payload opens to exactly those bytes', async (framing, frame) => {
    const id = `evt_exact_${framing}`;
    const body = stripeEvent(id, { size: MAX });
    expect(body.length).toBe(MAX);
    const before = await app.store.countRows();
    const r = await send(frame(body));
    expect(r.status, r.text).toBe(200);
    const answer = JSON.parse(r.body) as { inbox_id: string; duplicate: boolean };
    expect(answer.duplicate).toBe(false);

    const row = await app.store.getInbox(answer.inbox_id);
    expect(row).toMatchObject({ provider: 'stripe', endpointId: 'stripe', providerEventId: id });
    const stored = await app.store.getPayload(row!.rawPayloadRef!);
    const opened = cipher.open(stored!, { provider: 'stripe', endpointId: 'stripe', providerEventId: id });
    expect(opened.length).toBe(MAX);
    expect(opened.equals(body)).toBe(true);
    expect(await app.store.countRows()).toEqual({ inbox: before.inbox + 1, outbox: before.outbox + 1, payload: before.payload + 1 });
  });

  it.each(FRAMINGS)('%s: one byte over maxBodyBytes is 413 payload_too_large and nothing is stored', async (framing, frame) => {
    const id = `evt_over_${framing}`;
    const body = stripeEvent(id, { size: MAX + 1 });
    expect(body.length).toBe(MAX + 1);
    const before = await app.store.countRows();
    const r = await send(frame(body));
    expect(r.status, r.text).toBe(413);
    expect(r.text).toContain('payload_too_large');
    expect(await app.store.countRows()).toEqual(before);
    expect(await app.store.listInboxIds()).toHaveLength(before.inbox);
  });
});
