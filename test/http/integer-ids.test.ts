import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PROVIDERS } from '../../src/providers/registry.js';
import { startTestApp, type TestApp } from '../helpers/app.js';
import { post } from '../helpers/http.js';
import { describeEachStore } from '../helpers/stores.js';

/**
 * A generic-hmac endpoint whose event id is a JSON number (`idPath`). Ids past ±2^53 (64-bit
 * ids) keep their exact digits. JSON.parse rounds 9007199254740993 to …992; rounded ids were
 * therefore refused (400 for every delivery, so the provider gave up on them), since keying
 * them would merge two events into one. A path through an array index still needs the parsed
 * tree, where such an id cannot be kept exact: it is still refused rather than rounded.
 */
const SECRET = 'integer-ids-secret';
const OPTIONS = { signatureHeader: 'x-signature', prefix: 'sha256=', idPath: 'id', objectIdPath: 'data.id' };
const ARRAY_OPTIONS = { signatureHeader: 'x-signature', prefix: 'sha256=', idPath: 'events.0.id' };
const endpoint = (id: string, options: Record<string, unknown>) => ({ id, provider: 'generic-hmac', secrets: [{ version: 'v1', value: SECRET }], options });

describeEachStore('integer event ids through a JSON path (generic-hmac)', (kind) => {
  let app: TestApp;
  beforeAll(async () => {
    app = await startTestApp(kind, { endpoints: [endpoint('ints', OPTIONS), endpoint('ints-array', ARRAY_OPTIONS)] });
  });
  afterAll(async () => {
    await app?.stop();
  });

  const send = (endpointId: string, options: Record<string, unknown>, text: string) => {
    const body = Buffer.from(text, 'utf8');
    const headers = PROVIDERS['generic-hmac']!(options, 'x').sign(body, SECRET, {});
    return post(`${app.url}/webhooks/${endpointId}`, body, { ...headers, 'content-type': 'application/json', 'content-length': String(body.length) });
  };
  const accept = async (text: string) => {
    const r = await send('ints', OPTIONS, text);
    expect(r.status, r.text).toBe(200);
    return r.json() as { inbox_id: string; duplicate: boolean };
  };

  it('two ids that differ only past 2^53 are two events, each stored under its exact digits; a redelivery is a duplicate', async () => {
    const a = await accept('{"id":9007199254740993,"type":"order.paid","data":{"id":18446744073709551615}}');
    const b = await accept('{"id":9007199254740992,"type":"order.paid","data":{"id":1}}');
    expect(a.duplicate).toBe(false);
    expect(b.duplicate).toBe(false);
    expect(b.inbox_id).not.toBe(a.inbox_id);
    const rowA = (await app.store.getInbox(a.inbox_id))!;
    expect(rowA.providerEventId).toBe('9007199254740993');
    expect(rowA.objectId).toBe('18446744073709551615');
    expect((await app.store.getInbox(b.inbox_id))!.providerEventId).toBe('9007199254740992');

    const again = await accept('{"id":9007199254740993, "type":"order.paid","data":{"id":18446744073709551615}}');
    expect(again).toEqual({ inbox_id: a.inbox_id, duplicate: true });
  });

  it('safe integers keep the key they always had: 42, 42.0 and 4.2e1 are one event', async () => {
    const first = await accept('{"id":42,"type":"order.paid"}');
    expect(first.duplicate).toBe(false);
    expect((await app.store.getInbox(first.inbox_id))!.providerEventId).toBe('42');
    expect(await accept('{"id":42.0,"type":"order.paid"}')).toEqual({ inbox_id: first.inbox_id, duplicate: true });
    expect(await accept('{"id":4.2e1,"type":"order.paid"}')).toEqual({ inbox_id: first.inbox_id, duplicate: true });
  });

  it('a number that is not exact as written (1e30, 2^53 + 1 with a fraction) is refused, not rounded into a key', async () => {
    for (const id of ['1e30', '9007199254740993.0']) {
      const before = await app.store.countRows();
      const r = await send('ints', OPTIONS, `{"id":${id},"type":"order.paid"}`);
      expect(r.status, r.text).toBe(400);
      expect(r.json().error).toBe('missing_event_id');
      expect(await app.store.countRows()).toEqual(before);
    }
  });

  describe('an idPath through an array index (parsed tree)', () => {
    it('a safe integer id is accepted; one past 2^53 is refused with 400, not stored under a rounded key', async () => {
      const ok = await send('ints-array', ARRAY_OPTIONS, '{"type":"order.paid","events":[{"id":7}]}');
      expect(ok.status, ok.text).toBe(200);
      expect((await app.store.getInbox(ok.json().inbox_id))!.providerEventId).toBe('7');
      const before = await app.store.countRows();
      const big = await send('ints-array', ARRAY_OPTIONS, '{"type":"order.paid","events":[{"id":9007199254740993}]}');
      expect(big.status, big.text).toBe(400);
      expect(big.json().error).toBe('missing_event_id');
      expect(await app.store.countRows()).toEqual(before);
    });
  });
});
