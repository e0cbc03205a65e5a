import { createHash, randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { ProviderAdapter, SignOptions } from '../../src/providers/contract.js';
import { PROVIDERS } from '../../src/providers/registry.js';
import type { InboxRow } from '../../src/store/port.js';
import { startTestApp, type TestApp } from '../helpers/app.js';
import { post, rawExchange, statusOf } from '../helpers/http.js';
import { describeEachStore } from '../helpers/stores.js';

/**
 * Signature verification from raw HTTP bytes inward, on every adapter and every store.
 * Each endpoint trusts three secret versions: v2 (current), v1 (previous) and v0 (retired in the past).
 */
type Version = 'v2' | 'v1' | 'v0';
type Secrets = Record<Version, string>;

const RETIRED_AT = '2000-01-01T00:00:00Z';
const STRIPE: Secrets = { v2: 'whsec_stripe_current_v2', v1: 'whsec_stripe_previous_v1', v0: 'whsec_stripe_retired_v0' };
const GITHUB: Secrets = { v2: 'github-current-v2', v1: 'github-previous-v1', v0: 'github-retired-v0' };
const SW: Secrets = {
  v2: 'whsec_' + Buffer.alloc(32, 2).toString('base64'),
  v1: 'whsec_' + Buffer.alloc(32, 1).toString('base64'),
  v0: 'whsec_' + Buffer.alloc(32, 0xa0).toString('base64'),
};
const GENERIC: Secrets = { v2: 'generic-current-v2', v1: 'generic-previous-v1', v0: 'generic-retired-v0' };
const GENERIC_OPTIONS = {
  signatureHeader: 'x-signature',
  prefix: 'sha256=',
  signedContent: '{id}.{timestamp}.{body}',
  idHeader: 'x-event-id',
  timestampHeader: 'x-timestamp',
  toleranceSeconds: 120,
  objectIdPath: 'data.id',
};
const GITHUB_HOOK_ID = '1001';

const rotation = (s: Secrets) => [
  { version: 'v2', value: s.v2 },
  { version: 'v1', value: s.v1 },
  { version: 'v0', value: s.v0, retireAt: RETIRED_AT },
];

const ENDPOINTS = [
  { id: 'stripe', provider: 'stripe', secrets: rotation(STRIPE) },
  { id: 'stripe-pi', provider: 'stripe', secrets: [{ version: 'v1', value: STRIPE.v2 }], events: ['payment_intent.*'] },
  { id: 'github', provider: 'github', secrets: rotation(GITHUB) },
  { id: 'sw', provider: 'standard-webhooks', secrets: rotation(SW) },
  { id: 'generic', provider: 'generic-hmac', secrets: rotation(GENERIC), options: GENERIC_OPTIONS },
];

/** One logical event as a provider would send it, before signing. */
interface Made {
  readonly body: Buffer;
  /** Unsigned headers (content type, ids, event names). */
  readonly headers: Record<string, string>;
  readonly signOpts: SignOptions;
  /** The provider event id the row must be stored under. */
  readonly key: string;
  readonly type: string;
}

interface Case {
  readonly name: 'stripe' | 'github' | 'standard-webhooks' | 'generic-hmac';
  readonly endpoint: string;
  readonly adapter: ProviderAdapter;
  readonly secrets: Secrets;
  /** Freshness window in seconds; null when no timestamp is signed. */
  readonly tolerance: number | null;
  readonly signatureHeader: string;
  /** `text` goes verbatim into the body (use it for multi-byte characters). */
  make(text?: string, type?: string): Made;
  /** The same delivery with a different event id, keeping the original signature; null when the id is not signed. */
  changeId(m: Made, headers: Record<string, string>): { body: Buffer; headers: Record<string, string> } | null;
  /** The same delivery with the signed timestamp moved by one second; null when no timestamp is signed. */
  changeTimestamp(headers: Record<string, string>): Record<string, string> | null;
}

const uid = () => randomUUID().replaceAll('-', '');
/** Spacing, `1.0` and a `\u00e9` escape: JSON.stringify(JSON.parse(body)) is never the same bytes. */
const fields = (text: string) => `"amount": 1.0, "note": "caf\\u00e9 ${text}"`;
const bumpTimestamp = (v: string) => String(Number(v) + 1);

const CASES: Case[] = [
  {
    name: 'stripe', endpoint: 'stripe', adapter: PROVIDERS.stripe!(undefined, 'x'), secrets: STRIPE, tolerance: 300, signatureHeader: 'stripe-signature',
    make(text = 'plain', type = 'payment_intent.succeeded') {
      const id = `evt_${uid()}`;
      const body = `{\n  "id": "${id}",\n  "object": "event",\n  "type": "${type}",\n  "created": 1700000000,\n  "data": {"object": {"id": "pi_${id.slice(4, 16)}", ${fields(text)}}}\n}\n`;
      return { body: Buffer.from(body, 'utf8'), headers: { 'content-type': 'application/json; charset=utf-8' }, signOpts: {}, key: id, type };
    },
    changeId: (m, headers) => ({ body: Buffer.from(m.body.toString('utf8').replace(m.key, `evt_${uid()}`), 'utf8'), headers }),
    changeTimestamp: (h) => ({ ...h, 'stripe-signature': h['stripe-signature']!.replace(/t=(\d+)/, (_, t: string) => `t=${bumpTimestamp(t)}`) }),
  },
  {
    name: 'github', endpoint: 'github', adapter: PROVIDERS.github!(undefined, 'x'), secrets: GITHUB, tolerance: null, signatureHeader: 'x-hub-signature-256',
    make(text = 'plain', type = 'issues') {
      const guid = randomUUID();
      const body = `{\n  "action": "opened",\n  "issue": {"number": 1, ${fields(text)}},\n  "repository": {"id": 1, "full_name": "octo-org/octo-repo"}\n}\n`;
      return {
        body: Buffer.from(body, 'utf8'),
        headers: { 'content-type': 'application/json', 'x-github-event': type, 'x-github-delivery': guid, 'x-github-hook-id': GITHUB_HOOK_ID },
        signOpts: {}, key: `${GITHUB_HOOK_ID}:${guid}`, type,
      };
    },
    changeId: () => null,
    changeTimestamp: () => null,
  },
  {
    name: 'standard-webhooks', endpoint: 'sw', adapter: PROVIDERS['standard-webhooks']!(undefined, 'x'), secrets: SW, tolerance: 300, signatureHeader: 'webhook-signature',
    make(text = 'plain', type = 'invoice.paid') {
      const id = `msg_${uid()}`;
      const body = `{"type": "${type}", "timestamp": "2024-01-02T03:04:05Z", "data": {"id": "inv_1", ${fields(text)}}}`;
      return { body: Buffer.from(body, 'utf8'), headers: { 'content-type': 'application/json' }, signOpts: { id }, key: id, type };
    },
    changeId: (m, headers) => ({ body: m.body, headers: { ...headers, 'webhook-id': `msg_${uid()}` } }),
    changeTimestamp: (h) => ({ ...h, 'webhook-timestamp': bumpTimestamp(h['webhook-timestamp']!) }),
  },
  {
    name: 'generic-hmac', endpoint: 'generic', adapter: PROVIDERS['generic-hmac']!(GENERIC_OPTIONS, 'x'), secrets: GENERIC, tolerance: 120, signatureHeader: 'x-signature',
    make(text = 'plain', type = 'order.paid') {
      const id = `evt_${uid()}`;
      const body = `{"type": "${type}", "data": {"id": "ord_1", ${fields(text)}}}`;
      return { body: Buffer.from(body, 'utf8'), headers: { 'content-type': 'application/json' }, signOpts: { id }, key: id, type };
    },
    changeId: (m, headers) => ({ body: m.body, headers: { ...headers, 'x-event-id': `evt_${uid()}` } }),
    changeTimestamp: (h) => ({ ...h, 'x-timestamp': bumpTimestamp(h['x-timestamp']!) }),
  },
];
const SIGNED_ID = CASES.filter((c) => c.name !== 'github');
const TIMED = CASES.filter((c) => c.tolerance !== null);

const nowSeconds = () => Math.floor(Date.now() / 1000);
const sha256 = (b: Buffer) => createHash('sha256').update(b).digest();

/** Unsigned + signature headers, signed with the given secret version at the given time. */
function signed(c: Case, m: Made, opts: { version?: Version; timestamp?: number; body?: Buffer } = {}): Record<string, string> {
  const sig = c.adapter.sign(opts.body ?? m.body, c.secrets[opts.version ?? 'v2'], { ...m.signOpts, timestamp: opts.timestamp ?? nowSeconds() });
  return { ...m.headers, ...sig };
}

const RICH = 'Zoë 😀 東京 — naïve ü 𝄞';

describeEachStore('signature verification over HTTP', (kind) => {
  let app: TestApp;
  beforeAll(async () => {
    app = await startTestApp(kind, { endpoints: ENDPOINTS });
  });
  afterAll(async () => {
    await app?.stop();
  });

  const send = (c: Case | string, body: Buffer, headers: Record<string, string> | [string, string][]) =>
    post(`${app.url}/webhooks/${typeof c === 'string' ? c : c.endpoint}`, body, headers);

  /** Sends, and checks the rejection: status, `{"error": reason}` body, and that nothing was stored. */
  async function expectRejected(c: Case | string, body: Buffer, headers: Record<string, string> | [string, string][], status: number, reason: string): Promise<void> {
    const before = await app.store.countRows();
    const r = await send(c, body, headers);
    expect(r.status, r.text).toBe(status);
    expect(r.json().error, r.text).toBe(reason);
    expect(await app.store.countRows()).toEqual(before);
  }

  /** Sends, expects a fresh acceptance, returns the stored row after checking its key fields and exact bytes. */
  async function expectAccepted(c: Case, m: Made, headers: Record<string, string> | [string, string][], body = m.body): Promise<InboxRow> {
    const before = await app.store.countRows();
    const r = await send(c, body, headers);
    expect(r.status, r.text).toBe(200);
    expect(r.json()).toEqual({ inbox_id: expect.any(String), duplicate: false });
    expect(await app.store.countRows()).toEqual({ inbox: before.inbox + 1, outbox: before.outbox + 1, payload: before.payload + 1 });
    const row = await app.store.getInbox(r.json().inbox_id);
    expect(row).not.toBeNull();
    expect(row).toMatchObject({ provider: c.name, endpointId: c.endpoint, providerEventId: m.key, eventType: m.type, status: 'PENDING' });
    expect(row!.payloadHash.equals(sha256(body))).toBe(true);
    return row!;
  }

  /** Every stored row for one logical key. */
  async function rowsFor(endpointId: string, providerEventId: string): Promise<InboxRow[]> {
    const rows = await Promise.all((await app.store.listInboxIds()).map((id) => app.store.getInbox(id)));
    return rows.filter((r): r is InboxRow => r !== null && r.endpointId === endpointId && r.providerEventId === providerEventId);
  }

  describe('accepted bytes are stored exactly', () => {
    it.each(CASES)('$name: multi-byte UTF-8 body (emoji, é, CJK, astral) verifies; stored hash and bytes are the exact bytes', async (c) => {
      const m = c.make(RICH);
      expect(m.body.length).toBeGreaterThan(m.body.toString('utf8').length); // more bytes than UTF-16 code units
      const row = await expectAccepted(c, m, signed(c, m));
      expect(row.matchedSecretVersion).toBe('v2');
      const sealed = await app.store.getPayload(row.rawPayloadRef!);
      const plain = app.keyring.cipher!.open(sealed!, { provider: c.name, endpointId: c.endpoint, providerEventId: m.key });
      expect(plain.equals(m.body)).toBe(true);
    });

    it('stripe: exact raw bytes on the wire (rawExchange, Content-Length in bytes, not characters)', async () => {
      const c = CASES[0]!;
      const m = c.make(RICH);
      const h = signed(c, m);
      const head = `POST /webhooks/stripe HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: ${h['content-type']}\r\nStripe-Signature: ${h['stripe-signature']}\r\nContent-Length: ${m.body.length}\r\nConnection: close\r\n\r\n`;
      const raw = await rawExchange(Number(new URL(app.url).port), Buffer.concat([Buffer.from(head, 'latin1'), m.body]));
      expect(statusOf(raw.text), raw.text).toBe(200);
      const inboxId = /"inbox_id":"([^"]+)"/.exec(raw.text)?.[1];
      const row = await app.store.getInbox(inboxId!);
      expect(row!.payloadHash.equals(sha256(m.body))).toBe(true);
    });
  });

  describe('tampering → 401 invalid_signature, nothing stored', () => {
    it.each(CASES)('$name: one changed body byte', async (c) => {
      const m = c.make();
      const h = signed(c, m);
      const body = Buffer.from(m.body);
      const at = body.indexOf('1.0');
      expect(at).toBeGreaterThan(0);
      body[at] = 0x32; // "1.0" → "2.0": still valid JSON, different bytes
      await expectRejected(c, body, h, 401, 'invalid_signature');
      expect((await send(c, body, h)).json()).toEqual({ error: 'invalid_signature' });
    });

    it.each(CASES)('$name: added whitespace', async (c) => {
      const m = c.make();
      const h = signed(c, m);
      await expectRejected(c, Buffer.concat([m.body.subarray(0, 1), Buffer.from(' '), m.body.subarray(1)]), h, 401, 'invalid_signature');
      await expectRejected(c, Buffer.concat([m.body, Buffer.from('\n')]), h, 401, 'invalid_signature');
    });

    it.each(CASES)('$name: JSON re-serialised (JSON.stringify(JSON.parse(body))) with the original signature', async (c) => {
      const m = c.make(RICH);
      const h = signed(c, m);
      const reserialised = Buffer.from(JSON.stringify(JSON.parse(m.body.toString('utf8'))), 'utf8');
      expect(reserialised.equals(m.body)).toBe(false);
      await expectRejected(c, reserialised, h, 401, 'invalid_signature');
      // The original bytes with the same headers are fine: the refusal was about the bytes.
      await expectAccepted(c, m, h);
    });

    it.each(SIGNED_ID)('$name: changed event id (where the id is signed)', async (c) => {
      const m = c.make();
      const changed = c.changeId(m, signed(c, m))!;
      await expectRejected(c, changed.body, changed.headers, 401, 'invalid_signature');
    });

    it.each(TIMED)('$name: changed signed timestamp (+1 s)', async (c) => {
      const m = c.make();
      const h = c.changeTimestamp(signed(c, m, { timestamp: nowSeconds() - 10 }))!;
      await expectRejected(c, m.body, h, 401, 'invalid_signature');
    });

    it('github: the delivery GUID is NOT signed — a captured body replayed under a new GUID is a new row', async () => {
      const c = CASES[1]!;
      const m = c.make();
      const h = signed(c, m);
      await expectAccepted(c, m, h);
      const guid = randomUUID();
      const replay = await expectAccepted(c, { ...m, key: `${GITHUB_HOOK_ID}:${guid}` }, { ...h, 'x-github-delivery': guid });
      expect(replay.payloadHash.equals(sha256(m.body))).toBe(true);
    });

    it('github: the event header is not signed either — a changed X-GitHub-Event still verifies', async () => {
      const c = CASES[1]!;
      const m = c.make();
      const row = await expectAccepted(c, { ...m, type: 'push' }, { ...signed(c, m), 'x-github-event': 'push' });
      expect(row.eventType).toBe('push');
    });
  });

  describe('signature headers', () => {
    it.each(CASES)('$name: missing signature header → 401 missing_signature', async (c) => {
      const m = c.make();
      const h = signed(c, m);
      delete h[c.signatureHeader];
      await expectRejected(c, m.body, h, 401, 'missing_signature');
    });

    it.each(CASES)('$name: the same signature header twice → 400 ambiguous_signature', async (c) => {
      const m = c.make();
      const h = signed(c, m);
      const pairs: [string, string][] = [...Object.entries(h), [c.signatureHeader.toUpperCase(), h[c.signatureHeader]!]];
      await expectRejected(c, m.body, pairs, 400, 'ambiguous_signature');
    });

    it('stripe: repeated Stripe-Signature in raw bytes (different case) → 400 ambiguous_signature', async () => {
      const c = CASES[0]!;
      const m = c.make();
      const h = signed(c, m);
      const before = await app.store.countRows();
      const head = `POST /webhooks/stripe HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nStripe-Signature: ${h['stripe-signature']}\r\nstripe-signature: ${h['stripe-signature']}\r\nContent-Length: ${m.body.length}\r\nConnection: close\r\n\r\n`;
      const raw = await rawExchange(Number(new URL(app.url).port), Buffer.concat([Buffer.from(head, 'latin1'), m.body]));
      expect(statusOf(raw.text), raw.text).toBe(400);
      expect(raw.text).toContain('"error":"ambiguous_signature"');
      expect(await app.store.countRows()).toEqual(before);
    });

    it('standard-webhooks: svix-* header names are accepted', async () => {
      const c = CASES[2]!;
      const m = c.make();
      const h = signed(c, m);
      const svix = Object.fromEntries(Object.entries(h).map(([k, v]) => [k.replace(/^webhook-/, 'svix-'), v]));
      expect(svix['svix-signature']).toBeDefined();
      await expectAccepted(c, m, svix);
    });

    it('standard-webhooks: both webhook-* and svix-* signatures → 400 ambiguous_signature', async () => {
      const c = CASES[2]!;
      const m = c.make();
      const h = signed(c, m);
      const both = { ...h, 'svix-id': h['webhook-id']!, 'svix-timestamp': h['webhook-timestamp']!, 'svix-signature': h['webhook-signature']! };
      await expectRejected(c, m.body, both, 400, 'ambiguous_signature');
    });

    it('standard-webhooks / generic: missing signed timestamp header → 401 malformed_signature', async () => {
      for (const [c, header] of [[CASES[2]!, 'webhook-timestamp'], [CASES[3]!, 'x-timestamp']] as const) {
        const m = c.make();
        const h = signed(c, m);
        delete h[header];
        await expectRejected(c, m.body, h, 401, 'malformed_signature');
      }
    });
  });

  describe('freshness of the signed timestamp', () => {
    it.each(TIMED)('$name: now ± (tolerance − 5 s) is accepted, both directions', async (c) => {
      for (const skew of [-(c.tolerance! - 5), c.tolerance! - 5]) {
        const m = c.make();
        await expectAccepted(c, m, signed(c, m, { timestamp: nowSeconds() + skew }));
      }
    });

    it.each(TIMED)('$name: now ± (tolerance + 5 s) → 401 stale_timestamp even though the signature is right', async (c) => {
      for (const skew of [-(c.tolerance! + 5), c.tolerance! + 5]) {
        const m = c.make();
        await expectRejected(c, m.body, signed(c, m, { timestamp: nowSeconds() + skew }), 401, 'stale_timestamp');
      }
    });

    it('github: no timestamp is signed, so an old delivery (redelivered days later) still verifies', async () => {
      const c = CASES[1]!;
      const m = c.make();
      // Signed "long ago": nothing in the request says when, and no Date header is consulted.
      const h = { ...signed(c, m), date: 'Tue, 01 Jan 2019 00:00:00 GMT' };
      await expectAccepted(c, m, h);
    });
  });

  describe('secret rotation', () => {
    it.each(CASES)('$name: signed with the previous secret (v1) → accepted, matched_secret_version v1', async (c) => {
      const m = c.make();
      const row = await expectAccepted(c, m, signed(c, m, { version: 'v1' }));
      expect(row.matchedSecretVersion).toBe('v1');
    });

    it.each(CASES)('$name: signed with the current secret (v2) → matched_secret_version v2', async (c) => {
      const m = c.make();
      const row = await expectAccepted(c, m, signed(c, m, { version: 'v2' }));
      expect(row.matchedSecretVersion).toBe('v2');
    });

    it.each(CASES)('$name: signed with a secret whose retireAt has passed → 401 invalid_signature', async (c) => {
      const m = c.make();
      await expectRejected(c, m.body, signed(c, m, { version: 'v0' }), 401, 'invalid_signature');
    });
  });

  describe('duplicate deliveries', () => {
    it.each(CASES)('$name: a retry of the same logical event → 200 duplicate:true, same inbox_id, one row', async (c) => {
      const m = c.make(RICH);
      const before = await app.store.countRows();
      const first = await send(c, m.body, signed(c, m, { timestamp: nowSeconds() - 60 }));
      expect(first.status, first.text).toBe(200);
      expect(first.json().duplicate).toBe(false);
      // A provider retry: same id and bytes, signed again later (and here with the previous secret).
      const retry = await send(c, m.body, signed(c, m, { timestamp: nowSeconds(), version: 'v1' }));
      expect(retry.status, retry.text).toBe(200);
      expect(retry.json()).toEqual({ inbox_id: first.json().inbox_id, duplicate: true });
      expect(await app.store.countRows()).toEqual({ inbox: before.inbox + 1, outbox: before.outbox + 1, payload: before.payload + 1 });
      const rows = await rowsFor(c.endpoint, m.key);
      expect(rows.map((r) => r.inboxId)).toEqual([first.json().inbox_id]);
      expect(rows[0]!.matchedSecretVersion).toBe('v2');
    });

    it('github: the same delivery GUID through a different hook (X-GitHub-Hook-ID) → two rows', async () => {
      const c = CASES[1]!;
      const m = c.make();
      const guid = m.headers['x-github-delivery']!;
      const a = await expectAccepted(c, m, signed(c, m));
      const b = await expectAccepted(c, { ...m, key: `2002:${guid}` }, { ...signed(c, m), 'x-github-hook-id': '2002' });
      expect(a.inboxId).not.toBe(b.inboxId);
      expect(await rowsFor('github', `${GITHUB_HOOK_ID}:${guid}`)).toHaveLength(1);
      expect(await rowsFor('github', `2002:${guid}`)).toHaveLength(1);
    });
  });

  describe('event filter (events: ["payment_intent.*"])', () => {
    const stripe = CASES[0]!;
    const filtered: Case = { ...stripe, endpoint: 'stripe-pi' };

    it('charge.refunded → 200 ignored unsupported_event_type, no row', async () => {
      const m = stripe.make('plain', 'charge.refunded');
      const before = await app.store.countRows();
      const r = await send('stripe-pi', m.body, signed(stripe, m));
      expect(r.status, r.text).toBe(200);
      expect(r.json()).toEqual({ inbox_id: null, duplicate: false, ignored: 'unsupported_event_type' });
      expect(await app.store.countRows()).toEqual(before);
      expect(await rowsFor('stripe-pi', m.key)).toEqual([]);
    });

    it('payment_intent.created → accepted', async () => {
      const m = stripe.make('plain', 'payment_intent.created');
      const row = await expectAccepted(filtered, m, signed(stripe, m));
      expect(row.matchedSecretVersion).toBe('v1');
    });

    it('the filter runs after verification: a forged charge.refunded is still 401', async () => {
      const m = stripe.make('plain', 'charge.refunded');
      await expectRejected('stripe-pi', m.body, signed(stripe, m, { version: 'v1' }), 401, 'invalid_signature');
    });
  });
});
