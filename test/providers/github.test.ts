import { sign as octokitSign, verify as octokitVerify } from '@octokit/webhooks-methods';
import { describe, expect, it } from 'vitest';
import { parseConfig } from '../../src/config/schema.js';
import type { TrustedKey } from '../../src/crypto/hmac.js';
import { ConfigError } from '../../src/errors.js';
import type { ProviderAdapter, RequestView } from '../../src/providers/contract.js';
import { PROVIDERS } from '../../src/providers/registry.js';
import { expectedFirst, reasonOf, trustedKeys, verifyWith, view } from '../helpers/adapter.js';

const adapter: ProviderAdapter = PROVIDERS.github!(undefined, 'endpoints[0].options');

const keys = (...entries: [string, string, number?][]): TrustedKey[] => trustedKeys(adapter, ...entries);

const check = (signature: string, body: Buffer | string, ks: TrustedKey[], nowMs = Date.now()) => verifyWith(adapter, [['X-Hub-Signature-256', signature]], body, ks, nowMs);

/** Exact bytes of octokit/webhooks-methods.js test/verify.test.ts `toNormalizedJsonString(...)` (GitHub's 2-space JSON + "\n"). */
const OCTOKIT_PRETTY = '{\n  "foo": "bar"\n}\n';
const OCTOKIT_SPECIAL = '{\n  "foo": "Foo\\n\\u001B[34mbar: ♥♥♥♥♥♥♥♥\\nthis-is-lost\\u001B[0m\\u001B[2K"\n}\n';
const OCTOKIT_ESCAPED = '{\n  "foo": "\\\\u001b"\n}\n';

describe('github: published vectors', () => {
  it.each([
    // github/docs content/webhooks/using-webhooks/validating-webhook-deliveries.md
    ['GitHub docs', "It's a Secret to Everybody", 'Hello, World!', 'sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17'],
    // octokit/webhooks-methods.js test/sign.test.ts
    ['octokit sign.test', 'mysecret', '{"foo":"bar"}', 'sha256=4864d2759938a15468b5df9ade20bf161da9b4f737ea61794142f3484236bda3'],
    // octokit/webhooks-methods.js test/verify.test.ts
    ['octokit verify.test (pretty JSON)', 'mysecret', OCTOKIT_PRETTY, 'sha256=e3eccac34c43c7dc1cbb905488b1b81347fcc700a7b025697a9d07862256023f'],
    ['octokit verify.test #71 (multi-byte ♥, \\u001B)', 'development', OCTOKIT_SPECIAL, 'sha256=9dacf9003316b09be07df56d86a2d0d6872e42a1e6c72c3bad9ff915a7c5603e'],
    ['octokit verify.test #71 (escaped backslash-u)', 'development', OCTOKIT_ESCAPED, 'sha256=87316067e2011fae39998b18c46a14d83b3e7c3ffdd88fb2ee5afb7d11288e60'],
  ])('%s: sign reproduces it and verify accepts it', (_name, secret, payload, expected) => {
    const body = Buffer.from(payload, 'utf8');
    expect(adapter.sign(body, secret, {})).toEqual({ 'x-hub-signature-256': expected });
    expect(check(expected, body, keys(['v1', secret]))).toBe('v1');
    expect(check(expected, body, keys(['v1', `${secret}!`]))).toBeNull();
  });

  it('the same JSON value with a lower-case \\u001b escape is different bytes and fails (never re-serialise)', () => {
    const lower = OCTOKIT_SPECIAL.replaceAll('\\u001B', '\\u001b');
    expect(JSON.parse(lower)).toEqual(JSON.parse(OCTOKIT_SPECIAL));
    expect(check('sha256=9dacf9003316b09be07df56d86a2d0d6872e42a1e6c72c3bad9ff915a7c5603e', lower, keys(['v1', 'development']))).toBeNull();
  });
});

describe('github: cross-checks with @octokit/webhooks-methods', () => {
  const payloads = ['{"zen":"Design for failure."}', '{"comment":{"body":"é 🎉 東京 — \\u00e9"}}\n', OCTOKIT_SPECIAL];

  it.each(payloads)('octokit sign → ours verifies: %j', async (payload) => {
    const sig = await octokitSign('octo-secret', payload);
    expect(check(sig, payload, keys(['v1', 'octo-secret']))).toBe('v1');
    expect(check(sig, payload + ' ', keys(['v1', 'octo-secret']))).toBeNull();
  });

  it.each(payloads)('ours sign → octokit verify accepts: %j', async (payload) => {
    const sig = adapter.sign(Buffer.from(payload, 'utf8'), 'octo-secret', {})['x-hub-signature-256']!;
    expect(await octokitVerify('octo-secret', payload, sig)).toBe(true);
    expect(await octokitVerify('other-secret', payload, sig)).toBe(false);
  });
});

describe('github: X-Hub-Signature-256 parsing', () => {
  const body = Buffer.from('{"zen":"x"}');
  const good = adapter.sign(body, 's3cret', {})['x-hub-signature-256']!;

  it('signs no timestamp: no freshness check, metadata timestamp is null', () => {
    expect(adapter.defaultToleranceSeconds).toBeNull();
    expect(adapter.parseSignature(view([['x-hub-signature-256', good]])).timestamp).toBeNull();
    // An arbitrarily late verification still matches: nothing time-bound is signed.
    expect(check(good, body, keys(['v1', 's3cret']), Date.parse('2100-01-01T00:00:00Z'))).toBe('v1');
  });

  it('accepts upper-case hex digits', () => {
    expect(check('sha256=' + good.slice(7).toUpperCase(), body, keys(['v1', 's3cret']))).toBe('v1');
  });

  it.each(expectedFirst([
    ['absent header', [] as [string, string][], 'missing_signature'],
    ['only the legacy SHA-1 header', [['X-Hub-Signature', 'sha1=' + 'a'.repeat(40)]] as [string, string][], 'missing_signature'],
    ['empty header', [['x-hub-signature-256', '']] as [string, string][], 'missing_signature'],
    ['sha1= prefix', [['x-hub-signature-256', 'sha1=' + 'a'.repeat(40)]] as [string, string][], 'malformed_signature'],
    ['no prefix', [['x-hub-signature-256', 'a'.repeat(64)]] as [string, string][], 'malformed_signature'],
    ['malformed hex', [['x-hub-signature-256', 'sha256=' + 'z'.repeat(64)]] as [string, string][], 'malformed_signature'],
    ['short digest', [['x-hub-signature-256', 'sha256=' + 'a'.repeat(62)]] as [string, string][], 'malformed_signature'],
    ['long digest', [['x-hub-signature-256', 'sha256=' + 'a'.repeat(66)]] as [string, string][], 'malformed_signature'],
    ['two signature headers', [['x-hub-signature-256', 'sha256=' + 'a'.repeat(64)], ['X-Hub-Signature-256', 'sha256=' + 'b'.repeat(64)]] as [string, string][], 'ambiguous_signature'],
  ]))('%s → %s', (_name, reason, pairs) => {
    expect(reasonOf(() => adapter.parseSignature(view(pairs)))).toBe(reason);
  });

  it('a retired secret never verifies; rotation accepts any trusted version', () => {
    const now = Date.now();
    expect(check(good, body, keys(['v2', 'new'], ['v1', 's3cret']), now)).toBe('v1');
    expect(check(good, body, keys(['v2', 'new'], ['v1', 's3cret', now - 1]), now)).toBeNull();
  });

  it('refuses an empty secret', () => {
    expect(() => adapter.prepareSecret('')).toThrow(/empty/);
  });
});

describe('github: envelope', () => {
  const repoBody = Buffer.from('{"action":"opened","repository":{"id":1,"full_name":"octo-org/octo-repo"}}');
  const headers = (over: Record<string, string | null> = {}): RequestView => {
    const base: Record<string, string | null> = {
      'content-type': 'application/json',
      'x-github-delivery': '72d3162e-cc78-11e3-81ab-4c9367dc0958',
      'x-github-hook-id': '292430182',
      'x-github-event': 'issues',
      ...over,
    };
    return view(Object.entries(base).filter((e): e is [string, string] => e[1] !== null));
  };

  it('key = (hook id, delivery GUID); type from X-GitHub-Event; object = repository.full_name', () => {
    expect(adapter.envelope(repoBody, headers(), { timestamp: null })).toEqual({
      eventId: '292430182:72d3162e-cc78-11e3-81ab-4c9367dc0958',
      eventType: 'issues',
      objectId: 'octo-org/octo-repo',
      objectVersion: null,
      providerCreatedAtMs: null,
    });
    expect(adapter.envelope(repoBody, headers({ 'x-github-hook-id': null }), { timestamp: null }).eventId).toBe('72d3162e-cc78-11e3-81ab-4c9367dc0958');
  });

  it('the delivery GUID is NOT signed: one signed body verifies under any GUID and yields a new key', () => {
    const sig = adapter.sign(repoBody, 's3cret', {})['x-hub-signature-256']!;
    const a = headers();
    const b = headers({ 'x-github-delivery': '00000000-0000-4000-8000-000000000001' });
    expect(check(sig, repoBody, keys(['v1', 's3cret']))).toBe('v1');
    expect(adapter.envelope(repoBody, a, { timestamp: null }).eventId).not.toBe(adapter.envelope(repoBody, b, { timestamp: null }).eventId);
  });

  it('form-encoded deliveries: the signature covers the raw form bytes, the event is the `payload` field', () => {
    const json = '{"zen":"Keep it logically awesome.","repository":{"full_name":"octo-org/é"}}';
    const form = Buffer.from('payload=' + encodeURIComponent(json));
    const sig = adapter.sign(form, 's3cret', {})['x-hub-signature-256']!;
    expect(check(sig, form, keys(['v1', 's3cret']))).toBe('v1');
    expect(check(sig, json, keys(['v1', 's3cret']))).toBeNull();
    const env = adapter.envelope(form, headers({ 'content-type': 'application/x-www-form-urlencoded', 'x-github-event': 'ping' }), { timestamp: null });
    expect(env.objectId).toBe('octo-org/é');
    expect(reasonOf(() => adapter.envelope(Buffer.from('other=1'), headers({ 'content-type': 'application/x-www-form-urlencoded' }), { timestamp: null }))).toBe('malformed_payload');
  });

  it.each(expectedFirst<string, Record<string, string | null>, string>([
    ['no delivery GUID', { 'x-github-delivery': null }, 'missing_event_id'],
    ['no event header', { 'x-github-event': null }, 'missing_event_type'],
  ]))('%s → %s', (_name, reason, over) => {
    expect(reasonOf(() => adapter.envelope(repoBody, headers(over), { timestamp: null }))).toBe(reason);
  });

  it('a repeated delivery, hook id or event header → ambiguous_header (the key is never picked from a repeated header; none of them is signed)', () => {
    const v = view([['x-github-event', 'ping'], ['x-github-delivery', 'a'], ['X-GitHub-Delivery', 'b']]);
    expect(reasonOf(() => adapter.envelope(repoBody, v, { timestamp: null }))).toBe('ambiguous_header');
    const hook = view([['x-github-event', 'ping'], ['x-github-delivery', 'a'], ['x-github-hook-id', '1'], ['x-github-hook-id', '2']]);
    expect(reasonOf(() => adapter.envelope(repoBody, hook, { timestamp: null }))).toBe('ambiguous_header');
    const type = view([['x-github-event', 'ping'], ['x-github-event', 'push'], ['x-github-delivery', 'a']]);
    expect(reasonOf(() => adapter.envelope(repoBody, type, { timestamp: null }))).toBe('ambiguous_header');
  });

  it('config: toleranceSeconds on a GitHub endpoint is refused (nothing signed to check), naming the path', () => {
    const doc = {
      database: 'sqlite::memory:',
      payloadKeys: { current: 'k1', keys: { k1: Buffer.alloc(32, 7).toString('base64') } },
      endpoints: [{ id: 'gh', provider: 'github', toleranceSeconds: 300, secrets: [{ version: 'v1', value: 'x' }] }],
    };
    expect(() => parseConfig(doc, {})).toThrow(ConfigError);
    expect(() => parseConfig(doc, {})).toThrow(/^endpoints\[0\]\.toleranceSeconds: /);
  });
});
