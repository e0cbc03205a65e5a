import { createHmac } from 'node:crypto';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { parseConfig } from '../../src/config/schema.js';
import { HandlerRegistry, type InboxEvent } from '../../src/engine/handlers.js';
import type { ProviderAdapter } from '../../src/providers/contract.js';
import { PROVIDERS } from '../../src/providers/registry.js';
import { configDoc, startTestApp, storedBytes, type TestApp } from '../helpers/app.js';
import { reasonOf, trustedKeys, verifyWith, view } from '../helpers/adapter.js';
import { FAST_WORKERS, waitFor } from '../helpers/engine.js';
import { post } from '../helpers/http.js';
import { describeEachStore } from '../helpers/stores.js';

const signed: ProviderAdapter = PROVIDERS.mollie!(undefined, 'endpoints[0].options');
const classic: ProviderAdapter = PROVIDERS.mollie!({ mode: 'classic' }, 'endpoints[0].options');
const SECRET = 'mollie_whsec_test_1234567890';
const BODY = Buffer.from('{"resource":"event","id":"event_GvJ8WHrp5isUdRub9CJyH","type":"payment-link.paid","entityId":"pl_qng5gbbv8NAZ5gpM5ZYgx","createdAt":"2024-12-25T10:30:54+00:00","_embedded":{"entity":{"note":"café ☕"}}}');
// Computed the way Mollie's PHP SDK does (hash_hmac('sha256', $payload, $secret)), independently of our hmac helper.
const phpStyle = (body: Buffer, secret: string) => createHmac('sha256', secret).update(body).digest('hex');

describe('mollie signed (next-gen): X-Mollie-Signature', () => {
  const keys = trustedKeys(signed, ['v1', SECRET]);

  it('our signature is sha256=<hex HMAC-SHA256 of the raw body>, as the SDK computes it', () => {
    expect(signed.sign(BODY, SECRET, {})).toEqual({ 'x-mollie-signature': `sha256=${phpStyle(BODY, SECRET)}` });
  });

  it('accepts the header with and without the sha256= prefix (the SDK strips it when present)', () => {
    expect(verifyWith(signed, [['X-Mollie-Signature', `sha256=${phpStyle(BODY, SECRET)}`]], BODY, keys)).toBe('v1');
    expect(verifyWith(signed, [['X-Mollie-Signature', phpStyle(BODY, SECRET)]], BODY, keys)).toBe('v1');
  });

  it('one changed byte, or another secret → no match', () => {
    const tampered = Buffer.from(BODY);
    tampered.writeUInt8(tampered.readUInt8(tampered.length - 5) ^ 1, tampered.length - 5);
    expect(verifyWith(signed, [['x-mollie-signature', `sha256=${phpStyle(BODY, SECRET)}`]], tampered, keys)).toBeNull();
    expect(verifyWith(signed, [['x-mollie-signature', `sha256=${phpStyle(BODY, 'another')}`]], BODY, keys)).toBeNull();
  });

  it('a missing header is refused (the SDK would treat it as a legacy webhook and accept); twice is ambiguous; not hex is malformed', () => {
    expect(reasonOf(() => signed.parseSignature(view([['content-type', 'application/json']])))).toBe('missing_signature');
    const h = `sha256=${phpStyle(BODY, SECRET)}`;
    expect(reasonOf(() => signed.parseSignature(view([['x-mollie-signature', h], ['X-Mollie-Signature', h]])))).toBe('ambiguous_signature');
    expect(reasonOf(() => signed.parseSignature(view([['x-mollie-signature', 'sha256=zz']])))).toBe('malformed_signature');
  });

  it('envelope: key = event id, type, object = entityId, created = createdAt', () => {
    const e = signed.envelope(BODY, view([]), { timestamp: null });
    expect(e).toMatchObject({ eventId: 'event_GvJ8WHrp5isUdRub9CJyH', eventType: 'payment-link.paid', objectId: 'pl_qng5gbbv8NAZ5gpM5ZYgx', providerCreatedAtMs: Date.parse('2024-12-25T10:30:54Z') });
    expect(e.notice).toBeUndefined();
  });
});

describe('mollie classic: unsigned "go fetch" notices', () => {
  it('envelope: a notice about the resource, coalescing on its id, with a key unique per notice', () => {
    const a = classic.envelope(Buffer.from('id=tr_d0b0E3EA3v'), view([]), { timestamp: null });
    const b = classic.envelope(Buffer.from('id=tr_d0b0E3EA3v'), view([]), { timestamp: null });
    expect(a).toMatchObject({ eventType: 'payment.changed', objectId: 'tr_d0b0E3EA3v', notice: { coalesceKey: 'tr_d0b0E3EA3v' } });
    expect(a.eventId).toMatch(/^tr_d0b0E3EA3v@/);
    expect(a.eventId).not.toBe(b.eventId);
    expect(classic.envelope(Buffer.from('id=ord_kEn1PlbGa'), view([]), { timestamp: null }).eventType).toBe('order.changed');
    expect(classic.envelope(Buffer.from('id=xyz_abc'), view([]), { timestamp: null }).eventType).toBe('resource.changed');
  });

  it.each([
    ['no id', 'foo=bar', 'missing_event_id'],
    ['two ids', 'id=tr_a1&id=tr_b2', 'missing_event_id'],
    ['not a resource id', 'id=../../etc', 'malformed_payload'],
    ['an id with spaces', 'id=tr_abc%20def', 'malformed_payload'],
  ])('%s → %s', (_n, body, reason) => {
    expect(reasonOf(() => classic.envelope(Buffer.from(body), view([]), { timestamp: null }))).toBe(reason);
  });

  it('parsePayload: a field named __proto__ (anyone can post one) stays a field; it never becomes the payload\'s prototype', () => {
    const p = classic.parsePayload!(Buffer.from('id=tr_d0b0E3EA3v&__proto__=a&__proto__=b')) as Record<string, unknown>;
    expect(Object.getPrototypeOf(p)).toBe(Object.prototype);
    expect(Object.keys(p)).toEqual(['id', '__proto__']);
    expect(Object.getOwnPropertyDescriptor(p, '__proto__')?.value).toEqual(['a', 'b']);
    expect((p as { length?: unknown }).length).toBeUndefined();
  });

  it('config: a classic endpoint takes no secrets (the error names the path) and is rate-limited by default; an unknown mode names its path', () => {
    const base = (ep: Record<string, unknown>) => configDoc('sqlite::memory:', { endpoints: [ep] });
    expect(() => parseConfig(base({ id: 'm', provider: 'mollie', options: { mode: 'classic' }, secrets: [{ version: 'v1', value: 'x' }] }))).toThrow(/endpoints\[0\]\.secrets: .*unsigned/);
    const cfg = parseConfig(base({ id: 'm', provider: 'mollie', options: { mode: 'classic' } }));
    expect(cfg.endpoints[0]!.secrets).toEqual([]);
    expect(cfg.endpoints[0]!.rateLimit).toEqual({ perSecond: 50, burst: 200 });
    expect(() => parseConfig(base({ id: 'm', provider: 'mollie', options: { mode: 'legacy' }, secrets: [{ version: 'v1', value: 'x' }] }))).toThrow(/endpoints\[0\]\.options\.mode/);
    expect(() => parseConfig(base({ id: 'm', provider: 'mollie' }))).toThrow(/endpoints\[0\]\.secrets/);
  });
});

describeEachStore('mollie classic notices over HTTP', (kind) => {
  let app: TestApp;
  const endpoints = [
    { id: 'mollie-classic', provider: 'mollie', options: { mode: 'classic' } },
    { id: 'mollie-limited', provider: 'mollie', options: { mode: 'classic' }, rateLimit: { perSecond: 0.001, burst: 2 } },
  ];
  beforeAll(async () => {
    app = await startTestApp(kind, { endpoints });
  });
  afterAll(async () => {
    await app?.stop();
  });
  const notice = (id: string, endpoint = 'mollie-classic', contentType = 'application/x-www-form-urlencoded') =>
    post(`${app.url}/webhooks/${endpoint}`, `id=${id}`, { 'content-type': contentType });

  it('a notice is stored as fetch-required, keyed per notice, with its exact bytes; no signature is needed or checked', async () => {
    const r = await notice('tr_first1');
    expect(r.status, r.text).toBe(200);
    expect(r.json()).toEqual({ inbox_id: expect.any(String), duplicate: false });
    const row = await app.store.getInbox(r.json().inbox_id);
    expect(row).toMatchObject({ provider: 'mollie', endpointId: 'mollie-classic', eventType: 'payment.changed', objectId: 'tr_first1', verification: 'fetch-required', matchedSecretVersion: 'unsigned', status: 'PENDING' });
    const plain = await storedBytes(app, row!);
    expect(plain.toString()).toBe('id=tr_first1');
    // What operators see (`events show`) says so too.
    expect((await app.store.getEvent(row!.inboxId))!.verification).toBe('fetch-required');
  });

  it('notices for one resource coalesce while its row is PENDING (also when sent concurrently); another resource is another row', async () => {
    const answers = await Promise.all(Array.from({ length: 20 }, () => notice('tr_storm1')));
    expect(answers.every((a) => a.status === 200)).toBe(true);
    const ids = new Set(answers.map((a) => a.json().inbox_id));
    expect(ids.size).toBe(1);
    expect(answers.filter((a) => a.json().duplicate === false)).toHaveLength(1);
    const other = await notice('tr_storm2');
    expect(other.json().duplicate).toBe(false);
    expect(ids.has(other.json().inbox_id)).toBe(false);
  });

  it('once the row is claimed by a worker, the next notice makes a new row (the state may have changed after the fetch)', async () => {
    const first = (await notice('tr_claimed1')).json().inbox_id as string;
    const claimed = await app.store.claimInbox(1000, 'test-worker', 60_000, Date.now());
    expect(claimed.map((c) => c.inboxId)).toContain(first);
    const second = await notice('tr_claimed1');
    expect(second.json()).toEqual({ inbox_id: expect.any(String), duplicate: false });
    expect(second.json().inbox_id).not.toBe(first);
    // …and that new row coalesces the notices after it.
    expect((await notice('tr_claimed1')).json()).toEqual({ inbox_id: second.json().inbox_id, duplicate: true });
  });

  it('bad notices are refused with a reason and store nothing', async () => {
    const before = await app.store.countRows();
    expect((await notice('not-an-id')).json()).toEqual({ error: 'malformed_payload', detail: expect.any(String) });
    expect((await notice('tr_x', 'mollie-classic', 'application/json')).status).toBe(415);
    const r = await post(`${app.url}/webhooks/mollie-classic`, 'x'.repeat(5000), { 'content-type': 'application/x-www-form-urlencoded' });
    expect(r.status).toBe(413);
    expect(await app.store.countRows()).toEqual(before);
  });

  it('anyone can send a notice, so the endpoint is rate-limited: past the burst → 429 with Retry-After', async () => {
    expect((await notice('tr_rl1', 'mollie-limited')).status).toBe(200);
    expect((await notice('tr_rl2', 'mollie-limited')).status).toBe(200);
    const limited = await notice('tr_rl3', 'mollie-limited');
    expect(limited.status).toBe(429);
    // 0.001 token/s and the burst spent: the next token is ~1000 s away.
    expect(Number(limited.headers['retry-after'])).toBeGreaterThanOrEqual(990);
    expect(Number(limited.headers['retry-after'])).toBeLessThanOrEqual(1000);
  });
});

describeEachStore('mollie classic notices through the workers', (kind) => {
  let app: TestApp | undefined;
  afterEach(async () => {
    await app?.stop();
    app = undefined;
  });

  it('the handler sees verification fetch-required and the notice fields as its payload; processed notices do not coalesce new ones', async () => {
    const seen: InboxEvent[] = [];
    const payloads: unknown[] = [];
    const handlers = new HandlerRegistry().on('payment.changed', (event) => {
      seen.push(event);
      payloads.push(event.payload);
    });
    app = await startTestApp(kind, { ...FAST_WORKERS, endpoints: [{ id: 'mc', provider: 'mollie', options: { mode: 'classic' } }] }, {}, { workers: true, handlers });
    const send = () => post(`${app!.url}/webhooks/mc`, 'id=tr_worked1', { 'content-type': 'application/x-www-form-urlencoded' });
    const first = (await send()).json().inbox_id as string;
    await waitFor(async () => (await app!.store.getEvent(first))?.status === 'PROCESSED', 10_000, 'PROCESSED');
    expect(seen[0]).toMatchObject({ verification: 'fetch-required', objectId: 'tr_worked1', type: 'payment.changed' });
    expect(payloads[0]).toEqual({ id: 'tr_worked1' });
    const again = await send();
    expect(again.json().duplicate).toBe(false);
    await waitFor(async () => (await app!.store.getEvent(again.json().inbox_id))?.status === 'PROCESSED', 10_000, 'second PROCESSED');
    expect(seen).toHaveLength(2);
  });
});
