import { sign as octokitSign, verify as octokitVerify } from '@octokit/webhooks-methods';
import { Webhook } from 'standardwebhooks';
import { describe, expect, it } from 'vitest';
import { parseConfig } from '../../src/config/schema.js';
import { ConfigError } from '../../src/errors.js';
import type { ProviderAdapter } from '../../src/providers/contract.js';
import { PROVIDERS } from '../../src/providers/registry.js';
import { storableEnvelope } from '../../src/providers/storable.js';
import { configDoc } from '../helpers/app.js';
import { expectedFirst, reasonOf, thrownBy, trustedKeys, verifyWith, view } from '../helpers/adapter.js';

const PATH = 'endpoints[3].options';
const generic = (options: Record<string, unknown>): ProviderAdapter => PROVIDERS['generic-hmac']!(options, PATH);

/** The ConfigError path (the part before ": "), or throws if no ConfigError was raised. */
const configPath = (fn: () => unknown): string => thrownBy(fn, ConfigError).path;

describe('generic-hmac: published vectors of other providers, reproduced by configuration', () => {
  const githubStyle = generic({ signatureHeader: 'X-Hub-Signature-256', prefix: 'sha256=', encoding: 'hex', idPath: 'id' });

  it.each([
    // github/docs content/webhooks/using-webhooks/validating-webhook-deliveries.md
    ["It's a Secret to Everybody", 'Hello, World!', 'sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17'],
    // octokit/webhooks-methods.js test/sign.test.ts
    ['mysecret', '{"foo":"bar"}', 'sha256=4864d2759938a15468b5df9ade20bf161da9b4f737ea61794142f3484236bda3'],
    // octokit/webhooks-methods.js test/verify.test.ts (#71: multi-byte ♥ and \u001B escapes)
    ['development', '{\n  "foo": "Foo\\n\\u001B[34mbar: ♥♥♥♥♥♥♥♥\\nthis-is-lost\\u001B[0m\\u001B[2K"\n}\n', 'sha256=9dacf9003316b09be07df56d86a2d0d6872e42a1e6c72c3bad9ff915a7c5603e'],
  ])('GitHub-style (prefix sha256=, hex, raw body): secret %j', (secret, payload, expected) => {
    expect(githubStyle.sign(Buffer.from(payload), secret, {})).toEqual({ 'x-hub-signature-256': expected });
    expect(verifyWith(githubStyle, [['x-hub-signature-256', expected]], payload, trustedKeys(githubStyle, ['v1', secret]))).toBe('v1');
    expect(verifyWith(githubStyle, [['x-hub-signature-256', expected]], payload + '\n', trustedKeys(githubStyle, ['v1', secret]))).toBeNull();
  });

  it('GitHub-style ⇄ @octokit/webhooks-methods, both directions', async () => {
    const payload = '{"comment":"é 🎉 東京"}';
    const theirs = await octokitSign('octo', payload);
    expect(verifyWith(githubStyle, [['x-hub-signature-256', theirs]], payload, trustedKeys(githubStyle, ['v1', 'octo']))).toBe('v1');
    const ours = githubStyle.sign(Buffer.from(payload), 'octo', {})['x-hub-signature-256']!;
    expect(await octokitVerify('octo', payload, ours)).toBe(true);
  });

  it('Razorpay-style (bare hex of the raw body): razorpay/razorpay-node test/utils/razorpay-utils.spec.js', () => {
    const rzp = generic({ signatureHeader: 'X-Razorpay-Signature', idPath: 'id' });
    const body = '{"a":1,"b":2,"c":{"d":3}}';
    const sig = '2fe04e22977002e6c7cb553adab8b460cb9e2a4970d5953cb27a8472752e3bbc';
    expect(rzp.sign(Buffer.from(body), '123456', {})).toEqual({ 'x-razorpay-signature': sig });
    expect(verifyWith(rzp, [['x-razorpay-signature', sig]], body, trustedKeys(rzp, ['v1', '123456']))).toBe('v1');
    // The SDK test's wrong signature: not even a digest.
    expect(reasonOf(() => rzp.parseSignature(view([['x-razorpay-signature', 'sdfafds']])))).toBe('malformed_signature');
  });

  it('Square-style (registered notification URL as a literal + raw body, base64): Square docs sample', () => {
    const square = generic({
      signatureHeader: 'x-square-hmacsha256-signature', encoding: 'base64',
      signedContent: 'https://example.com/webhook{body}', idPath: 'event_id',
    });
    const body = '{"hello":"world"}';
    const sig = '2kRE5qRU2tR+tBGlDwMEw2avJ7QM4ikPYD/PJ3bd9Og=';
    expect(square.sign(Buffer.from(body), 'asdf1234', {})).toEqual({ 'x-square-hmacsha256-signature': sig });
    expect(verifyWith(square, [['x-square-hmacsha256-signature', sig]], body, trustedKeys(square, ['v1', 'asdf1234']))).toBe('v1');
    const otherUrl = generic({ signatureHeader: 'x-square-hmacsha256-signature', encoding: 'base64', signedContent: 'https://example.com/webhook/{body}', idPath: 'event_id' });
    expect(verifyWith(otherUrl, [['x-square-hmacsha256-signature', sig]], body, trustedKeys(otherUrl, ['v1', 'asdf1234']))).toBeNull();
  });

  it('Slack-style (v0=, "v0:{timestamp}:{body}", form body): api.slack.com "Verifying requests from Slack" example', () => {
    const slack = generic({
      signatureHeader: 'X-Slack-Signature', prefix: 'v0=', signedContent: 'v0:{timestamp}:{body}',
      timestampHeader: 'X-Slack-Request-Timestamp', idPath: 'event_id', contentTypes: ['application/x-www-form-urlencoded'],
    });
    const body = 'token=xyzz0WbapA4vBCDEFasx0q6G&team_id=T1DC2JH3J&team_domain=testteamnow&channel_id=G8PSS9T3V&channel_name=foobar&user_id=U2CERLKJA&user_name=roadrunner&command=%2Fwebhook-collect&text=&response_url=https%3A%2F%2Fhooks.slack.com%2Fcommands%2FT1DC2JH3J%2F397700885554%2F96rGlfmibIGlgcZRskXaIFfN&trigger_id=398738663015.47445629121.803a0bc887a14d10d2c447fce8b6703c';
    const sig = 'v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503';
    const secret = '8f742231b10e8888abcd99yyyzzz85a5';
    expect(slack.sign(Buffer.from(body), secret, { timestamp: 1531420618 })).toEqual({ 'x-slack-signature': sig, 'x-slack-request-timestamp': '1531420618' });
    const pairs: [string, string][] = [['X-Slack-Signature', sig], ['X-Slack-Request-Timestamp', '1531420618']];
    expect(verifyWith(slack, pairs, body, trustedKeys(slack, ['v1', secret]))).toBe('v1');
    expect(slack.parseSignature(view(pairs)).timestamp).toBe(1531420618);
    expect(verifyWith(slack, [pairs[0]!, ['X-Slack-Request-Timestamp', '1531420619']], body, trustedKeys(slack, ['v1', secret]))).toBeNull();
    expect(slack.contentTypes).toEqual(['application/x-www-form-urlencoded']);
  });

  describe('Standard-Webhooks-style (base64 secret, "v1," prefix, space separator, signed id and timestamp)', () => {
    const sw = generic({
      signatureHeader: 'webhook-signature', prefix: 'v1,', separator: ' ', encoding: 'base64', secretEncoding: 'base64',
      signedContent: '{id}.{timestamp}.{body}', idHeader: 'webhook-id', timestampHeader: 'webhook-timestamp',
    });
    const secret = 'MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw'; // standard-webhooks libraries/javascript/src/webhook.test.ts, minus whsec_

    it('reproduces the published vector', () => {
      const h = sw.sign(Buffer.from('{"test": 2432232314}'), secret, { id: 'msg_p5jXN8AQM9LWM0D4loKWxJek', timestamp: 1614265330 });
      expect(h).toEqual({ 'webhook-signature': 'v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=', 'webhook-id': 'msg_p5jXN8AQM9LWM0D4loKWxJek', 'webhook-timestamp': '1614265330' });
      expect(verifyWith(sw, Object.entries(h), '{"test": 2432232314}', trustedKeys(sw, ['v1', secret]))).toBe('v1');
    });

    it('⇄ standardwebhooks SDK, both directions; several signatures, any may match', () => {
      const payload = '{"type":"x.y","data":{"n":"Zoë 🦄"}}';
      const ts = Math.floor(Date.now() / 1000);
      const theirs = new Webhook('whsec_' + secret).sign('msg_1', new Date(ts * 1000), payload);
      const other = 'v1,' + Buffer.alloc(32, 3).toString('base64');
      const pairs: [string, string][] = [['webhook-id', 'msg_1'], ['webhook-timestamp', String(ts)], ['webhook-signature', `${other} ${theirs}`]];
      expect(verifyWith(sw, pairs, payload, trustedKeys(sw, ['v1', secret]))).toBe('v1');
      const ours = sw.sign(Buffer.from(payload), secret, { id: 'msg_2', timestamp: ts });
      expect(new Webhook('whsec_' + secret).verify(payload, ours)).toEqual(JSON.parse(payload));
    });
  });
});

describe('generic-hmac: configuration is validated and errors name the path', () => {
  const base = { signatureHeader: 'x-signature', idPath: 'id' };

  it.each(expectedFirst([
    ['signatureHeader missing', { idPath: 'id' }, `${PATH}.signatureHeader`],
    ['unknown key', { ...base, signatureHeadr: 'x' }, `${PATH}.signatureHeadr`],
    ['unknown algorithm', { ...base, algorithm: 'md5' }, `${PATH}.algorithm`],
    ['unknown encoding', { ...base, encoding: 'base32' }, `${PATH}.encoding`],
    ['unknown secretEncoding', { ...base, secretEncoding: 'latin1' }, `${PATH}.secretEncoding`],
    ['neither idHeader nor idPath', { signatureHeader: 'x-signature' }, PATH],
    ['both idHeader and idPath', { ...base, idHeader: 'x-id', signedContent: '{id}.{body}' }, PATH],
    ['idHeader not covered by signedContent', { signatureHeader: 'x-signature', idHeader: 'x-razorpay-event-id' }, `${PATH}.idHeader`],
    ['{id} without idHeader', { ...base, signedContent: '{id}.{body}' }, `${PATH}.signedContent`],
    ['timestampHeader not covered by signedContent', { ...base, timestampHeader: 'x-timestamp' }, `${PATH}.timestampHeader`],
    ['{timestamp} without timestampHeader', { ...base, signedContent: '{timestamp}.{body}' }, `${PATH}.signedContent`],
    ['typeHeader not covered by signedContent', { ...base, typeHeader: 'x-event-type' }, `${PATH}.typeHeader`],
    ['{type} without typeHeader', { ...base, signedContent: '{type}.{body}' }, `${PATH}.signedContent`],
    ['unsignedTypeHeader without typeHeader', { ...base, unsignedTypeHeader: true }, `${PATH}.unsignedTypeHeader`],
    ['unsignedTypeHeader beside {type}', { ...base, typeHeader: 'x-t', signedContent: '{type}.{body}', unsignedTypeHeader: true }, `${PATH}.unsignedTypeHeader`],
    ['toleranceSeconds without timestampHeader', { ...base, toleranceSeconds: 60 }, `${PATH}.toleranceSeconds`],
    ['toleranceSeconds out of range', { ...base, timestampHeader: 'x-ts', signedContent: '{timestamp}.{body}', toleranceSeconds: 0 }, `${PATH}.toleranceSeconds`],
    ['unknown placeholder', { ...base, signedContent: '{url}{body}' }, `${PATH}.signedContent`],
    ['no {body}', { ...base, signedContent: 'static' }, `${PATH}.signedContent`],
    ['{body} twice', { ...base, signedContent: '{body}.{body}' }, `${PATH}.signedContent`],
    ['empty prefix string', { ...base, prefix: '' }, `${PATH}.prefix`],
    ['contentTypes not a list', { ...base, contentTypes: 'application/json' }, `${PATH}.contentTypes`],
  ]))('%s → %s', (_name, path, options) => {
    expect(configPath(() => generic(options))).toBe(path);
  });

  // Each of these was accepted and then matched no request: a header name no request can carry
  // (every request 401 missing_signature, or 400), a content type with parameters or a wildcard
  // (compared with the bare media type: every request 415), a path that names no member (every
  // request 400 missing_event_id).
  it.each(expectedFirst([
    ['signatureHeader with the colon', { ...base, signatureHeader: 'X-Signature:' }, `${PATH}.signatureHeader`],
    ['signatureHeader with a space', { ...base, signatureHeader: 'x signature' }, `${PATH}.signatureHeader`],
    ['timestampHeader with a trailing space', { ...base, timestampHeader: 'x-ts ', signedContent: '{timestamp}.{body}' }, `${PATH}.timestampHeader`],
    ['idHeader with the colon', { signatureHeader: 'x-signature', idHeader: 'x-id:', signedContent: '{id}.{body}' }, `${PATH}.idHeader`],
    ['typeHeader with a space', { ...base, typeHeader: 'x event type', signedContent: '{type}.{body}' }, `${PATH}.typeHeader`],
    ['a content type with parameters', { ...base, contentTypes: ['application/json; charset=utf-8'] }, `${PATH}.contentTypes[0]`],
    ['a content type wildcard', { ...base, contentTypes: ['application/json', 'application/*'] }, `${PATH}.contentTypes[1]`],
    ['a content type with surrounding space', { ...base, contentTypes: [' application/json'] }, `${PATH}.contentTypes[0]`],
    ['a content type without a subtype', { ...base, contentTypes: ['json'] }, `${PATH}.contentTypes[0]`],
    ['a JSONPath idPath', { signatureHeader: 'x-signature', idPath: '$.id' }, `${PATH}.idPath`],
    ['an idPath with an empty step', { signatureHeader: 'x-signature', idPath: 'data..id' }, `${PATH}.idPath`],
    ['a typePath with brackets', { ...base, typePath: 'events[0].type' }, `${PATH}.typePath`],
    ['an objectIdPath ending in a dot', { ...base, objectIdPath: 'data.object.' }, `${PATH}.objectIdPath`],
  ]))('no request could match: %s → %s', (_name, path, options) => {
    expect(configPath(() => generic(options))).toBe(path);
  });

  it('header names, media types and dotted paths as documented are accepted', () => {
    expect(() => generic({ signatureHeader: 'X-Hub-Signature-256', idHeader: 'X-GitHub-Delivery', signedContent: '{id}{body}', contentTypes: ['application/json', 'Application/Vnd.Api+JSON'] })).not.toThrow();
    expect(() => generic({ ...base, typePath: 'data.type', objectIdPath: 'items.0.id', createdAtPath: '$created' })).not.toThrow();
  });

  it('through the config loader the full endpoint path is named', () => {
    const doc = configDoc('sqlite::memory:', {
      endpoints: [
        { id: 'ok', provider: 'github', secrets: [{ version: 'v1', value: 'x' }] },
        { id: 'rzp', provider: 'generic-hmac', secrets: [{ version: 'v1', value: 'x' }], options: { signatureHeader: 'x-razorpay-signature', idHeader: 'x-razorpay-event-id' } },
      ],
    });
    expect(configPath(() => parseConfig(doc, {}))).toBe('endpoints[1].options.idHeader');
    expect(() => parseConfig(doc, {})).toThrow(/must be signed/);
  });

  it('timestampHeader defaults the freshness window to 300 s; toleranceSeconds overrides it; none without a timestamp', () => {
    expect(generic(base).defaultToleranceSeconds).toBeNull();
    expect(generic({ ...base, timestampHeader: 'x-ts', signedContent: '{timestamp}.{body}' }).defaultToleranceSeconds).toBe(300);
    expect(generic({ ...base, timestampHeader: 'x-ts', signedContent: '{timestamp}.{body}', toleranceSeconds: 90 }).defaultToleranceSeconds).toBe(90);
  });

  it.each([
    ['utf8', 'any text', null],
    ['hex', 'deadbeef', null],
    ['hex', 'not-hex', /not valid hex/],
    ['base64', 'c2VjcmV0', null],
    ['base64', 'c2VjcmV0!', /not valid base64/],
  ] as const)('secretEncoding %s: %j', (secretEncoding, value, error) => {
    const a = generic({ ...base, secretEncoding });
    if (error) expect(() => a.prepareSecret(value)).toThrow(error);
    else expect(a.prepareSecret(value).length).toBeGreaterThan(0);
  });
});

describe('generic-hmac: signature parsing', () => {
  const full = generic({
    signatureHeader: 'x-signature', prefix: 'sha256=', separator: ',', signedContent: '{id}.{timestamp}.{body}',
    idHeader: 'x-event-id', timestampHeader: 'x-timestamp', toleranceSeconds: 120,
  });
  const body = Buffer.from('{"type":"order.paid","id":"ignored-because-idHeader"}');
  const signed = full.sign(body, 'current', { id: 'evt_1', timestamp: 1_700_000_000 });
  const pairs = (over: Record<string, string | null> = {}): [string, string][] =>
    Object.entries({ ...signed, ...over }).filter((e): e is [string, string] => e[1] !== null);

  it('signs and verifies id + timestamp + body; changing any of them fails', () => {
    const k = trustedKeys(full, ['v1', 'current']);
    expect(verifyWith(full, pairs(), body, k)).toBe('v1');
    expect(verifyWith(full, pairs({ 'x-event-id': 'evt_2' }), body, k)).toBeNull();
    expect(verifyWith(full, pairs({ 'x-timestamp': '1700000001' }), body, k)).toBeNull();
    expect(verifyWith(full, pairs(), Buffer.concat([body, Buffer.from(' ')]), k)).toBeNull();
  });

  it('several signatures with a separator: any one matching a trusted key verifies', () => {
    const old = full.sign(body, 'previous', { id: 'evt_1', timestamp: 1_700_000_000 })['x-signature']!;
    const both = pairs({ 'x-signature': `${old}, ${signed['x-signature']}` });
    expect(verifyWith(full, both, body, trustedKeys(full, ['v2', 'current']))).toBe('v2');
    expect(verifyWith(full, both, body, trustedKeys(full, ['v1', 'previous']))).toBe('v1');
    expect(verifyWith(full, both, body, trustedKeys(full, ['v0', 'neither']))).toBeNull();
  });

  it.each(expectedFirst<string, Record<string, string | null>, string>([
    ['signature absent', { 'x-signature': null }, 'missing_signature'],
    ['signature empty', { 'x-signature': '' }, 'missing_signature'],
    ['prefix missing', { 'x-signature': 'a'.repeat(64) }, 'malformed_signature'],
    ['malformed hex', { 'x-signature': 'sha256=' + 'x'.repeat(64) }, 'malformed_signature'],
    ['wrong digest length', { 'x-signature': 'sha256=' + 'a'.repeat(40) }, 'malformed_signature'],
    ['trailing separator', { 'x-signature': 'sha256=' + 'a'.repeat(64) + ',' }, 'malformed_signature'],
    ['timestamp absent', { 'x-timestamp': null }, 'malformed_signature'],
    ['timestamp not Unix seconds', { 'x-timestamp': '2023-11-14T22:13:20Z' }, 'malformed_signature'],
    ['id absent', { 'x-event-id': null }, 'malformed_signature'],
  ]))('%s → %s', (_name, reason, over) => {
    expect(reasonOf(() => full.parseSignature(view(pairs(over))))).toBe(reason);
  });

  it.each(['x-signature', 'x-timestamp', 'x-event-id'])('%s sent twice → ambiguous_signature', (name) => {
    expect(reasonOf(() => full.parseSignature(view([...pairs(), [name.toUpperCase(), signed[name]!]])))).toBe('ambiguous_signature');
  });

  it('exposes the signed timestamp and the configured window', () => {
    expect(full.parseSignature(view(pairs())).timestamp).toBe(1_700_000_000);
    expect(full.defaultToleranceSeconds).toBe(120);
  });

  it.each([
    ['sha1', 20],
    ['sha256', 32],
    ['sha512', 64],
  ] as const)('algorithm %s: digest must be %i bytes, base64 works too', (algorithm, bytes) => {
    const a = generic({ signatureHeader: 'x-sig', algorithm, encoding: 'base64', idPath: 'id' });
    const h = a.sign(body, 'k', {});
    expect(Buffer.from(h['x-sig']!, 'base64').length).toBe(bytes);
    expect(verifyWith(a, [['x-sig', h['x-sig']!]], body, trustedKeys(a, ['v1', 'k']))).toBe('v1');
    const wrongLength = Buffer.alloc(bytes === 32 ? 20 : 32, 1).toString('base64');
    expect(reasonOf(() => a.parseSignature(view([['x-sig', wrongLength]])))).toBe('malformed_signature');
    expect(reasonOf(() => a.parseSignature(view([['x-sig', h['x-sig']!.slice(1)]])))).toBe('malformed_signature');
  });

  it('a retired secret never verifies', () => {
    const now = Date.now();
    expect(verifyWith(full, pairs(), body, trustedKeys(full, ['v1', 'current', now]), now)).toBeNull();
    expect(verifyWith(full, pairs(), body, trustedKeys(full, ['v2', 'other'], ['v1', 'current', now + 1000]), now)).toBe('v1');
  });
});

describe('generic-hmac: envelope', () => {
  it('id from the signed header, type/object/version/created from the body paths', () => {
    const a = generic({
      signatureHeader: 'x-sig', signedContent: '{id}.{body}', idHeader: 'x-id',
      typePath: 'event.kind', objectIdPath: 'data.id', objectVersionPath: 'data.version', createdAtPath: 'created_at',
    });
    const body = Buffer.from('{"event":{"kind":"order.paid"},"data":{"id":"ord_1","version":7},"created_at":"2024-01-02T03:04:05Z"}');
    const h = a.sign(body, 's', { id: 'evt_hdr' });
    const meta = a.parseSignature(view(Object.entries(h)));
    expect(a.envelope(body, view([]), meta)).toEqual({
      eventId: 'evt_hdr', eventType: 'order.paid', objectId: 'ord_1', objectVersion: '7', providerCreatedAtMs: Date.parse('2024-01-02T03:04:05Z'),
    });
  });

  it('createdAtPath: a number is Unix seconds; a millisecond epoch reads past year 9999 and is stored as unknown (null)', () => {
    const a = generic({ signatureHeader: 'x-sig', idPath: 'id', createdAtPath: 'created' });
    const at = (created: number) => {
      const body = Buffer.from(JSON.stringify({ id: 'evt_ms', type: 't', created }));
      return storableEnvelope(a.envelope(body, view([]), { timestamp: null }), body).providerCreatedAtMs;
    };
    expect(at(1_733_400_000)).toBe(1_733_400_000_000);
    expect(at(1_733_400_000_000)).toBeNull();
  });

  it('a signed type header ({type}): another type under the same signature does not verify; an absent one is malformed', () => {
    const a = generic({ signatureHeader: 'x-sig', idPath: 'id', typeHeader: 'X-Event-Type', signedContent: '{type}.{body}' });
    const body = '{"id":"evt_t"}';
    const h = a.sign(Buffer.from(body), 's', { type: 'order.paid' });
    expect(h['x-event-type']).toBe('order.paid');
    const keys = trustedKeys(a, ['v1', 's']);
    expect(verifyWith(a, Object.entries(h), body, keys)).toBe('v1');
    expect(verifyWith(a, Object.entries({ ...h, 'x-event-type': 'user.deleted' }), body, keys)).toBeNull();
    const meta = a.parseSignature(view(Object.entries(h)));
    expect(a.envelope(Buffer.from(body), view(Object.entries(h)), meta)).toMatchObject({ eventId: 'evt_t', eventType: 'order.paid' });
    expect(reasonOf(() => a.parseSignature(view([['x-sig', h['x-sig']!]])))).toBe('malformed_signature');
  });

  it('idPath and an unsigned typeHeader (unsignedTypeHeader: true)', () => {
    const a = generic({ signatureHeader: 'x-sig', idPath: 'meta.id', typeHeader: 'X-Event-Type', unsignedTypeHeader: true });
    const body = Buffer.from('{"meta":{"id":"evt_body"}}');
    const meta = a.parseSignature(view(Object.entries(a.sign(body, 's', {}))));
    expect(a.envelope(body, view([['x-event-type', 'thing.happened']]), meta)).toMatchObject({ eventId: 'evt_body', eventType: 'thing.happened' });
    expect(reasonOf(() => a.envelope(body, view([]), meta))).toBe('missing_event_type');
    expect(reasonOf(() => a.envelope(body, view([['x-event-type', 'a'], ['X-Event-Type', 'b']]), meta))).toBe('ambiguous_header');
    expect(reasonOf(() => a.envelope(Buffer.from('{"meta":{}}'), view([['x-event-type', 't']]), meta))).toBe('missing_event_id');
  });
});

/**
 * Known-answer vectors for sha1 and sha512, computed outside this code base (nothing here signs
 * them first), so a wrong hash, a truncation or a mangled encoding cannot agree with itself:
 *
 *   KEY='kat-secret-2025'; BODY='{"id":"evt_kat_1","type":"order.paid"}'
 *   printf '%s' "$BODY" | openssl dgst -sha1   -hmac "$KEY" -r                  # hex
 *   printf '%s' "$BODY" | openssl dgst -sha1   -hmac "$KEY" -binary | base64 -w0 # base64
 *   printf '%s' "$BODY" | openssl dgst -sha512 -hmac "$KEY" -r
 *   printf '%s' "$BODY" | openssl dgst -sha512 -hmac "$KEY" -binary | base64 -w0
 *   (OpenSSL 3.0.19; the same four values from python3 -c "import hmac; hmac.new(KEY, BODY, 'sha1'/'sha512')")
 *
 * and the published RFC 2202 §3 test case 2 (HMAC-SHA-1) and RFC 4231 §4.3 test case 2
 * (HMAC-SHA-512): key "Jefe", data "what do ya want for nothing?" (also reproduced with openssl dgst).
 */
describe('generic-hmac: sha1 and sha512 known-answer vectors (openssl / RFC), hex and base64, with a prefix', () => {
  const KAT_KEY = 'kat-secret-2025';
  const KAT_BODY = '{"id":"evt_kat_1","type":"order.paid"}';
  const JEFE_DATA = 'what do ya want for nothing?';

  /** [name, algorithm, encoding, prefix, secret, body, header value] */
  const vectors: [string, 'sha1' | 'sha512', 'hex' | 'base64', string | undefined, string, string, string][] = [
    ['openssl sha1 hex', 'sha1', 'hex', 'sha1=', KAT_KEY, KAT_BODY, 'sha1=280a28e86de0e53a84fa268955614872575f5a92'],
    ['openssl sha1 base64', 'sha1', 'base64', 'sha1=', KAT_KEY, KAT_BODY, 'sha1=KAoo6G3g5TqE+iaJVWFIcldfWpI='],
    ['openssl sha512 hex', 'sha512', 'hex', 'sha512=', KAT_KEY, KAT_BODY,
      'sha512=6ed2361ffbd7ab7041b7739effcd127acce82c87fd035a83c8ae787050d5e0fbf1ead67aeadf9fcfea8ada2e04ace1477b2b832582293a6c7fecd80b937c8692'],
    ['openssl sha512 base64', 'sha512', 'base64', 'sha512=', KAT_KEY, KAT_BODY,
      'sha512=btI2H/vXq3BBt3Oe/80SeszoLIf9A1qDyK54cFDV4Pvx6tZ66t+fz+qK2i4ErOFHeyuDJYIpOmx/7NgLk3yGkg=='],
    ['RFC 2202 test case 2 (HMAC-SHA-1)', 'sha1', 'hex', undefined, 'Jefe', JEFE_DATA, 'effcdf6ae5eb2fa2d27416d5f184df9c259a7c79'],
    ['RFC 4231 test case 2 (HMAC-SHA-512)', 'sha512', 'hex', undefined, 'Jefe', JEFE_DATA,
      '164b7a7bfcf819e2e395fbe73b56e0a387bd64222e831fd610270cd7ea2505549758bf75c05a994a6d034f65f8f0e6fdcaeab1a34d4a6b4b636e070a38bce737'],
  ];

  /** The header with one byte of the decoded digest changed, re-encoded (still well-formed: it must fail verification, not parsing). */
  const oneDigestByteChanged = (header: string, prefix: string, encoding: 'hex' | 'base64'): string => {
    const digest = Buffer.from(header.slice(prefix.length), encoding);
    digest[digest.length >> 1]! ^= 0x01;
    return prefix + digest.toString(encoding);
  };

  it.each(vectors)('%s: accepted; sign() reproduces it; one byte changed in the body or the digest is rejected', (_name, algorithm, encoding, prefix, secret, body, header) => {
    const a = generic({ signatureHeader: 'X-Signature', algorithm, encoding, ...(prefix === undefined ? {} : { prefix }), idPath: 'id' });
    const keys = trustedKeys(a, ['v1', secret]);
    expect(verifyWith(a, [['x-signature', header]], body, keys)).toBe('v1');
    expect(a.sign(Buffer.from(body), secret, {})).toEqual({ 'x-signature': header });

    // One body byte changed (the first byte +1): the same signature no longer verifies.
    const changed = Buffer.from(body);
    changed[0] = changed[0]! + 1;
    expect(verifyWith(a, [['x-signature', header]], changed, keys)).toBeNull();
    // One digest byte changed: well-formed, but not this body's HMAC.
    const forged = oneDigestByteChanged(header, prefix ?? '', encoding);
    expect(forged).not.toBe(header);
    expect(a.parseSignature(view([['x-signature', forged]]))).toBeDefined();
    expect(verifyWith(a, [['x-signature', forged]], body, keys)).toBeNull();
    // Another key: rejected.
    expect(verifyWith(a, [['x-signature', header]], body, trustedKeys(a, ['v1', `${secret}x`]))).toBeNull();
  });

  it('a vector of one algorithm is not accepted under the other (sha1 digest on a sha512 endpoint and back)', () => {
    const sha1 = generic({ signatureHeader: 'x-signature', algorithm: 'sha1', prefix: 'sig=', idPath: 'id' });
    const sha512 = generic({ signatureHeader: 'x-signature', algorithm: 'sha512', prefix: 'sig=', idPath: 'id' });
    const sha1Hex = 'sig=280a28e86de0e53a84fa268955614872575f5a92';
    const sha512Hex = 'sig=6ed2361ffbd7ab7041b7739effcd127acce82c87fd035a83c8ae787050d5e0fbf1ead67aeadf9fcfea8ada2e04ace1477b2b832582293a6c7fecd80b937c8692';
    expect(verifyWith(sha1, [['x-signature', sha1Hex]], KAT_BODY, trustedKeys(sha1, ['v1', KAT_KEY]))).toBe('v1');
    expect(verifyWith(sha512, [['x-signature', sha512Hex]], KAT_BODY, trustedKeys(sha512, ['v1', KAT_KEY]))).toBe('v1');
    expect(reasonOf(() => sha512.parseSignature(view([['x-signature', sha1Hex]])))).toBe('malformed_signature');
    expect(reasonOf(() => sha1.parseSignature(view([['x-signature', sha512Hex]])))).toBe('malformed_signature');
  });
});
