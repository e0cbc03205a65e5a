import { createHash, randomUUID } from 'node:crypto';
import { Webhook } from 'standardwebhooks';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { hmac, type TrustedKey } from '../../src/crypto/hmac.js';
import { ConfigError } from '../../src/errors.js';
import type { ProviderAdapter } from '../../src/providers/contract.js';
import { PROVIDERS } from '../../src/providers/registry.js';
import type { InboxRow } from '../../src/store/port.js';
import { expectedFirst, reasonOf, thrownBy, trustedKeys, verifyWith, view } from '../helpers/adapter.js';
import { startTestApp, type TestApp } from '../helpers/app.js';
import { post } from '../helpers/http.js';
import { describeEachStore } from '../helpers/stores.js';

/**
 * GitLab: the signing token (Standard Webhooks v1) and the plain X-Gitlab-Token, in the three
 * `mode`s. The signing-token mode also runs through the shared HTTP suite (test/http/cases/gitlab.ts);
 * the plain-token mode cannot (its body is not signed), so its HTTP tests are here.
 *
 * SECURITY NOTE (token mode): X-Gitlab-Token is a bearer secret sent in clear with every request.
 * It proves the sender knows the token, nothing more: it does NOT protect the body, the
 * Idempotency-Key or the time. Anyone who sees one request can send any body with it. The tests
 * below pin that down ("body integrity is NOT protected") so nobody mistakes it for a signature.
 */
const make = (options?: Record<string, unknown>): ProviderAdapter => PROVIDERS.gitlab!(options, 'endpoints[0].options');
const auto = make();
const signing = make({ mode: 'signing' });
const tokenMode = make({ mode: 'token' });

// GitLab MR !231325 (signing token in the Webhooks API) example value: whsec_ + base64 of 32 bytes.
const SIGNING = 'whsec_dGVzdHRlc3R0ZXN0dGVzdHRlc3R0ZXN0dGVzdHRlc3Q=';
const SIGNING_OTHER = 'whsec_' + Buffer.alloc(32, 9).toString('base64');
const TOKEN = 'my-gitlab-secret-token';

const ID = '908a6d9e-45fd-46c8-97e6-c4f350f219dd';
const TS = 1700000000;
const ISSUE = '{"object_kind":"issue","event_type":"issue","project":{"id":1},"object_attributes":{"id":301,"updated_at":"2013-12-03T17:15:43Z","action":"open"}}';

const keysFor = (a: ProviderAdapter, ...entries: [string, string, number?][]): TrustedKey[] => trustedKeys(a, ...entries);
const check = (a: ProviderAdapter, pairs: [string, string][], body: Buffer | string, ks: TrustedKey[], nowMs = Date.now()) => verifyWith(a, pairs, body, ks, nowMs);

function signedHeaders(secret: string, id = ID, ts = TS, body: string | Buffer = ISSUE): [string, string][] {
  return Object.entries(signing.sign(Buffer.from(body), secret, { id, timestamp: ts }));
}

const configPath = (fn: () => unknown): string => thrownBy(fn, ConfigError).path;

describe('gitlab: options', () => {
  it('mode defaults to auto; unknown keys and values are config errors naming the path', () => {
    expect(configPath(() => make({ mode: 'hmac' }))).toBe('endpoints[0].options.mode');
    expect(configPath(() => make({ token: 'x' }))).toBe('endpoints[0].options.token');
    expect(auto.defaultToleranceSeconds).toBe(300);
    expect(auto.defaultMaxBodyBytes).toBe(25 * 1024 * 1024);
    expect(auto.contentTypes).toEqual(['application/json']);
  });
});

describe('gitlab: signing token (Standard Webhooks v1), cross-checked with the standardwebhooks SDK', () => {
  const bodies = [ISSUE, '{"object_kind":"note","object_attributes":{"id":1243,"note":"Zoë 🦄 東京 caf\\u00e9"}}'];

  it.each(bodies)('SDK Webhook.sign → ours verifies (signing and auto modes): %j', (payload) => {
    const ts = Math.floor(Date.now() / 1000);
    const sig = new Webhook(SIGNING).sign(ID, new Date(ts * 1000), payload);
    const pairs: [string, string][] = [['webhook-id', ID], ['webhook-timestamp', String(ts)], ['webhook-signature', sig]];
    expect(check(signing, pairs, payload, keysFor(signing, ['v1', SIGNING]))).toBe('v1');
    expect(check(auto, pairs, payload, keysFor(auto, ['v1', SIGNING]))).toBe('v1');
    expect(check(signing, pairs, payload, keysFor(signing, ['v1', SIGNING_OTHER]))).toBeNull();
  });

  it.each(bodies)('ours → SDK Webhook.verify accepts: %j', (payload) => {
    const h = signing.sign(Buffer.from(payload, 'utf8'), SIGNING, { id: ID });
    expect(h['idempotency-key']).toBe(ID); // GitLab sends webhook-id = Idempotency-Key
    expect(new Webhook(SIGNING).verify(payload, h)).toEqual(JSON.parse(payload));
    expect(() => new Webhook(SIGNING_OTHER).verify(payload, h)).toThrow(/No matching signature/);
  });

  it('id, timestamp and body are signed; one-byte mutation, wrong secret → no match', () => {
    const k = keysFor(signing, ['v1', SIGNING]);
    const h = signedHeaders(SIGNING);
    expect(check(signing, h, ISSUE, k)).toBe('v1');
    const mutated = Buffer.from(ISSUE);
    mutated[mutated.indexOf('301')] = 0x34;
    expect(check(signing, h, mutated, k)).toBeNull();
    expect(check(signing, h.map(([n, v]) => [n, n === 'webhook-id' ? randomUUID() : v]), ISSUE, k)).toBeNull();
    expect(check(signing, h.map(([n, v]) => [n, n === 'webhook-timestamp' ? String(TS + 1) : v]), ISSUE, k)).toBeNull();
    expect(check(signing, signedHeaders(SIGNING_OTHER), ISSUE, k)).toBeNull();
  });

  it('rotation: several v1 entries, any match; a retired version never verifies', () => {
    const body = Buffer.from(ISSUE);
    const entry = (s: string) => 'v1,' + hmac('sha256', signing.prepareSecret(s), [`${ID}.${TS}.`, body]).toString('base64');
    const pairs: [string, string][] = [['webhook-id', ID], ['webhook-timestamp', String(TS)], ['webhook-signature', `${entry(SIGNING_OTHER)} ${entry(SIGNING)}`]];
    expect(check(signing, pairs, body, keysFor(signing, ['v2', SIGNING], ['v1', SIGNING_OTHER]))).toBe('v2');
    const now = Date.now();
    expect(check(signing, pairs, body, keysFor(signing, ['v2', SIGNING, now], ['v1', SIGNING_OTHER, now]), now)).toBeNull();
  });

  it('the signed timestamp is the freshness evidence', () => {
    expect(signing.parseSignature(view(signedHeaders(SIGNING))).timestamp).toBe(TS);
  });

  it.each(expectedFirst([
    ['no signature header', [['webhook-id', ID], ['webhook-timestamp', String(TS)]], 'missing_signature'],
    ['only X-Gitlab-Token (signing mode ignores it)', [['x-gitlab-token', TOKEN]], 'missing_signature'],
    ['svix-* names (GitLab sends webhook-*)', signedHeaders(SIGNING).map(([n, v]) => [n.replace('webhook-', 'svix-'), v]), 'missing_signature'],
    ['missing webhook-id', signedHeaders(SIGNING).filter(([n]) => n !== 'webhook-id'), 'malformed_signature'],
    ['missing webhook-timestamp', signedHeaders(SIGNING).filter(([n]) => n !== 'webhook-timestamp'), 'malformed_signature'],
    ['v1 not a 32-byte digest', [['webhook-id', ID], ['webhook-timestamp', String(TS)], ['webhook-signature', 'v1,abcd']], 'malformed_signature'],
    ['signature header twice', [...signedHeaders(SIGNING), ['Webhook-Signature', 'v1,' + Buffer.alloc(32).toString('base64')]], 'ambiguous_signature'],
    ['webhook-id twice', [...signedHeaders(SIGNING), ['webhook-id', 'x']], 'ambiguous_signature'],
  ] as [string, [string, string][], string][]))('signing mode: %s → %s', (_name, reason, pairs) => {
    expect(reasonOf(() => signing.parseSignature(view(pairs)))).toBe(reason);
  });
});

describe('gitlab: plain X-Gitlab-Token (token mode)', () => {
  const k = keysFor(tokenMode, ['v1', TOKEN]);
  const tok = (v: string): [string, string][] => [['X-Gitlab-Token', v]];

  it('the configured token verifies; no timestamp is signed (no freshness check)', () => {
    expect(check(tokenMode, tok(TOKEN), ISSUE, k)).toBe('v1');
    expect(tokenMode.parseSignature(view(tok(TOKEN))).timestamp).toBeNull();
  });

  it('body integrity is NOT protected: any body verifies with the token (the body is not signed)', () => {
    expect(check(tokenMode, tok(TOKEN), '{"object_kind":"push","forged":true}', k)).toBe('v1');
  });

  it('compared as SHA-256 digests: prefixes, extensions, case changes and other lengths never match (and never throw)', () => {
    for (const wrong of ['my-gitlab-secret-toke', 'my-gitlab-secret-token!', 'MY-GITLAB-SECRET-TOKEN', 'x', 'x'.repeat(10_000), ` ${TOKEN}x`]) {
      expect(check(tokenMode, tok(wrong), ISSUE, k)).toBeNull();
    }
    const prepared = tokenMode.prepareSecret(TOKEN);
    expect(prepared.subarray(-32).equals(createHash('sha256').update(TOKEN).digest())).toBe(true);
    expect(prepared.includes(Buffer.from(TOKEN))).toBe(false); // the token itself is not kept
  });

  it('a non-ASCII token matches byte for byte (Node hands header bytes over as latin1)', () => {
    const t = 'tökén-東京';
    const onTheWire = Buffer.from(t, 'utf8').toString('latin1');
    expect(check(tokenMode, tok(onTheWire), ISSUE, keysFor(tokenMode, ['v1', t]))).toBe('v1');
  });

  it('rotation: any non-retired token verifies; a retired one does not', () => {
    const now = Date.now();
    const ks = keysFor(tokenMode, ['v2', 'token-two'], ['v1', TOKEN], ['v0', 'token-zero', now]);
    expect(check(tokenMode, tok('token-two'), ISSUE, ks, now)).toBe('v2');
    expect(check(tokenMode, tok(TOKEN), ISSUE, ks, now)).toBe('v1');
    expect(check(tokenMode, tok('token-zero'), ISSUE, ks, now)).toBeNull();
  });

  it('in token mode a value that looks like "whsec_…" is just a token, and webhook-signature is ignored', () => {
    const ks = keysFor(tokenMode, ['v1', SIGNING]);
    expect(check(tokenMode, tok(SIGNING), ISSUE, ks)).toBe('v1');
    expect(reasonOf(() => tokenMode.parseSignature(view(signedHeaders(SIGNING))))).toBe('missing_signature');
  });

  it.each(expectedFirst([
    ['no token header', [], 'missing_signature'],
    ['empty token header', [['x-gitlab-token', '']], 'missing_signature'],
    ['token header twice', [['x-gitlab-token', TOKEN], ['X-Gitlab-Token', TOKEN]], 'ambiguous_signature'],
  ] as [string, [string, string][], string][]))('%s → %s', (_name, reason, pairs) => {
    expect(reasonOf(() => tokenMode.parseSignature(view(pairs)))).toBe(reason);
  });
});

describe('gitlab: auto mode (each secret’s format decides its scheme)', () => {
  const mixed = keysFor(auto, ['v2', SIGNING], ['v1', TOKEN]);

  it('a signed request verifies with the signing token, a token request with the plain token', () => {
    expect(check(auto, signedHeaders(SIGNING), ISSUE, mixed)).toBe('v2');
    expect(check(auto, [['x-gitlab-token', TOKEN]], ISSUE, mixed)).toBe('v1');
    expect(auto.parseSignature(view([['x-gitlab-token', TOKEN]])).timestamp).toBeNull();
  });

  it('GitLab sends both headers when both are configured: either trusted key verifies', () => {
    const both: [string, string][] = [...signedHeaders(SIGNING), ['x-gitlab-token', TOKEN]];
    expect(check(auto, both, ISSUE, keysFor(auto, ['tok', TOKEN]))).toBe('tok');
    expect(check(auto, both, ISSUE, keysFor(auto, ['sig', SIGNING]))).toBe('sig');
    // The weakest trusted secret sets the bar: with a plain token trusted, a broken signature next to the token still verifies.
    const broken: [string, string][] = [...signedHeaders(SIGNING_OTHER), ['x-gitlab-token', TOKEN]];
    expect(check(auto, broken, ISSUE, mixed)).toBe('v1');
    expect(check(auto, broken, ISSUE, keysFor(auto, ['sig', SIGNING]))).toBeNull();
  });

  it('keys never cross schemes: the signing token sent in clear, or a token used as an HMAC key, never verify', () => {
    expect(check(auto, [['x-gitlab-token', SIGNING]], ISSUE, keysFor(auto, ['sig', SIGNING]))).toBeNull();
    expect(check(auto, [['x-gitlab-token', SIGNING.slice(6)]], ISSUE, keysFor(auto, ['sig', SIGNING]))).toBeNull();
    const body = Buffer.from(ISSUE);
    for (const key of [Buffer.from(TOKEN), auto.prepareSecret(TOKEN)]) {
      const forged = 'v1,' + hmac('sha256', key, [`${ID}.${TS}.`, body]).toString('base64');
      expect(check(auto, [['webhook-id', ID], ['webhook-timestamp', String(TS)], ['webhook-signature', forged]], body, keysFor(auto, ['tok', TOKEN]))).toBeNull();
    }
  });

  it('neither header → missing_signature', () => {
    expect(reasonOf(() => auto.parseSignature(view([['x-gitlab-event', 'Push Hook']])))).toBe('missing_signature');
  });
});

describe('gitlab: secret formats', () => {
  it.each([
    ['auto', auto, 'whpk_' + Buffer.alloc(32, 1).toString('base64'), /never ed25519/],
    ['auto', auto, 'whsk_' + Buffer.alloc(32, 1).toString('base64'), /never ed25519/],
    ['signing', signing, 'whpk_' + Buffer.alloc(32, 1).toString('base64'), /never ed25519/],
    ['signing', signing, TOKEN, /whsec_/],
    // The Standard Webhooks spec vector's secret is 24 bytes: GitLab only issues 32-byte signing tokens.
    ['signing', signing, 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw', /exactly 32 bytes/],
    ['auto', auto, 'whsec_not*base64!', /base64/],
    ['auto', auto, '', /empty/],
    ['token', tokenMode, '', /empty/],
    ['token', tokenMode, 'abc\ndef', /line breaks/],
    ['auto', auto, ' padded-token ', /whitespace/],
  ] as [string, ProviderAdapter, string, RegExp][])('%s mode refuses %j', (_mode, a, value, message) => {
    expect(() => a.prepareSecret(value)).toThrow(message);
  });

  it('a signing token key and a plain token key have disjoint shapes (32 bytes vs tag + SHA-256)', () => {
    expect(auto.prepareSecret(SIGNING)).toHaveLength(32);
    expect(auto.prepareSecret(TOKEN).length).toBeGreaterThan(32);
    // In token mode any string is a token, even one starting with whpk_ or whsec_.
    expect(tokenMode.prepareSecret('whpk_abc').length).toBeGreaterThan(32);
  });
});

describe('gitlab: envelope', () => {
  const env = (a: ProviderAdapter, pairs: [string, string][], body: string) => a.envelope(Buffer.from(body), view(pairs), a.parseSignature(view(pairs)));

  it('signed: key = webhook-id (signed), type = object_kind, object = object_attributes.id, version = updated_at', () => {
    const pairs: [string, string][] = [...signedHeaders(SIGNING), ['idempotency-key', 'unsigned-other'], ['x-gitlab-event', 'Issue Hook']];
    expect(env(signing, pairs, ISSUE)).toEqual({
      eventId: ID, eventType: 'issue', objectId: '301', objectVersion: '2013-12-03T17:15:43.000Z', providerCreatedAtMs: null,
    });
  });

  it('token: key = Idempotency-Key (same across retries and Resend, GitLab ≥ 17.4)', () => {
    expect(env(tokenMode, [['x-gitlab-token', TOKEN], ['idempotency-key', ID], ['x-gitlab-event-uuid', 'u-1']], ISSUE).eventId).toBe(ID);
  });

  it('token without Idempotency-Key (GitLab < 17.4): X-Gitlab-Event-UUID + SHA-256 of the body', () => {
    const uuid = 'c0ffee00-0000-4000-8000-000000000001';
    const pairs: [string, string][] = [['x-gitlab-token', TOKEN], ['x-gitlab-event-uuid', uuid]];
    const a = env(tokenMode, pairs, ISSUE).eventId;
    expect(a).toBe(`uuid:${uuid}:${createHash('sha256').update(ISSUE).digest('hex')}`);
    // Recursive webhooks share the UUID: a different event under the same UUID must be another key.
    expect(env(tokenMode, pairs, ISSUE.replace('"open"', '"close"')).eventId).not.toBe(a);
    expect(env(tokenMode, pairs, ISSUE).eventId).toBe(a);
  });

  it.each(expectedFirst([
    ['no Idempotency-Key and no X-Gitlab-Event-UUID', [['x-gitlab-token', TOKEN]], 'missing_event_id'],
    ['empty Idempotency-Key', [['x-gitlab-token', TOKEN], ['idempotency-key', '']], 'missing_event_id'],
    ['Idempotency-Key twice', [['x-gitlab-token', TOKEN], ['idempotency-key', 'a'], ['idempotency-key', 'b']], 'ambiguous_header'],
  ] as [string, [string, string][], string][]))('%s → %s', (_name, reason, pairs) => {
    expect(reasonOf(() => env(tokenMode, pairs, ISSUE))).toBe(reason);
  });

  it.each([
    ['object_kind', '{"object_kind":"push","project":{"id":15},"project_id":15}', [], 'push', '15'],
    ['event_name when object_kind is absent (member, subgroup, system events)', '{"event_name":"user_add_to_group","group_id":78}', [], 'user_add_to_group', null],
    ['the X-Gitlab-Event header as a last resort', '{"group_id":78}', [['x-gitlab-event', 'Member Hook']], 'Member Hook', null],
    ['project_id for system hooks', '{"event_name":"project_create","project_id":74}', [], 'project_create', '74'],
  ] as [string, string, [string, string][], string, string | null][])('type from %s', (_name, body, extra, type, objectId) => {
    const e = env(tokenMode, [['x-gitlab-token', TOKEN], ['idempotency-key', ID], ...extra], body) as { eventType: string; objectId: string | null };
    expect(e.eventType).toBe(type);
    expect(e.objectId).toBe(objectId);
  });

  it('updated_at in GitLab’s "YYYY-MM-DD hh:mm:ss UTC" form is normalised to ISO (sortable); garbage → null', () => {
    const e = env(tokenMode, [['x-gitlab-token', TOKEN], ['idempotency-key', ID]], '{"object_kind":"note","object_attributes":{"id":1243,"updated_at":"2015-05-17 18:08:09 UTC"}}');
    expect(e).toMatchObject({ objectId: '1243', objectVersion: '2015-05-17T18:08:09.000Z' });
    const g = env(tokenMode, [['x-gitlab-token', TOKEN], ['idempotency-key', ID]], '{"object_kind":"note","object_attributes":{"id":1,"updated_at":"yesterday"}}');
    expect(g).toMatchObject({ objectVersion: null });
  });

  it.each([
    ['no type anywhere', '{"project":{"id":1}}', 'missing_event_type'],
    ['not JSON', '{', 'malformed_payload'],
    ['a JSON array', '[]', 'malformed_payload'],
  ])('%s → %s', (_name, body, reason) => {
    expect(reasonOf(() => env(tokenMode, [['x-gitlab-token', TOKEN], ['idempotency-key', ID]], body))).toBe(reason);
  });
});

describe('gitlab: sign and sample', () => {
  it('sign: whsec_ → Standard Webhooks headers (+ Idempotency-Key); anything else → X-Gitlab-Token', () => {
    expect(Object.keys(auto.sign(Buffer.from(ISSUE), SIGNING, { id: ID })).sort()).toEqual(['idempotency-key', 'webhook-id', 'webhook-signature', 'webhook-timestamp']);
    expect(auto.sign(Buffer.from(ISSUE), TOKEN, { id: ID })).toEqual({ 'idempotency-key': ID, 'x-gitlab-token': TOKEN });
    expect(tokenMode.sign(Buffer.from(ISSUE), SIGNING, { id: ID })).toEqual({ 'idempotency-key': ID, 'x-gitlab-token': SIGNING });
  });

  it.each([['signing', signing, SIGNING], ['token', tokenMode, TOKEN], ['auto', auto, TOKEN]] as [string, ProviderAdapter, string][])('sample verifies and envelopes in %s mode', (_m, a, secret) => {
    const s = a.sample('7');
    const pairs: [string, string][] = [...Object.entries(s.headers), ...Object.entries(a.sign(s.body, secret, s.signOptions))];
    expect(check(a, pairs, s.body, keysFor(a, ['v1', secret]))).toBe('v1');
    expect(a.envelope(s.body, view(pairs), a.parseSignature(view(pairs)))).toMatchObject({ eventType: 'push', objectId: '15' });
  });
});

// ---------------------------------------------------------------------------------------------
// Over HTTP, on both stores: token mode (which the shared suite cannot cover: nothing is signed)
// and the interplay of modes.
// ---------------------------------------------------------------------------------------------

const TOKENS = { v2: 'gitlab-token-current-v2', v1: 'gitlab-token-previous-v1', v0: 'gitlab-token-retired-v0' };
const ENDPOINTS = [
  {
    id: 'gl-token', provider: 'gitlab', options: { mode: 'token' },
    secrets: [{ version: 'v2', value: TOKENS.v2 }, { version: 'v1', value: TOKENS.v1 }, { version: 'v0', value: TOKENS.v0, retireAt: '2000-01-01T00:00:00Z' }],
  },
  { id: 'gl-auto', provider: 'gitlab', secrets: [{ version: 'sig', value: SIGNING }, { version: 'tok', value: TOKEN }] },
  { id: 'gl-signing', provider: 'gitlab', options: { mode: 'signing' }, secrets: [{ version: 'sig', value: SIGNING }] },
];

const issueBody = (objectId: number, text = 'plain') => Buffer.from(`{"object_kind": "issue", "project": {"id": 1}, "object_attributes": {"id": ${objectId}, "title": "${text}", "amount": 1.0}}`, 'utf8');

describeEachStore('gitlab over HTTP', (kind) => {
  let app: TestApp;
  beforeAll(async () => {
    app = await startTestApp(kind, { endpoints: ENDPOINTS });
  });
  afterAll(async () => {
    await app?.stop();
  });

  const send = (endpoint: string, body: Buffer, headers: Record<string, string> | [string, string][]) => post(`${app.url}/webhooks/${endpoint}`, body, headers);
  const base = (extra: Record<string, string> = {}) => ({ 'content-type': 'application/json', 'x-gitlab-event': 'Issue Hook', ...extra });

  async function rowOf(r: Awaited<ReturnType<typeof send>>): Promise<InboxRow> {
    expect(r.status, r.text).toBe(200);
    const row = await app.store.getInbox(r.json().inbox_id);
    expect(row).not.toBeNull();
    return row!;
  }

  async function expectRejected(endpoint: string, body: Buffer, headers: Record<string, string> | [string, string][], status: number, reason: string) {
    const before = await app.store.countRows();
    const r = await send(endpoint, body, headers);
    expect(r.status, r.text).toBe(status);
    expect(r.json().error, r.text).toBe(reason);
    expect(await app.store.countRows()).toEqual(before);
  }

  describe('token mode', () => {
    it('the current and previous tokens are accepted (matched version recorded); key = Idempotency-Key', async () => {
      const id = randomUUID();
      const row = await rowOf(await send('gl-token', issueBody(11), base({ 'x-gitlab-token': TOKENS.v2, 'idempotency-key': id })));
      expect(row).toMatchObject({ provider: 'gitlab', endpointId: 'gl-token', providerEventId: id, eventType: 'issue', objectId: '11', matchedSecretVersion: 'v2' });
      const prev = await rowOf(await send('gl-token', issueBody(12), base({ 'x-gitlab-token': TOKENS.v1, 'idempotency-key': randomUUID() })));
      expect(prev.matchedSecretVersion).toBe('v1');
    });

    it('wrong, retired, missing and duplicated tokens are refused; nothing stored', async () => {
      const h = (t: string) => base({ 'x-gitlab-token': t, 'idempotency-key': randomUUID() });
      await expectRejected('gl-token', issueBody(13), h('gitlab-token-current-v3'), 401, 'invalid_signature');
      await expectRejected('gl-token', issueBody(13), h(TOKENS.v0), 401, 'invalid_signature');
      await expectRejected('gl-token', issueBody(13), base({ 'idempotency-key': randomUUID() }), 401, 'missing_signature');
      await expectRejected('gl-token', issueBody(13), [...Object.entries(h(TOKENS.v2)), ['X-GITLAB-TOKEN', TOKENS.v2]], 400, 'ambiguous_signature');
    });

    it('a retry / Resend with the same Idempotency-Key → 200 duplicate:true, one row', async () => {
      const id = randomUUID();
      const first = await send('gl-token', issueBody(14), base({ 'x-gitlab-token': TOKENS.v2, 'idempotency-key': id }));
      expect(first.json()).toEqual({ inbox_id: expect.any(String), duplicate: false });
      const again = await send('gl-token', issueBody(14), base({ 'x-gitlab-token': TOKENS.v1, 'idempotency-key': id }));
      expect(again.json()).toEqual({ inbox_id: first.json().inbox_id, duplicate: true });
    });

    it('body integrity is NOT protected: a changed body with a captured token is accepted (documented limit of token mode)', async () => {
      const forged = await rowOf(await send('gl-token', issueBody(15, 'forged by anyone who saw the token'), base({ 'x-gitlab-token': TOKENS.v2, 'idempotency-key': randomUUID() })));
      expect(forged.matchedSecretVersion).toBe('v2');
      // Replaying a captured request under its own key is only a duplicate: the durable key is the whole replay protection.
      const id = randomUUID();
      const original = await rowOf(await send('gl-token', issueBody(16), base({ 'x-gitlab-token': TOKENS.v2, 'idempotency-key': id })));
      const replay = await send('gl-token', issueBody(16, 'changed'), base({ 'x-gitlab-token': TOKENS.v2, 'idempotency-key': id }));
      expect(replay.json()).toEqual({ inbox_id: original.inboxId, duplicate: true });
    });

    it('no timestamp: a delivery with an old Date header is accepted (nothing signed says when)', async () => {
      await rowOf(await send('gl-token', issueBody(17), base({ 'x-gitlab-token': TOKENS.v2, 'idempotency-key': randomUUID(), date: 'Tue, 01 Jan 2019 00:00:00 GMT' })));
    });

    it('GitLab < 17.4 (no Idempotency-Key): the same bytes under the same X-Gitlab-Event-UUID are one row; another event under that UUID is another row', async () => {
      const uuid = randomUUID();
      const h = base({ 'x-gitlab-token': TOKENS.v2, 'x-gitlab-event-uuid': uuid });
      const a = await rowOf(await send('gl-token', issueBody(18), h));
      expect((await send('gl-token', issueBody(18), h)).json()).toEqual({ inbox_id: a.inboxId, duplicate: true });
      const b = await rowOf(await send('gl-token', issueBody(19), h));
      expect(b.inboxId).not.toBe(a.inboxId);
    });
  });

  describe('auto and signing modes', () => {
    it('auto: a signed request matches the signing token, a token request the plain token', async () => {
      const body = issueBody(21);
      const signedRow = await rowOf(await send('gl-auto', body, base(PROVIDERS.gitlab!(undefined, 'x').sign(body, SIGNING, { id: randomUUID() }))));
      expect(signedRow.matchedSecretVersion).toBe('sig');
      const tokenRow = await rowOf(await send('gl-auto', issueBody(22), base({ 'x-gitlab-token': TOKEN, 'idempotency-key': randomUUID() })));
      expect(tokenRow.matchedSecretVersion).toBe('tok');
    });

    it('auto: the signing token sent in clear as X-Gitlab-Token → 401 (a key only checks its own scheme)', async () => {
      await expectRejected('gl-auto', issueBody(23), base({ 'x-gitlab-token': SIGNING, 'idempotency-key': randomUUID() }), 401, 'invalid_signature');
    });

    it('auto: the right token beside a malformed webhook-signature → 401 malformed_signature; the token does not excuse it', async () => {
      const body = issueBody(26);
      const signed = PROVIDERS.gitlab!(undefined, 'x').sign(body, SIGNING, { id: randomUUID() });
      const withToken = (over: Record<string, string | null>) => {
        const h: Record<string, string> = { ...base(signed), 'x-gitlab-token': TOKEN };
        for (const [k, v] of Object.entries(over)) if (v === null) delete h[k]; else h[k] = v;
        return h;
      };
      await expectRejected('gl-auto', body, withToken({ 'webhook-signature': 'garbage' }), 401, 'malformed_signature');
      await expectRejected('gl-auto', body, withToken({ 'webhook-signature': 'v1,not base64!' }), 401, 'malformed_signature');
      await expectRejected('gl-auto', body, withToken({ 'webhook-signature': `v1,${Buffer.alloc(20).toString('base64')}` }), 401, 'malformed_signature');
      await expectRejected('gl-auto', body, withToken({ 'webhook-timestamp': 'yesterday' }), 401, 'malformed_signature');
      await expectRejected('gl-auto', body, withToken({ 'webhook-id': null }), 401, 'malformed_signature');
      // The same request with its signature intact, or without any signature header, is accepted.
      expect((await send('gl-auto', body, withToken({}))).status).toBe(200);
      const tokenOnly = await send('gl-auto', issueBody(27), withToken({ 'webhook-signature': null, 'webhook-id': null, 'webhook-timestamp': null, 'idempotency-key': randomUUID() }));
      expect(tokenOnly.status, tokenOnly.text).toBe(200);
    });

    it('signing: a token-only request → 401 missing_signature even with the right plain value', async () => {
      await expectRejected('gl-signing', issueBody(24), base({ 'x-gitlab-token': SIGNING, 'idempotency-key': randomUUID() }), 401, 'missing_signature');
    });

    it('signing: a stale signed timestamp → 401 stale_timestamp', async () => {
      const body = issueBody(25);
      const h = signing.sign(body, SIGNING, { id: randomUUID(), timestamp: Math.floor(Date.now() / 1000) - 3600 });
      await expectRejected('gl-signing', body, base(h), 401, 'stale_timestamp');
    });
  });
});
