import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sha256 } from '../../src/crypto/payload-cipher.js';
import type { InboxRow } from '../../src/store/port.js';
import { startTestApp, storedBytes, type TestApp } from '../helpers/app.js';
import { post, rawExchange, statusOf } from '../helpers/http.js';
import { describeEachStore } from '../helpers/stores.js';
import { CASES } from './cases/index.js';
import { genericHmacCase } from './cases/generic-hmac.js';
import { GITHUB_HOOK_ID, githubCase } from './cases/github.js';
import { standardWebhooksCase } from './cases/standard-webhooks.js';
import { STRIPE_FILTERED_ENDPOINT, stripeCase } from './cases/stripe.js';
import { nowSeconds, RICH, signed, uid, type Case, type Made } from './cases/types.js';

/**
 * Signature verification from raw HTTP bytes inward, on every adapter and every store. Each
 * provider contributes one Case (test/http/cases/<provider>.ts); the tests below run on all of them.
 */
const stripe = stripeCase;
const github = githubCase;
const sw = standardWebhooksCase;
const generic = genericHmacCase;
/** The stripe case's endpoint with its freshness window set on the endpoint (`toleranceSeconds`), narrower and wider than Stripe's 300 s. */
const TOLERANCE_ENDPOINTS = [
  { id: 'stripe-60s', provider: 'stripe', secrets: [{ version: 'v2', value: stripeCase.secrets.v2 }], toleranceSeconds: 60 },
  { id: 'stripe-900s', provider: 'stripe', secrets: [{ version: 'v2', value: stripeCase.secrets.v2 }], toleranceSeconds: 900 },
];
const ENDPOINTS = [...CASES.map((c) => c.config), STRIPE_FILTERED_ENDPOINT, ...TOLERANCE_ENDPOINTS];

const SIGNED_ID = CASES.filter((c) => c.changeId(c.make(), {}) !== null);
const JSON_CASES = CASES.filter((c) => c.json);
const TIMED = CASES.filter((c) => c.tolerance !== null);


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
    if (m.objectId !== undefined) expect(row!.objectId).toBe(m.objectId);
    return row!;
  }

  /** Every stored row for one logical key. */
  async function rowsFor(endpointId: string, providerEventId: string): Promise<InboxRow[]> {
    const rows = await Promise.all((await app.store.listInboxIds()).map((id) => app.store.getInbox(id)));
    return rows.filter((r): r is InboxRow => r !== null && r.endpointId === endpointId && r.providerEventId === providerEventId);
  }

  describe('accepted bytes are stored exactly', () => {
    it.each(CASES)('$name (/webhooks/$endpoint): multi-byte UTF-8 body (emoji, é, CJK, astral) verifies; stored hash and bytes are the exact bytes', async (c) => {
      const m = c.make(RICH);
      expect(m.body.length).toBeGreaterThan(m.body.toString('utf8').length); // more bytes than UTF-16 code units
      const row = await expectAccepted(c, m, signed(c, m));
      expect(row.matchedSecretVersion).toBe('v2');
      const plain = await storedBytes(app, row, { provider: c.name, endpointId: c.endpoint, providerEventId: m.key });
      expect(plain.equals(m.body)).toBe(true);
    });

    it('stripe: exact raw bytes on the wire (rawExchange, Content-Length in bytes, not characters)', async () => {
      const c = stripe;
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
    it.each(CASES)('$name (/webhooks/$endpoint): one changed body byte', async (c) => {
      const m = c.make();
      const h = signed(c, m);
      const body = Buffer.from(m.body);
      const at = body.indexOf('1.0');
      expect(at).toBeGreaterThan(0);
      body[at] = 0x32; // "1.0" → "2.0": still valid JSON, different bytes
      await expectRejected(c, body, h, 401, 'invalid_signature');
      expect((await send(c, body, h)).json()).toEqual({ error: 'invalid_signature' });
    });

    it.each(CASES)('$name (/webhooks/$endpoint): added whitespace', async (c) => {
      const m = c.make();
      const h = signed(c, m);
      await expectRejected(c, Buffer.concat([m.body.subarray(0, 1), Buffer.from(' '), m.body.subarray(1)]), h, 401, 'invalid_signature');
      await expectRejected(c, Buffer.concat([m.body, Buffer.from('\n')]), h, 401, 'invalid_signature');
    });

    it.each(JSON_CASES)('$name (/webhooks/$endpoint): JSON re-serialised (JSON.stringify(JSON.parse(body))) with the original signature', async (c) => {
      const m = c.make(RICH);
      const h = signed(c, m);
      const reserialised = Buffer.from(JSON.stringify(JSON.parse(m.body.toString('utf8'))), 'utf8');
      expect(reserialised.equals(m.body)).toBe(false);
      await expectRejected(c, reserialised, h, 401, 'invalid_signature');
      // The original bytes with the same headers are fine: the refusal was about the bytes.
      await expectAccepted(c, m, h);
    });

    it.each(SIGNED_ID)('$name (/webhooks/$endpoint): changed event id (where the id is signed)', async (c) => {
      const m = c.make();
      const changed = c.changeId(m, signed(c, m))!;
      await expectRejected(c, changed.body, changed.headers, 401, 'invalid_signature');
    });

    it.each(TIMED)('$name (/webhooks/$endpoint): changed signed timestamp (+1 s)', async (c) => {
      const m = c.make();
      const h = c.changeTimestamp(signed(c, m, { timestamp: nowSeconds() - 10 }))!;
      await expectRejected(c, m.body, h, 401, 'invalid_signature');
    });

    // A digest that is a true prefix of the right one (1 byte in hex, 3 in base64) must not match:
    // comparing only the common length would let a forger guess one byte (1 in 256) per try.
    // The adapters refuse a digest of the wrong length before comparing (401 malformed_signature).
    it.each([stripe, github, sw, generic])('$name (/webhooks/$endpoint): the right digest truncated to its first bytes → 401 malformed_signature', async (c) => {
      const m = c.make();
      const h = signed(c, m);
      const sig = h[c.signatureHeader]!;
      const truncated = sig.replace(/[0-9a-f]{64}/, (d) => d.slice(0, 2)).replace(/^v1,([A-Za-z0-9+/]{4})[A-Za-z0-9+/]+=*$/, 'v1,$1');
      expect(truncated.length).toBeLessThan(sig.length - 30);
      await expectRejected(c, m.body, { ...h, [c.signatureHeader]: truncated }, 401, 'malformed_signature');
    });

    it('github: the delivery GUID is NOT signed — a captured body replayed under a new GUID is a new row', async () => {
      const c = github;
      const m = c.make();
      const h = signed(c, m);
      await expectAccepted(c, m, h);
      const guid = randomUUID();
      const replay = await expectAccepted(c, { ...m, key: `${GITHUB_HOOK_ID}:${guid}` }, { ...h, 'x-github-delivery': guid });
      expect(replay.payloadHash.equals(sha256(m.body))).toBe(true);
    });

    it('github: the event header is not signed either — a changed X-GitHub-Event still verifies', async () => {
      const c = github;
      const m = c.make();
      const row = await expectAccepted(c, { ...m, type: 'push' }, { ...signed(c, m), 'x-github-event': 'push' });
      expect(row.eventType).toBe('push');
    });
  });

  describe('signature headers', () => {
    it.each(CASES)('$name (/webhooks/$endpoint): missing signature header → 401 missing_signature', async (c) => {
      const m = c.make();
      const h = signed(c, m);
      delete h[c.signatureHeader];
      await expectRejected(c, m.body, h, 401, 'missing_signature');
    });

    it.each(CASES)('$name (/webhooks/$endpoint): the same signature header twice → 400 ambiguous_signature', async (c) => {
      const m = c.make();
      const h = signed(c, m);
      const pairs: [string, string][] = [...Object.entries(h), [c.signatureHeader.toUpperCase(), h[c.signatureHeader]!]];
      await expectRejected(c, m.body, pairs, 400, 'ambiguous_signature');
    });

    it('stripe: repeated Stripe-Signature in raw bytes (different case) → 400 ambiguous_signature', async () => {
      const c = stripe;
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
      const c = sw;
      const m = c.make();
      const h = signed(c, m);
      const svix = Object.fromEntries(Object.entries(h).map(([k, v]) => [k.replace(/^webhook-/, 'svix-'), v]));
      expect(svix['svix-signature']).toBeDefined();
      await expectAccepted(c, m, svix);
    });

    it('standard-webhooks: both webhook-* and svix-* signatures → 400 ambiguous_signature', async () => {
      const c = sw;
      const m = c.make();
      const h = signed(c, m);
      const both = { ...h, 'svix-id': h['webhook-id']!, 'svix-timestamp': h['webhook-timestamp']!, 'svix-signature': h['webhook-signature']! };
      await expectRejected(c, m.body, both, 400, 'ambiguous_signature');
    });

    it('standard-webhooks / generic: missing signed timestamp header → 401 malformed_signature', async () => {
      for (const [c, header] of [[sw, 'webhook-timestamp'], [generic, 'x-timestamp']] as const) {
        const m = c.make();
        const h = signed(c, m);
        delete h[header];
        await expectRejected(c, m.body, h, 401, 'malformed_signature');
      }
    });
  });

  describe('freshness of the signed timestamp', () => {
    it.each(TIMED)('$name (/webhooks/$endpoint): now ± (tolerance − 5 s) is accepted, both directions', async (c) => {
      for (const skew of [-(c.tolerance! - 5), c.tolerance! - 5]) {
        const m = c.make();
        await expectAccepted(c, m, signed(c, m, { timestamp: nowSeconds() + skew }));
      }
    });

    // The window's edges, as the providers' SDKs count them (whole seconds): a request signed
    // exactly `tolerance` seconds ago is fresh at any millisecond of the current second. The four
    // requests are sent early in one second; should the clock tick past it while they travel (a
    // loaded machine) and one of them fail, the four are sent again in the next second.
    it.each(TIMED)('$name (/webhooks/$endpoint): exactly now ± tolerance is accepted, ± (tolerance + 1 s) → 401 stale_timestamp', async (c) => {
      for (let attempt = 1; ; attempt++) {
        await new Promise((r) => setTimeout(r, 1000 - (Date.now() % 1000) + 50));
        const now = nowSeconds();
        try {
          for (const skew of [-c.tolerance!, c.tolerance!]) {
            const m = c.make();
            await expectAccepted(c, m, signed(c, m, { timestamp: now + skew }));
          }
          for (const skew of [-(c.tolerance! + 1), c.tolerance! + 1]) {
            const m = c.make();
            await expectRejected(c, m.body, signed(c, m, { timestamp: now + skew }), 401, 'stale_timestamp');
          }
          return;
        } catch (err) {
          if (nowSeconds() === now || attempt === 3) throw err;
        }
      }
    });

    it.each(TIMED)('$name (/webhooks/$endpoint): now ± (tolerance + 5 s) → 401 stale_timestamp even though the signature is right', async (c) => {
      for (const skew of [-(c.tolerance! + 5), c.tolerance! + 5]) {
        const m = c.make();
        await expectRejected(c, m.body, signed(c, m, { timestamp: nowSeconds() + skew }), 401, 'stale_timestamp');
      }
    });

    // Step 5 before step 6: a timestamp is trusted only once its signature verifies, so a forgery
    // is counted as one (invalid_signature), whatever time it claims.
    it.each(TIMED)('$name (/webhooks/$endpoint): a forged signature with a stale timestamp → 401 invalid_signature, not stale_timestamp', async (c) => {
      for (const skew of [-(c.tolerance! + 5), c.tolerance! + 5]) {
        const m = c.make();
        await expectRejected(c, m.body, signed(c, m, { version: 'v0', timestamp: nowSeconds() + skew }), 401, 'invalid_signature');
      }
    });

    it('stripe: the endpoint\'s toleranceSeconds replaces the adapter\'s 300 s window, both narrower (60 s) and wider (900 s), both directions', async () => {
      const narrow: Case = { ...stripe, endpoint: 'stripe-60s' };
      const wide: Case = { ...stripe, endpoint: 'stripe-900s' };
      for (const skew of [-120, 120]) {
        const m = stripe.make();
        await expectRejected(narrow, m.body, signed(stripe, m, { timestamp: nowSeconds() + skew }), 401, 'stale_timestamp');
      }
      for (const skew of [-50, 50]) {
        const m = stripe.make();
        await expectAccepted(narrow, m, signed(stripe, m, { timestamp: nowSeconds() + skew }));
      }
      for (const skew of [-600, 600]) {
        const m = stripe.make();
        await expectAccepted(wide, m, signed(stripe, m, { timestamp: nowSeconds() + skew }));
      }
      for (const skew of [-960, 960]) {
        const m = stripe.make();
        await expectRejected(wide, m.body, signed(stripe, m, { timestamp: nowSeconds() + skew }), 401, 'stale_timestamp');
      }
    });

    it('github: no timestamp is signed, so an old delivery (redelivered days later) still verifies', async () => {
      const c = github;
      const m = c.make();
      // Signed "long ago": nothing in the request says when, and no Date header is consulted.
      const h = { ...signed(c, m), date: 'Tue, 01 Jan 2019 00:00:00 GMT' };
      await expectAccepted(c, m, h);
    });
  });

  describe('secret rotation', () => {
    it.each(CASES)('$name (/webhooks/$endpoint): signed with the previous secret (v1) → accepted, matched_secret_version v1', async (c) => {
      const m = c.make();
      const row = await expectAccepted(c, m, signed(c, m, { version: 'v1' }));
      expect(row.matchedSecretVersion).toBe('v1');
    });

    it.each(CASES)('$name (/webhooks/$endpoint): signed with the current secret (v2) → matched_secret_version v2', async (c) => {
      const m = c.make();
      const row = await expectAccepted(c, m, signed(c, m, { version: 'v2' }));
      expect(row.matchedSecretVersion).toBe('v2');
    });

    it.each(CASES)('$name (/webhooks/$endpoint): signed with a secret whose retireAt has passed → 401 invalid_signature', async (c) => {
      const m = c.make();
      await expectRejected(c, m.body, signed(c, m, { version: 'v0' }), 401, 'invalid_signature');
    });
  });

  describe('duplicate deliveries', () => {
    it.each(CASES)('$name (/webhooks/$endpoint): a retry of the same logical event → 200 duplicate:true, same inbox_id, one row', async (c) => {
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

    it.each(CASES)('$name (/webhooks/$endpoint): two different events about the same object (e.g. two partial refunds) → two rows', async (c) => {
      const object = `obj_${uid().slice(0, 12)}`;
      const a = c.make('first', undefined, object);
      const b = c.make('second', undefined, object);
      expect(a.key).not.toBe(b.key);
      const ra = await expectAccepted(c, a, signed(c, a));
      const rb = await expectAccepted(c, b, signed(c, b));
      expect(ra.inboxId).not.toBe(rb.inboxId);
    });

    it('github: the same delivery GUID through a different hook (X-GitHub-Hook-ID) → two rows', async () => {
      const c = github;
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
    const filtered: Case = { ...stripe, endpoint: STRIPE_FILTERED_ENDPOINT.id };

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

    it('a glob\'s * matches any characters, line terminators too: payment_intent.<LF / LS in the type> is accepted, not ignored', async () => {
      // The body carries JSON escapes (\n, \u2028); the type read from it holds the characters themselves.
      for (const [escaped, type] of [['payment_intent.line\\nfeed', 'payment_intent.line\nfeed'], ['payment_intent.line\\u2028sep', 'payment_intent.line\u2028sep']] as const) {
        const m = { ...stripe.make('plain', escaped), type };
        await expectAccepted(filtered, m, signed(stripe, m));
      }
    });

    it('the filter runs after verification: a forged charge.refunded is still 401', async () => {
      const m = stripe.make('plain', 'charge.refunded');
      await expectRejected('stripe-pi', m.body, signed(stripe, m, { version: 'v1' }), 401, 'invalid_signature');
    });
  });
});

/**
 * A secret version whose retireAt comes while the server runs stops verifying at that moment,
 * without a restart, a SIGHUP or a changed secret file (the keyring re-reads only on those):
 * the check is made per request against the time of the request.
 */
describeEachStore('a secret version retiring while the server runs', (kind) => {
  let app: TestApp;
  let retireAtMs: number;
  beforeAll(async () => {
    retireAtMs = Date.now() + 5000;
    app = await startTestApp(kind, {
      endpoints: [{
        id: 'stripe', provider: 'stripe',
        secrets: [{ version: 'v2', value: stripe.secrets.v2 }, { version: 'v1', value: stripe.secrets.v1, retireAt: new Date(retireAtMs).toISOString() }],
      }],
    }, {}, { secretCheckMs: 60_000 });
  });
  afterAll(async () => {
    await app?.stop();
  });

  it('stripe: v1 verifies (and is recorded) until its retireAt, then → 401 invalid_signature while v2 still verifies', async () => {
    const send = (m: ReturnType<typeof stripe.make>, version: 'v1' | 'v2') => post(`${app.url}/webhooks/stripe`, m.body, signed(stripe, m, { version }));
    const early = stripe.make();
    const before = await send(early, 'v1');
    expect(Date.now()).toBeLessThan(retireAtMs); // the setup was fast enough for "before" to mean before
    expect(before.status, before.text).toBe(200);
    expect((await app.store.getInbox(before.json().inbox_id))!.matchedSecretVersion).toBe('v1');

    await new Promise((r) => setTimeout(r, retireAtMs - Date.now() + 100));
    const rows = await app.store.countRows();
    const late = stripe.make();
    const after = await send(late, 'v1');
    expect(after.status, after.text).toBe(401);
    expect(after.json().error).toBe('invalid_signature');
    expect(await app.store.countRows()).toEqual(rows);
    const current = await send(late, 'v2');
    expect(current.status, current.text).toBe(200);
    expect((await app.store.getInbox(current.json().inbox_id))!.matchedSecretVersion).toBe('v2');
  });
});
