import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { stringify } from 'yaml';
import { loadConfigFile } from '../../src/config/load.js';
import { parseConfig } from '../../src/config/schema.js';
import { KeyRing } from '../../src/crypto/keyring.js';
import { configDoc, PAYLOAD_KEY } from '../helpers/app.js';

const base = () => configDoc('sqlite:/tmp/x.db');
const withEndpoint = (ep: Record<string, unknown>) => ({ ...base(), endpoints: [ep] });
const stripeEp = (over: Record<string, unknown> = {}) => ({ id: 'ep', provider: 'stripe', secrets: [{ version: 'v1', value: 'whsec_abc' }], ...over });

function errorOf(doc: unknown, env: NodeJS.ProcessEnv = {}): string {
  try {
    parseConfig(doc, env);
  } catch (err) {
    return (err as Error).message;
  }
  throw new Error('config was accepted');
}

describe('config validation names the bad path', () => {
  it.each<[string, unknown, RegExp]>([
    ['unknown top-level key', { ...base(), endpiont: [] }, /^endpiont: unknown key/],
    ['unknown provider', withEndpoint(stripeEp({ provider: 'strip' })), /^endpoints\[0\]\.provider: unknown provider "strip"/],
    ['bad endpoint id', withEndpoint(stripeEp({ id: 'a/b' })), /^endpoints\[0\]\.id: /],
    ['no secrets', withEndpoint(stripeEp({ secrets: [] })), /^endpoints\[0\]\.secrets: needs at least one/],
    ...['soon', '1', 'Dec 31 2026', '12/31/2026', '2026-02-30T00:00:00Z', '2026-12-31T24:00:00Z', '2026-12-31T00:00:00', '2026-12-31'].map((retireAt) =>
      [`retireAt ${JSON.stringify(retireAt)}`, withEndpoint(stripeEp({ secrets: [{ version: 'v1', value: 'whsec_a', retireAt }] })), /^endpoints\[0\]\.secrets\[0\]\.retireAt: must be an RFC 3339 date-time with Z or an offset/] as [string, unknown, RegExp]),
    ['a provider name that is an Object.prototype member', withEndpoint(stripeEp({ provider: 'constructor' })), /^endpoints\[0\]\.provider: unknown provider "constructor"/],
    ['__proto__ as a provider', withEndpoint(stripeEp({ provider: '__proto__' })), /^endpoints\[0\]\.provider: unknown provider "__proto__"/],
    ['options for a provider that takes none', withEndpoint(stripeEp({ options: { bogusKey: 1 } })), /^endpoints\[0\]\.options\.bogusKey: unknown key \(allowed: none\)/],
    ['duplicate secret version', withEndpoint(stripeEp({ secrets: [{ version: 'v1', value: 'whsec_a' }, { version: 'v1', value: 'whsec_b' }] })), /^endpoints\[0\]\.secrets\[1\]\.version: duplicate/],
    ['tolerance for a provider without timestamps', withEndpoint({ id: 'gh', provider: 'github', secrets: [{ version: 'v1', value: 's' }], toleranceSeconds: 60 }), /^endpoints\[0\]\.toleranceSeconds: provider "github" signs no timestamp/],
    ['maxBodyBytes not an integer', withEndpoint(stripeEp({ maxBodyBytes: '1MB' })), /^endpoints\[0\]\.maxBodyBytes: must be an integer/],
    ['rateLimit without perSecond', withEndpoint(stripeEp({ rateLimit: { burst: 5 } })), /^endpoints\[0\]\.rateLimit\.perSecond: is required/],
    ['typo inside an endpoint', withEndpoint(stripeEp({ evnets: ['x'] })), /^endpoints\[0\]\.evnets: unknown key/],
    ['current payload key missing', { ...base(), payloadKeys: { current: 'k2', keys: { k1: PAYLOAD_KEY } } }, /^payloadKeys\.current: "k2" is not one of/],
    // A key pasted into `current` (not its id) must not be printed back.
    ['a payload key itself as current', { ...base(), payloadKeys: { current: PAYLOAD_KEY, keys: { k1: PAYLOAD_KEY } } }, /^payloadKeys\.current: \(a 44-character value\) is not one of payloadKeys\.keys$/],
    // A key id is stored with every payload: one the stores cannot keep exactly names no key when read back.
    ['a payload key id holding a NUL character', { ...base(), payloadKeys: { current: 'k\u0000z', keys: { 'k\u0000z': PAYLOAD_KEY } } }, /^payloadKeys\.keys\."k\\u0000z": a key id is stored with every payload it seals: it may not hold a lone surrogate or a NUL character$/],
    ['a payload key id holding a lone surrogate', { ...base(), payloadKeys: { current: 'k1', keys: { k1: PAYLOAD_KEY, 'k\ud800z': PAYLOAD_KEY } } }, /^payloadKeys\.keys\."k\\ud800z": a key id is stored/],
    ['database scheme', { ...base(), database: 'mysql://x' }, /^database: must start with sqlite:, postgres:\/\/ or postgresql:\/\//],
    ['port out of range', { ...base(), listen: { port: 70000 } }, /^listen\.port: must be an integer from 0 to 65535/],
    ['workers.effectsConcurrency over concurrency', { ...base(), workers: { concurrency: 8, effectsConcurrency: 9 } }, /^workers\.effectsConcurrency: must be ≤ concurrency \(8\)/],
    ['workers.maxInFlightBodyBytes below 64 KiB', { ...base(), workers: { maxInFlightBodyBytes: 1000 } }, /^workers\.maxInFlightBodyBytes: must be an integer from 65536/],
    ['http destination maxConnections 0', { ...base(), destinations: [{ id: 'api', type: 'http', url: 'http://127.0.0.1:9000/h', secret: 'whsec_abc', maxConnections: 0 }] }, /^destinations\[0\]\.maxConnections: must be an integer from 1/],
    ['http destination circuitBreaker not an object', { ...base(), destinations: [{ id: 'api', type: 'http', url: 'http://127.0.0.1:9000/h', secret: 'whsec_abc', circuitBreaker: 'off' }] }, /^destinations\[0\]\.circuitBreaker: must be false \(off\), true \(the defaults\) or an object/],
    ['http destination circuitBreaker.failures 0', { ...base(), destinations: [{ id: 'api', type: 'http', url: 'http://127.0.0.1:9000/h', secret: 'whsec_abc', circuitBreaker: { failures: 0 } }] }, /^destinations\[0\]\.circuitBreaker\.failures: must be an integer from 1/],
    ['http destination circuitBreaker unknown key', { ...base(), destinations: [{ id: 'api', type: 'http', url: 'http://127.0.0.1:9000/h', secret: 'whsec_abc', circuitBreaker: { threshold: 3 } }] }, /^destinations\[0\]\.circuitBreaker\.threshold: unknown key/],
    ['circuitBreaker on a nats destination', { ...base(), destinations: [{ id: 'bus', type: 'nats', url: 'nats://127.0.0.1:4222', subject: 's', circuitBreaker: false }] }, /^destinations\[0\]\.circuitBreaker: unknown key/],
    ['maxConnections on a nats destination', { ...base(), destinations: [{ id: 'bus', type: 'nats', url: 'nats://127.0.0.1:4222', subject: 's', maxConnections: 4 }] }, /^destinations\[0\]\.maxConnections: unknown key/],
    ['groupCommit.maxBatchBytes below 64 KiB', { ...base(), groupCommit: { maxBatchBytes: 1000 } }, /^groupCommit\.maxBatchBytes: must be an integer from 65536/],
    ['offloadBodyBytes negative', { ...base(), limits: { offloadBodyBytes: -1 } }, /^limits\.offloadBodyBytes: must be an integer/],
    ['offloadWhenInFlight not an integer', { ...base(), limits: { offloadWhenInFlight: 1.5 } }, /^limits\.offloadWhenInFlight: must be an integer/],
    ['compressBodyBytes not a number', { ...base(), limits: { compressBodyBytes: 'big' } }, /^limits\.compressBodyBytes: must be an integer/],
    ['a body the in-flight budget can never hold', { ...base(), limits: { maxInFlightBodyBytes: 1048576 }, endpoints: [{ id: 's', provider: 'stripe', secrets: [{ version: 'v1', value: 'whsec_x' }], maxBodyBytes: 8388608 }] },
      /^endpoints\[0\]\.maxBodyBytes: 8388608 is more than a body can ever hold in memory: .*at most 524288/],
    ['an adapter default the budget can never hold', { ...base(), limits: { maxInFlightBodyBytes: 16777216 }, endpoints: [{ id: 'g', provider: 'github', secrets: [{ version: 'v1', value: 'x' }] }] },
      /^endpoints\[0\]\.maxBodyBytes: \d+ \(the github default\) is more than/],
    ['events: [] (would ignore everything)', withEndpoint({ id: 's', provider: 'stripe', secrets: [{ version: 'v1', value: 'whsec_x' }], events: [] }), /^endpoints\[0\]\.events: is empty/],
    ['sqlite: without a path', { ...base(), database: 'sqlite:' }, /^database: needs a file path/],
    ['a postgres URL that does not parse', { ...base(), database: 'postgres://u:secretpw@' }, /^database: is not a valid postgres:\/\/ URL$/],
    ['minBodyBytesPerSecond negative', { ...base(), limits: { minBodyBytesPerSecond: -1 } }, /^limits\.minBodyBytesPerSecond: must be an integer/],
    ['generic-hmac tolerance set twice', withEndpoint({ id: 'g', provider: 'generic-hmac', secrets: [{ version: 'v1', value: 's' }], toleranceSeconds: 60,
      options: { signatureHeader: 'x-sig', idPath: 'id', timestampHeader: 'x-ts', signedContent: '{timestamp}.{body}', toleranceSeconds: 30 } }), /^endpoints\[0\]\.toleranceSeconds: also set as options\.toleranceSeconds/],
    ['generic-hmac option', withEndpoint({ id: 'g', provider: 'generic-hmac', secrets: [{ version: 'v1', value: 's' }], options: { idPath: 'id' } }), /^endpoints\[0\]\.options\.signatureHeader: is required/],
  ])('%s', (_name, doc, expected) => {
    expect(errorOf(doc)).toMatch(expected);
  });

  it('rejects a duplicate endpoint id', () => {
    expect(errorOf({ ...base(), endpoints: [stripeEp(), stripeEp()] })).toMatch(/^endpoints\[1\]\.id: duplicate endpoint id "ep"/);
  });

  it('retireAt is the exact instant written, with its offset', () => {
    const at = (retireAt: string) => parseConfig(withEndpoint(stripeEp({ secrets: [{ version: 'v1', value: 'whsec_a', retireAt }] })), {}).endpoints[0]!.secrets[0]!.retireAtMs;
    expect(at('2026-12-31T00:00:00Z')).toBe(Date.UTC(2026, 11, 31));
    expect(at('2026-12-31T01:00:00+01:00')).toBe(Date.UTC(2026, 11, 31));
    expect(at('2026-12-31T00:00:00.5z')).toBe(Date.UTC(2026, 11, 31) + 500);
  });

  it('a long unknown key (a value in the wrong place, e.g. a secret) is not echoed', () => {
    const secret = 'whsec_TOPSECRETVALUE1234567890abcdefghij';
    const message = errorOf(withEndpoint(stripeEp({ secrets: [{ version: 'v1', [secret]: null }] })));
    expect(message).toMatch(/^endpoints\[0\]\.secrets\[0\]\.\(a 40-character key\): unknown key/);
    expect(message).not.toContain('TOPSECRET');
  });

  // A Slack signing secret (or a Twilio auth token) is 32 characters: written without its `value:`
  // key in a YAML flow mapping it becomes a key with a null value, and the error printed it.
  it('a value written without its key (a short secret) is not echoed', () => {
    const secret = '8f742231b10e8888abcd99eeff0085a5';
    const dir = mkdtempSync(join(tmpdir(), 'wi-cfg-'));
    const file = join(dir, 'c.yaml');
    const doc = stringify({ ...base(), endpoints: [{ id: 'ep', provider: 'slack', secrets: [{ version: 'v1', value: 'x' }] }] })
      .replace('- version: v1\n        value: x', `- { version: v1, ${secret} }`);
    writeFileSync(file, doc);
    expect(doc).toContain(`{ version: v1, ${secret} }`);
    let message = '';
    try {
      loadConfigFile(file, {});
    } catch (err) {
      message = (err as Error).message;
    }
    expect(message).toMatch(/^endpoints\[0\]\.secrets\[0\]\.\(a 32-character key\): unknown key/);
    expect(message).not.toContain(secret);
    // The basicAuth password, the same way.
    const adyen = errorOf(withEndpoint({ id: 'a', provider: 'adyen', secrets: [{ version: 'v1', value: '00'.repeat(32) }], options: { basicAuth: { username: 'u', hunter2: null } } }));
    expect(adyen).toMatch(/basicAuth\.\(a 7-character key\): unknown key/);
    expect(adyen).not.toContain('hunter2');
    // A typo with a value is still named.
    expect(errorOf(withEndpoint(stripeEp({ secrets: [{ version: 'v1', valeu: 'whsec_a' }] })))).toMatch(/^endpoints\[0\]\.secrets\[0\]\.valeu: unknown key/);
  });

  // generic-hmac `contentTypes: []` loaded, and the endpoint then answered every request 415
  // unsupported_media_type ("expected " and nothing), as `events: []` would ignore every event.
  it('generic-hmac options.contentTypes: [] (every request refused 415) is refused, naming the path', () => {
    const file = join(mkdtempSync(join(tmpdir(), 'wi-cfg-')), 'c.yaml');
    writeFileSync(file, stringify(withEndpoint({ id: 'g', provider: 'generic-hmac', secrets: [{ version: 'v1', value: 's' }], options: { signatureHeader: 'x-sig', idPath: 'id', contentTypes: [] } })));
    expect(() => loadConfigFile(file, {})).toThrow(/^endpoints\[0\]\.options\.contentTypes: is empty/);
  });

  // A key with an invisible character (a no-break space or a zero-width space pasted from a web
  // page) was printed as is: "listen.port : unknown key (allowed: host, port)" names a key that
  // looks allowed.
  it('an unknown key holding an invisible or space character is shown with it escaped', () => {
    expect(errorOf({ ...base(), listen: { 'port\u00a0': 8080 } })).toBe('listen."port\\u00a0": unknown key (allowed: host, port); it holds an invisible or space character');
    expect(errorOf(withEndpoint(stripeEp({ '\u200bevents': ['*'] })))).toMatch(/^endpoints\[0\]\."\\u200bevents": unknown key \(allowed: .*\); it holds an invisible or space character$/);
    expect(errorOf({ ...base(), 'log ': { level: 'info' } })).toMatch(/^"log\\u0020": unknown key/);
  });

  // A DATABASE_URL from an env file with CRLF line endings ends with "\r": SQLite opened a new,
  // empty database file named "inbox.db\r" beside the real one. The same for a quoted trailing space.
  it('a database URL with a control character, or white space at an end, is refused, naming it', () => {
    expect(errorOf(base(), { DATABASE_URL: 'sqlite:/tmp/inbox.db\r' })).toMatch(/^DATABASE_URL: has a control character or white space at an end/);
    expect(errorOf({ ...base(), database: 'sqlite:/tmp/inbox.db ' })).toMatch(/^database: has a control character or white space at an end/);
    expect(errorOf({ ...base(), database: 'postgres://u@h/db\n' })).toMatch(/^database: has a control character/);
    expect(parseConfig({ ...base(), database: 'sqlite:/tmp/my data/inbox.db' }, {}).database).toBe('sqlite:/tmp/my data/inbox.db');
  });

  it('DATABASE_URL set but empty is refused rather than falling back to database (an unset variable behind it would move the events to another database)', () => {
    expect(errorOf(base(), { DATABASE_URL: '' })).toMatch(/^DATABASE_URL: is set but empty/);
  });

  it('DATABASE_URL overrides database, and a bad one is named', () => {
    expect(parseConfig(base(), { DATABASE_URL: 'postgres://u@h/db' }).database).toBe('postgres://u@h/db');
    expect(errorOf(base(), { DATABASE_URL: 'oracle://x' })).toMatch(/^DATABASE_URL: /);
  });

  it('toleranceSeconds goes up to a day, or to the adapter\'s own default where that is longer (PayPal: 4 days), so that default can be written out', () => {
    const paypalEp = (toleranceSeconds: number) => withEndpoint({ id: 'pp', provider: 'paypal', secrets: [{ version: 'v1', value: '4JH86294D6297924G' }], toleranceSeconds });
    expect(parseConfig(withEndpoint(stripeEp({ toleranceSeconds: 86_400 })), {}).endpoints[0]!.toleranceSeconds).toBe(86_400);
    expect(errorOf(withEndpoint(stripeEp({ toleranceSeconds: 86_401 })))).toMatch(/^endpoints\[0\]\.toleranceSeconds: /);
    expect(parseConfig(withEndpoint({ id: 'pp', provider: 'paypal', secrets: [{ version: 'v1', value: '4JH86294D6297924G' }] }), {}).endpoints[0]!.toleranceSeconds).toBe(345_600);
    expect(parseConfig(paypalEp(345_600), {}).endpoints[0]!.toleranceSeconds).toBe(345_600);
    expect(errorOf(paypalEp(345_601))).toMatch(/^endpoints\[0\]\.toleranceSeconds: /);
  });

  it('applies documented defaults', () => {
    const c = parseConfig(withEndpoint(stripeEp()), {});
    expect(c.endpoints[0]).toMatchObject({ maxBodyBytes: 1048576, toleranceSeconds: 300, events: undefined, rateLimit: undefined });
    expect(c.listen).toEqual({ host: '127.0.0.1', port: 0 });
    expect(c.limits.offloadBodyBytes).toBeUndefined(); // the process decides: http/offload.ts offloadThreshold
    expect(c.limits.offloadWhenInFlight).toBeUndefined(); // the store decides: http/offload.ts offloadWhenInFlight
    expect(c.limits.compressBodyBytes).toBe(256 * 1024);
    expect(c.limits.minBodyBytesPerSecond).toBe(64 * 1024);
    expect(c.groupCommit).toEqual({ maxBatch: 256, maxBatchBytes: 4 * 1024 * 1024, maxWaitMs: undefined, maxInFlight: undefined, commitTimeoutMs: 10_000 });
    const withForward = parseConfig({ ...base(), destinations: [{ id: 'api', type: 'http', url: 'http://127.0.0.1:9000/h', secret: 'whsec_abc' }] }, {});
    expect(withForward.destinations[0]).toMatchObject({ timeoutMs: 10_000, maxConnections: 32, circuitBreaker: { failures: 5, cooldownMs: 30_000 } });
    const forward = (circuitBreaker: unknown) => parseConfig({ ...base(), destinations: [{ id: 'api', type: 'http', url: 'http://127.0.0.1:9000/h', secret: 'whsec_abc', circuitBreaker }] }, {}).destinations[0];
    expect(forward(false)).toMatchObject({ circuitBreaker: null });
    expect(forward(true)).toMatchObject({ circuitBreaker: { failures: 5, cooldownMs: 30_000 } });
    expect(forward({ cooldownMs: 5000 })).toMatchObject({ circuitBreaker: { failures: 5, cooldownMs: 5000 } });
    expect(c.workers).toMatchObject({ enabled: true, concurrency: 512, batchSize: 256, maxInFlightBodyBytes: 64 * 1024 * 1024, leaseMs: 30_000, gatherMs: 30, effectsConcurrency: 128 });
    expect(parseConfig({ ...base(), workers: { concurrency: 16 } }, {}).workers.effectsConcurrency).toBe(16);
    // GitHub caps payloads at 25 MB and never retries: its adapter default follows that cap.
    const gh = parseConfig(withEndpoint({ id: 'gh', provider: 'github', secrets: [{ version: 'v1', value: 's' }] }), {});
    expect(gh.endpoints[0]!.maxBodyBytes).toBe(25 * 1024 * 1024);
  });
});

describe('retry policies', () => {
  // The README's `retry` is the default policy that endpoints and routes override; an override
  // that named one field took the built-in defaults for the others, so the configured default
  // was lost: `retry: { maxAttempts: 3 }` under `retry: { baseMs: 5000, capMs: 600000 }` retried
  // after 1 s, up to 1 h apart, and a route's `retry: { capMs: 60000 }` made 12 attempts, not 3.
  it('an endpoint or route retry overrides only the fields it names: the rest come from the policy around it', () => {
    const doc = {
      ...base(),
      retry: { baseMs: 5000, capMs: 600_000, maxAttempts: 30 },
      destinations: [{ id: 'api', type: 'http', url: 'http://127.0.0.1:9000/h', secret: 'whsec_abc' }],
      endpoints: [
        stripeEp({ retry: { maxAttempts: 3 }, routes: [{ destination: 'api', retry: { capMs: 60_000 } }, { events: ['charge.*'], destination: 'api' }] }),
        stripeEp({ id: 'ep2' }),
      ],
    };
    const c = parseConfig(doc, {});
    expect(c.retry).toEqual({ baseMs: 5000, capMs: 600_000, maxAttempts: 30 });
    expect(c.endpoints[0]!.retry).toEqual({ baseMs: 5000, capMs: 600_000, maxAttempts: 3 });
    expect(c.endpoints[0]!.routes[0]!.retry).toEqual({ baseMs: 5000, capMs: 60_000, maxAttempts: 3 });
    expect(c.endpoints[0]!.routes[1]!.retry).toBeUndefined(); // the endpoint's
    expect(c.endpoints[1]!.retry).toEqual({ baseMs: 5000, capMs: 600_000, maxAttempts: 30 });
  });

  it('a baseMs past the capMs it inherits is refused, naming the baseMs written', () => {
    const doc = { ...base(), retry: { capMs: 60_000 }, endpoints: [stripeEp({ retry: { baseMs: 120_000 } })] };
    expect(errorOf(doc)).toMatch(/^endpoints\[0\]\.retry\.baseMs: must be ≤ capMs \(60000, from retry\)/);
    expect(errorOf({ ...base(), retry: { baseMs: 5000, capMs: 1000 } })).toMatch(/^retry\.capMs: must be ≥ baseMs \(5000\)/);
  });
});

describe('destination URLs by reference (they may carry broker or Basic credentials)', () => {
  const dir = mkdtempSync(join(tmpdir(), 'wi-desturl-'));
  const dest = (type: string, url: string) => ({ ...base(), destinations: [{ id: 'd', type, url, ...(type === 'http' ? { secret: 'whsec_abc' } : {}) }] });

  it('${env:} and ${file:} are read at load, for every destination type', () => {
    writeFileSync(join(dir, 'amqp'), 'amqp://app:s3cret@127.0.0.1:5672/vh\n');
    expect(parseConfig(dest('rabbitmq', `\${file:${join(dir, 'amqp')}}`), {}).destinations[0]!.url).toBe('amqp://app:s3cret@127.0.0.1:5672/vh');
    expect(parseConfig(dest('nats', '${env:BUS_URL}'), { BUS_URL: 'nats://tok@127.0.0.1:4222' }).destinations[0]!.url).toBe('nats://tok@127.0.0.1:4222');
    expect(parseConfig(dest('http', '${env:FWD_URL}'), { FWD_URL: 'https://u:p@billing.example/hooks' }).destinations[0]!.url).toBe('https://u:p@billing.example/hooks');
  });

  it('one that cannot be read, or is not a URL of its type, is a config error naming the path, never the value', () => {
    expect(() => parseConfig(dest('rabbitmq', '${env:NO_SUCH_URL}'), {})).toThrow(/^destinations\[0\]\.url: environment variable NO_SUCH_URL is not set$/);
    expect(() => parseConfig(dest('nats', `\${file:${join(dir, 'missing')}}`), {})).toThrow(/^destinations\[0\]\.url: cannot read /);
    const bad = (url: string, type = 'rabbitmq') => { try { parseConfig(dest(type, '${env:U}'), { U: url }); return ''; } catch (err) { return (err as Error).message; } };
    expect(bad('not a url s3cret')).toBe('destinations[0].url: is not a valid URL');
    expect(bad('http://app:s3cret@127.0.0.1/')).toBe('destinations[0].url: must use amqp: or amqps:');
    expect(() => parseConfig(dest('rabbitmq', '${ENV:U}'), { U: 'amqp://127.0.0.1' })).toThrow(/^destinations\[0\]\.url: is not a valid reference/);
  });

  it("an HTTP forward's user or password with a stray % (the forward could not decode it for Basic auth) is a config error naming the path, never the value", () => {
    const bad = (url: string) => { try { parseConfig(dest('http', '${env:U}'), { U: url }); return ''; } catch (err) { return (err as Error).message; } };
    expect(bad('https://app:50%off@billing.example/hooks')).toBe('destinations[0].url: its user or password has a "%" not followed by two hex digits (write a literal "%" as %25)');
    expect(bad('https://50%zz:pw@billing.example/hooks')).toMatch(/^destinations\[0\]\.url: its user or password has a "%"/);
    expect(bad('https://app:50%25off@billing.example/hooks')).toBe('');
  });
});

describe('config files', () => {
  const dir = mkdtempSync(join(tmpdir(), 'wi-config-'));

  it('YAML and JSON with the same keys load the same config', () => {
    const doc = withEndpoint(stripeEp({ events: ['payment_intent.*'] }));
    writeFileSync(join(dir, 'c.yaml'), stringify(doc));
    writeFileSync(join(dir, 'c.json'), JSON.stringify(doc));
    const y = loadConfigFile(join(dir, 'c.yaml'), {});
    const j = loadConfigFile(join(dir, 'c.json'), {});
    expect(j.endpoints[0]!.events).toEqual(['payment_intent.*']);
    expect({ ...y, endpoints: y.endpoints.map((e) => ({ ...e, adapter: e.adapter.name })) })
      .toEqual({ ...j, endpoints: j.endpoints.map((e) => ({ ...e, adapter: e.adapter.name })) });
  });

  it('a repeated key is refused in JSON as in YAML (JSON.parse silently kept the last), by place, never by value', () => {
    const doc = JSON.stringify(withEndpoint(stripeEp()));
    const twice = doc.replace('"database":', '"database":"sqlite:/tmp/other.db",\n"database":');
    writeFileSync(join(dir, 'dupkey.yaml'), twice);
    writeFileSync(join(dir, 'dupkey.json'), twice);
    expect(() => loadConfigFile(join(dir, 'dupkey.yaml'), {})).toThrow(/dupkey\.yaml: not valid YAML \(DUPLICATE_KEY\)/);
    expect(() => loadConfigFile(join(dir, 'dupkey.json'), {})).toThrow(/dupkey\.json: not valid JSON \(DUPLICATE_KEY\) at line 2, column 1$/);
    // Nested, and spelled with an escape: still the same key. Equal keys in different objects are fine.
    const nested = doc.replace('"value":"whsec_abc"', '"value":"whsec_TOPSECRET","\\u0076alue":"whsec_abc"');
    writeFileSync(join(dir, 'dupnested.json'), nested);
    const message = (() => { try { loadConfigFile(join(dir, 'dupnested.json'), {}); } catch (e) { return (e as Error).message; } return ''; })();
    expect(message).toMatch(/dupnested\.json: not valid JSON \(DUPLICATE_KEY\) at line 1, column \d+$/);
    expect(message).not.toContain('TOPSECRET');
    writeFileSync(join(dir, 'twoeps.json'), JSON.stringify({ ...base(), endpoints: [stripeEp({ id: 'a' }), stripeEp({ id: 'b' })] }));
    expect(loadConfigFile(join(dir, 'twoeps.json'), {}).endpoints.map((e) => e.id)).toEqual(['a', 'b']);
  });

  it('a syntax error names the file and the place, never the text there (it may be an inline secret)', () => {
    writeFileSync(join(dir, 'bad.yaml'), 'listen: { host: [\n');
    expect(() => loadConfigFile(join(dir, 'bad.yaml'), {})).toThrow(/bad\.yaml: not valid YAML/);
    const secretYaml = 'endpoints:\n  - id: ep\n    provider: stripe\n    secrets:\n      - { version: v1, value: "whsec_TOPSECRETVALUE123" }}\n';
    writeFileSync(join(dir, 'secret.yaml'), secretYaml);
    const yamlError = (() => { try { loadConfigFile(join(dir, 'secret.yaml'), {}); } catch (e) { return (e as Error).message; } return ''; })();
    expect(yamlError).toMatch(/secret\.yaml: not valid YAML \(\w+\) at line 5, column \d+$/);
    expect(yamlError).not.toContain('TOPSECRET');
    writeFileSync(join(dir, 'dup.yaml'), 'endpoints:\n  - id: ep\n    secrets:\n      - version: v1\n        value: whsec_TOPSECRETVALUE123\n        value: whsec_TOPSECRETVALUE123\n');
    expect(() => loadConfigFile(join(dir, 'dup.yaml'), {})).toThrow(/dup\.yaml: not valid YAML \(DUPLICATE_KEY\) at line 6/);
    expect(() => loadConfigFile(join(dir, 'dup.yaml'), {})).not.toThrow(/TOPSECRET/);
    writeFileSync(join(dir, 'secret.json'), '{"endpoints": [{"secrets": [\n  {"value":whsec_TOPSECRET}]}]}');
    const jsonError = (() => { try { loadConfigFile(join(dir, 'secret.json'), {}); } catch (e) { return (e as Error).message; } return ''; })();
    // V8's message quotes the text there and gives no position: the place is found all the same.
    expect(jsonError).toMatch(/secret\.json: not valid JSON at line 2, column 12$/);
    expect(jsonError).not.toContain('TOPSECRET');
    writeFileSync(join(dir, 'comma.json'), '{"listen": {\n  "port": 8080,\n}}');
    expect(() => loadConfigFile(join(dir, 'comma.json'), {})).toThrow(/comma\.json: not valid JSON at line 3, column 1$/);
    writeFileSync(join(dir, 'list-comma.json'), '{"endpoints": [\n  {"id": "a"},\n]}');
    expect(() => loadConfigFile(join(dir, 'list-comma.json'), {})).toThrow(/list-comma\.json: not valid JSON at line 3, column 1$/);
    writeFileSync(join(dir, 'cut.json'), '{"listen": {\n  "port": 8080');
    expect(() => loadConfigFile(join(dir, 'cut.json'), {})).toThrow(/cut\.json: not valid JSON at line 2, column 15$/);
    expect(() => loadConfigFile(join(dir, 'missing.yaml'), {})).toThrow(/missing\.yaml: cannot read config file \(ENOENT\)/);
  });

  // A second document (`---` then more keys, two configs pasted into one file) was dropped without
  // a word: the server ran on the first document's settings only.
  // `!!omap` and `!!set` are standard YAML tags; their values load as a Map and a Set, whose keys
  // the checks did not see: `listen: !!omap [{ port: 9090 }]` loaded as an empty listen (port 8080).
  it('a mapping tagged !!omap or !!set is refused, not read as an empty mapping', () => {
    const { listen: _listen, ...doc } = withEndpoint(stripeEp()) as Record<string, unknown>;
    const text = stringify(doc);
    writeFileSync(join(dir, 'omap.yaml'), `${text}listen: !!omap [ { port: 9090 } ]\n`);
    expect(() => loadConfigFile(join(dir, 'omap.yaml'), {})).toThrow(/^listen: must be an object/);
    writeFileSync(join(dir, 'set.yaml'), `${text}limits: !!set { maxHeaders }\n`);
    expect(() => loadConfigFile(join(dir, 'set.yaml'), {})).toThrow(/^limits: must be an object/);
  });

  // `<<: *defaults` (a YAML 1.1 merge key) is not applied by the YAML 1.2 reader: the error was
  // "endpoints[1].<<: unknown key (allowed: id, provider, …)", as if `<<` were a typo.
  it('a YAML merge key (<<) is refused saying it is one, and what to write instead', () => {
    const { endpoints: _e, ...doc } = withEndpoint(stripeEp()) as Record<string, unknown>;
    writeFileSync(join(dir, 'merge.yaml'), `${stringify(doc)}endpoints:\n  - &ep { id: a, provider: stripe, secrets: [{ version: v1, value: whsec_abc }] }\n  - <<: *ep\n    id: b\n`);
    expect(() => loadConfigFile(join(dir, 'merge.yaml'), {})).toThrow(/^endpoints\[1\]\.<<: a YAML merge key, which is not applied: write the keys out, or alias whole values \(secrets: \*shared\)$/);
  });

  // The YAML reader's default guard against alias bombs (100 expansions of an anchor) refused a
  // config that shares one secrets list among 150 endpoints, with "not valid YAML" and no reason.
  it('an anchor aliased by hundreds of endpoints loads; an alias bomb is refused with its reason', () => {
    const { endpoints: _e, ...doc } = withEndpoint(stripeEp()) as Record<string, unknown>;
    const eps = ['endpoints:', '  - { id: e0, provider: stripe, secrets: &s [{ version: v1, value: whsec_abc }], events: &ev ["charge.*"] }'];
    for (let i = 1; i < 500; i++) eps.push(`  - { id: e${i}, provider: stripe, secrets: *s, events: *ev }`);
    writeFileSync(join(dir, 'shared.yaml'), `${stringify(doc)}${eps.join('\n')}\n`);
    expect(loadConfigFile(join(dir, 'shared.yaml'), {}).endpoints).toHaveLength(500);
    const bomb = ['a0: &a0 [x, x, x, x, x, x, x, x, x, x]'];
    for (let i = 1; i < 10; i++) bomb.push(`a${i}: &a${i} [${Array(10).fill(`*a${i - 1}`).join(', ')}]`);
    writeFileSync(join(dir, 'bomb.yaml'), `${bomb.join('\n')}\n`);
    expect(() => loadConfigFile(join(dir, 'bomb.yaml'), {})).toThrow(/bomb\.yaml: not valid YAML \(TOO_MANY_ALIASES\)$/);
  });

  it('a YAML file of several documents is refused, by place', () => {
    const first = stringify(withEndpoint(stripeEp()));
    writeFileSync(join(dir, 'two-docs.yaml'), `${first}---\nlisten: { host: 127.0.0.1, port: 9999 }\n`);
    expect(() => loadConfigFile(join(dir, 'two-docs.yaml'), {})).toThrow(/two-docs\.yaml: not valid YAML \(MULTIPLE_DOCS\) at line \d+, column \d+$/);
    // One document, with or without its markers, still loads.
    writeFileSync(join(dir, 'one-doc.yaml'), `---\n${first}...\n`);
    expect(loadConfigFile(join(dir, 'one-doc.yaml'), {}).endpoints[0]!.id).toBe('ep');
  });
});

describe('secret references', () => {
  const dir = mkdtempSync(join(tmpdir(), 'wi-secrets-'));

  it('resolves ${env:NAME} and ${file:PATH} (a mounted file’s trailing newline is not part of the secret)', () => {
    writeFileSync(join(dir, 's1'), 'whsec_from_file\n');
    const doc = withEndpoint(stripeEp({ secrets: [{ version: 'v2', value: '${env:STRIPE_V2}' }, { version: 'v1', value: `\${file:${join(dir, 's1')}}` }] }));
    const ring = new KeyRing(parseConfig(doc, {}), { STRIPE_V2: 'whsec_from_env' });
    expect(ring.ready).toBe(true);
    expect(ring.keysFor('ep')!.map((k) => [k.version, k.key.toString()])).toEqual([['v2', 'whsec_from_env'], ['v1', 'whsec_from_file']]);
  });

  // An env var filled from the same secret a mount would hold (Kubernetes secretKeyRef of a file
  // written with `echo`) ends with its newline too: it was kept, so every signature was checked
  // with a key one byte off (401 for every request) while check-config said OK.
  it('a trailing newline in an ${env:} value is dropped, as in a ${file:}', () => {
    const doc = withEndpoint(stripeEp({ secrets: [{ version: 'v1', value: '${env:STRIPE_V1}' }] }));
    expect(new KeyRing(parseConfig(doc, {}), { STRIPE_V1: 'whsec_from_env\n' }).keysFor('ep')!.map((k) => k.key.toString())).toEqual(['whsec_from_env']);
    expect(new KeyRing(parseConfig(doc, {}), { STRIPE_V1: 'whsec_from_env\r\n' }).keysFor('ep')!.map((k) => k.key.toString())).toEqual(['whsec_from_env']);
    expect(new KeyRing(parseConfig(doc, {}), { STRIPE_V1: '\n' }).problems).toEqual(['endpoints[0].secrets[0].value: environment variable STRIPE_V1 is empty']);
  });

  // A secret file saved by a Windows editor or PowerShell (`Set-Content -Encoding UTF8`) starts with
  // a UTF-8 byte order mark. The config file's is skipped (config/load.ts); a secret file's became
  // part of the key: a GitHub secret three bytes off, every delivery 401, while check-config said OK.
  it('a ${file:} secret saved with a UTF-8 byte order mark is read without it, as the config file is', () => {
    const secretFile = join(dir, 'bom-secret');
    writeFileSync(secretFile, '\uFEFFgh_webhook_secret\r\n');
    const configFile = join(dir, 'bom-secret.yaml');
    writeFileSync(configFile, stringify({ ...base(), endpoints: [{ id: 'gh', provider: 'github', secrets: [{ version: 'v1', value: `\${file:${secretFile}}` }] }] }));
    const ring = new KeyRing(loadConfigFile(configFile, {}), {});
    expect(ring.problems).toEqual([]);
    expect(ring.keysFor('gh')!.map((k) => k.key.toString('hex'))).toEqual([Buffer.from('gh_webhook_secret').toString('hex')]);
  });

  // A secret file that is not UTF-8 text (raw key bytes, or UTF-16 as PowerShell 5's `echo s > file`
  // writes it) was decoded with U+FFFD for every bad byte: a different key, every delivery 401,
  // while check-config said OK.
  it('a ${file:} secret that is not UTF-8 text is a problem naming the path, not a mangled key', () => {
    const binary = join(dir, 'binary-secret');
    writeFileSync(binary, Buffer.from([0x9f, 0x00, 0xfe, 0x41, 0xc3, 0x28]));
    const utf16 = join(dir, 'utf16-secret');
    writeFileSync(utf16, Buffer.concat([Buffer.from([0xff, 0xfe]), Buffer.from('gh_webhook_secret\r\n', 'utf16le')]));
    const configFile = join(dir, 'not-utf8.yaml');
    writeFileSync(configFile, stringify({ ...base(), endpoints: [
      { id: 'gh', provider: 'github', secrets: [{ version: 'v1', value: `\${file:${binary}}` }] },
      { id: 'gh2', provider: 'github', secrets: [{ version: 'v1', value: `\${file:${utf16}}` }] },
    ] }));
    const ring = new KeyRing(loadConfigFile(configFile, {}), {});
    expect(ring.keysFor('gh')).toBeUndefined();
    expect(ring.keysFor('gh2')).toBeUndefined();
    expect(ring.problems).toEqual([
      `endpoints[0].secrets[0].value: ${binary} is not UTF-8 text (raw key bytes? write the key as text, e.g. its base64)`,
      `endpoints[1].secrets[0].value: ${utf16} is not UTF-8 text (raw key bytes? write the key as text, e.g. its base64)`,
    ]);
  });

  // A stat failing otherwise than ENOENT (a path component that is a file: ENOTDIR) threw out of
  // the KeyRing: at start a crash with a stack; in a running process every 10 s check failed
  // ("secret check failed") instead of reporting the secret.
  it('a ${file:} secret whose path cannot be statted (ENOTDIR) is a problem naming it, at start and on reload', async () => {
    const notADir = join(dir, 'stripe-as-file');
    writeFileSync(notADir, 'whsec_abc\n');
    const secretPath = join(notADir, 'v1');
    const doc = withEndpoint(stripeEp({ secrets: [{ version: 'v1', value: `\${file:${secretPath}}` }] }));
    const ring = new KeyRing(parseConfig(doc, {}), {});
    const problem = `endpoints[0].secrets[0].value: cannot read ${secretPath} (ENOTDIR)`;
    expect(ring.problems).toEqual([problem]);
    ring.reload(await ring.readFiles());
    expect(ring.problems).toEqual([problem]);
    expect(await ring.filesChanged()).toBe(false);
  });

  // An env file with CRLF line endings read by a shell (`set -a; . ./inbox.env`) leaves "\r" at the
  // end of each value, without the "\n" (DATABASE_URL is refused for it): the secret was kept with
  // the "\r", a key one byte off, every Stripe delivery 401 while check-config said OK.
  it('a ${env:} value ending in the "\\r" of a CRLF env file is read without it', () => {
    const doc = withEndpoint(stripeEp({ secrets: [{ version: 'v1', value: '${env:STRIPE_V1}' }] }));
    expect(new KeyRing(parseConfig(doc, {}), { STRIPE_V1: 'whsec_from_env\r' }).keysFor('ep')!.map((k) => k.key.toString())).toEqual(['whsec_from_env']);
    expect(new KeyRing(parseConfig(doc, {}), { STRIPE_V1: '\r' }).problems).toEqual(['endpoints[0].secrets[0].value: environment variable STRIPE_V1 is empty']);
  });

  it('an unresolvable or malformed secret is reported by path, never by value', () => {
    const doc = {
      ...base(),
      payloadKeys: { current: 'k1', keys: { k1: '${env:NO_SUCH_KEY}' } },
      endpoints: [
        stripeEp({ secrets: [{ version: 'v1', value: '${env:NO_SUCH_VAR}' }] }),
        stripeEp({ id: 'ep2', secrets: [{ version: 'v1', value: 'not-a-whsec-value-xyz' }] }),
        stripeEp({ id: 'ep3', secrets: [{ version: 'v1', value: `\${file:${join(dir, 'absent')}}` }] }),
      ],
    };
    const ring = new KeyRing(parseConfig(doc, {}), {});
    expect(ring.ready).toBe(false);
    expect(ring.keysFor('ep')).toBeUndefined();
    expect(ring.cipher).toBeNull();
    expect(ring.problems).toEqual([
      'endpoints[0].secrets[0].value: environment variable NO_SUCH_VAR is not set',
      'endpoints[1].secrets[0].value: a Stripe endpoint secret starts with "whsec_"',
      expect.stringMatching(/^endpoints\[2\]\.secrets\[0\]\.value: cannot read .*absent \(ENOENT\)$/),
      'payloadKeys.keys.k1: environment variable NO_SUCH_KEY is not set',
    ]);
    expect(ring.problems.join('\n')).not.toContain('not-a-whsec-value-xyz');
  });

  // These providers generate their secrets as one token: white space in one is what a file or a paste
  // added, and kept it failed every genuine delivery with 401 while /readyz said ready.
  it('a Paddle, Square or Shopify secret with white space in it is refused by path when secrets load, its value never shown', () => {
    const doc = {
      ...base(),
      endpoints: [
        { id: 'pd', provider: 'paddle', secrets: [{ version: 'v1', value: 'pdl_ntfset_01hsecretvalue ' }] },
        { id: 'sq', provider: 'square', secrets: [{ version: 'v1', value: 'sqSigningKey0123\n\n' }], options: { publicUrl: 'https://example.com/webhooks/sq' } },
        { id: 'sh', provider: 'shopify', secrets: [{ version: 'v1', value: ' 6f1c0ffee0123456789abcdef' }] },
        { id: 'ok', provider: 'shopify', secrets: [{ version: 'v1', value: '6f1c0ffee0123456789abcdef' }] },
      ],
    };
    const ring = new KeyRing(parseConfig(doc, {}), {});
    expect(ring.problems).toEqual(['Paddle', 'Square', 'Shopify'].map((p, i) => `endpoints[${i}].secrets[0].value: a ${p} secret has no white space (a blank line or a space in its file or variable?)`));
    expect(ring.keysFor('ok')).toHaveLength(1);
    expect(ring.problems.join('\n')).not.toMatch(/secretvalue|SigningKey|c0ffee/);
  });

  // An inline secret of white space was taken as the key: a signature anyone can compute.
  it.each([' ', '  \n', '\t'])('an inline secret that is only white space (%j) is refused by path', (value) => {
    expect(errorOf(withEndpoint({ id: 'gh', provider: 'github', secrets: [{ version: 'v1', value }] }))).toBe('endpoints[0].secrets[0].value: is only white space (an inline value is the secret itself)');
  });

  // A space inside the braces (`${env: STRIPE_V2}`, `${file: /run/secrets/x}`) was read as part of
  // the name: "environment variable  STRIPE_V2 is not set", "cannot read  /run/secrets/x (ENOENT)"
  // about a variable that is set and a file that is there.
  it.each(['${ENV:STRIPE_V2}', ' ${env:STRIPE_V2}', '${env:STRIPE_V2} ', 'pre${env:STRIPE_V2}', '${env:STRIPE_V2', '${vault:STRIPE_V2}', '${env:}', '${file:}',
    '${env: STRIPE_V2}', '${env:STRIPE_V2 }', '${file: /run/secrets/STRIPE_V2}', '${file:/run/secrets/STRIPE_V2\n}'])(
    'a reference written almost right (%j) is refused by path, never taken as the inline secret it spells',
    (value) => {
      const message = errorOf(withEndpoint(stripeEp({ secrets: [{ version: 'v1', value }] })), { STRIPE_V2: 'whsec_real' });
      expect(message).toMatch(/^endpoints\[0\]\.secrets\[0\]\.value: is not a valid reference/);
      expect(message).not.toContain('STRIPE_V2');
    },
  );

  // A reference is read only where a secret goes. Elsewhere it was taken as the literal text, without
  // a word: `host: "${env:HOST}"` passed check-config, and `events: ["${env:EVENTS}"]` ignored every event.
  it.each<[string, unknown, RegExp]>([
    ['listen.host', { ...base(), listen: { host: '${env:HOST}' } }, /^listen\.host: /],
    ['an events glob', withEndpoint(stripeEp({ events: ['${env:EVENTS}'] })), /^endpoints\[0\]\.events\[0\]: /],
    ['a route\'s events glob', { ...base(), destinations: [{ id: 'api', type: 'http', url: 'http://127.0.0.1:9000/h', secret: 'whsec_abc' }], endpoints: [stripeEp({ routes: [{ events: ['${env:EVENTS}'], destination: 'api' }] })] }, /^endpoints\[0\]\.routes\[0\]\.events\[0\]: /],
    ['a secret version', withEndpoint(stripeEp({ secrets: [{ version: '${env:VERSION}', value: 'whsec_a' }] })), /^endpoints\[0\]\.secrets\[0\]\.version: /],
    ['payloadKeys.current', { ...base(), payloadKeys: { current: '${env:CURRENT}', keys: { '${env:CURRENT}': PAYLOAD_KEY } } }, /^payloadKeys\.current: /],
    ['a generic-hmac option', withEndpoint({ id: 'g', provider: 'generic-hmac', secrets: [{ version: 'v1', value: 's' }], options: { signatureHeader: '${env:SIG_HEADER}', idPath: 'id' } }), /^endpoints\[0\]\.options\.signatureHeader: /],
    ['a rabbitmq queue', { ...base(), destinations: [{ id: 'mq', type: 'rabbitmq', url: 'amqp://127.0.0.1', exchange: 'x', queue: '${env:QUEUE}' }] }, /^destinations\[0\]\.queue: /],
  ])('a reference in %s (not a secret) is refused, not taken literally', (_name, doc, where) => {
    const env = { HOST: '0.0.0.0', EVENTS: '*', VERSION: 'v1', CURRENT: 'k1', SIG_HEADER: 'x-sig', QUEUE: 'q' };
    const message = errorOf(doc, env);
    expect(message).toMatch(where);
    expect(message).toMatch(/a reference \(\$\{env:NAME\}, \$\{file:PATH\}\) is read only where a secret goes/);
  });

  it('a reference as database says that DATABASE_URL overrides it', () => {
    expect(errorOf({ ...base(), database: '${env:DB}' }, { DB: 'sqlite:/tmp/y.db' })).toMatch(/^database: .*set DATABASE_URL/);
    // Where a secret goes, it is still read.
    expect(parseConfig({ ...base(), destinations: [{ id: 'api', type: 'http', url: '${env:FWD}', secret: '${env:FWD_SECRET}' }] }, { FWD: 'http://127.0.0.1:9000/h' }).destinations[0]!.url).toBe('http://127.0.0.1:9000/h');
  });

  it('a payload key reference written almost right is refused the same way', () => {
    expect(errorOf({ ...base(), payloadKeys: { current: 'k1', keys: { k1: '${env:KEY ' } } })).toMatch(/^payloadKeys\.keys\.k1: is not a valid reference/);
  });

  // A key written where its id goes (`keys: { "<key>": k2 }`, key and id swapped) was printed in
  // the problem's path: by check-config, in the log and in /readyz's reasons.
  it('a payload key id that may be a key itself is not printed in a path', () => {
    const ring = new KeyRing(parseConfig({ ...base(), payloadKeys: { current: 'k1', keys: { k1: PAYLOAD_KEY, [PAYLOAD_KEY]: 'k2' } } }, {}), {});
    expect(ring.problems).toEqual(['payloadKeys.keys.(a 44-character key id): must be 32 bytes, base64-encoded (openssl rand -base64 32)']);
    expect(errorOf({ ...base(), payloadKeys: { current: 'k1', keys: { k1: PAYLOAD_KEY, [PAYLOAD_KEY]: '${ENV:K2}' } } })).toBe('payloadKeys.keys.(a 44-character key id): is not a valid reference: write exactly ${env:NAME} or ${file:PATH} (lower-case, no spaces inside, nothing around it); an inline value cannot contain "${"');
  });

  // Standard Webhooks 1.0: a signing secret is "Random. At least 24 bytes (192 bits)". A short
  // one (a word, a 16-byte hex string read as base64) signed every forward, and the receiver's
  // library verified it: forgeable by anyone who could guess or brute-force it.
  it('an HTTP destination signing secret under 24 bytes is refused, naming its path and never its value', () => {
    const ring = (secret: string, env: NodeJS.ProcessEnv = {}) => new KeyRing(parseConfig({ ...base(), destinations: [{ id: 'api', type: 'http', url: 'http://127.0.0.1:9000/h', secret }] }, env), env);
    const short = `whsec_${Buffer.from('SHORTSECRET-16by').toString('base64')}`;
    for (const r of [ring(short), ring('${env:FWD_SECRET}', { FWD_SECRET: short })]) {
      expect(r.problems).toEqual(['destinations[0].secret: is 16 bytes: a signing secret is at least 24 random bytes (Standard Webhooks); generate one: echo "whsec_$(openssl rand -base64 32)"']);
      expect(r.destinationKey('api')).toBeUndefined();
    }
    expect(ring('whsec_abc').problems).toEqual([expect.stringMatching(/^destinations\[0\]\.secret: is 2 bytes: /)]);
    // 24 bytes, the spec's minimum (Svix issues such secrets: the spec's own test vector), and 32 load.
    expect(ring('whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw').problems).toEqual([]);
    expect(ring(`whsec_${Buffer.alloc(32, 1).toString('base64')}`).destinationKey('api')).toHaveLength(32);
  });

  it('a payload key that is not 32 bytes of base64 is refused', () => {
    const ring = new KeyRing(parseConfig({ ...base(), payloadKeys: { current: 'k1', keys: { k1: 'c2hvcnQ=' } } }, {}), {});
    expect(ring.problems).toEqual(['payloadKeys.keys.k1: must be 32 bytes, base64-encoded (openssl rand -base64 32)']);
  });
});
