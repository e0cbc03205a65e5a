import { createServer, type AddressInfo } from 'node:net';
import { createServer as createHttpServer } from 'node:http';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { stringify } from 'yaml';
import { loadConfigFile } from '../../src/config/load.js';
import { parseConfig } from '../../src/config/schema.js';
import { configDoc, PAYLOAD_KEY } from '../helpers/app.js';
import { runCli } from '../helpers/server-process.js';

/**
 * Config loading and the CLI on operator mistakes: a bad config is a ConfigError naming the path
 * (exit 78), a bad argument a usage error (exit 2), a failure one line (exit 1); never a stack
 * trace, and never a secret printed. The comment above each test says what an operator would hit.
 */

const STACK = /\n\s+at /;
const base = () => configDoc('sqlite:/tmp/x.db');
const stripeEp = (over: Record<string, unknown> = {}) => ({ id: 'ep', provider: 'stripe', secrets: [{ version: 'v1', value: 'whsec_abc' }], ...over });
const api = { id: 'api', type: 'http', url: 'http://127.0.0.1:9000/h', secret: 'whsec_abc' };

function errorOf(doc: unknown, env: NodeJS.ProcessEnv = {}): string {
  try {
    parseConfig(doc, env);
  } catch (err) {
    return `${(err as Error).name}: ${(err as Error).message}`;
  }
  return 'config was accepted';
}

describe('config errors', () => {
  const dir = mkdtempSync(join(tmpdir(), 'wi-errors-cfg-'));

  // `options:` left empty in YAML (null) must be a config error naming the path; it was a TypeError from Object.keys(null) (a stack trace, exit 1).
  it('an empty (null) provider options block is a config error naming endpoints[0].options', () => {
    expect(errorOf({ ...base(), endpoints: [stripeEp({ options: null })] })).toMatch(/^ConfigError: endpoints\[0\]\.options: /);
    expect(errorOf({ ...base(), endpoints: [{ id: 'p', provider: 'paypal', secrets: [{ version: 'v1', value: '4JH86294D6297924G' }], options: null }] })).toMatch(/^ConfigError: endpoints\[0\]\.options: /);
  });

  // Node refuses headersTimeout > requestTimeout when the server is created: the config must refuse it (check-config said OK, serve printed a RangeError stack and then hung with its store open).
  it('limits.headersTimeoutMs above limits.requestTimeoutMs is refused by the config', () => {
    expect(errorOf({ ...base(), limits: { headersTimeoutMs: 60_000, requestTimeoutMs: 30_000 } })).toMatch(/^ConfigError: limits\.(headersTimeoutMs|requestTimeoutMs): /);
  });

  // Only requestTimeoutMs written, below headersTimeoutMs's default (10000): the error named
  // limits.headersTimeoutMs, a key the file does not have, as the one to change.
  it('limits.requestTimeoutMs below the default headersTimeoutMs is refused naming limits.requestTimeoutMs, the key written', () => {
    expect(errorOf({ ...base(), limits: { requestTimeoutMs: 5000 } })).toMatch(/^ConfigError: limits\.requestTimeoutMs: must be ≥ limits\.headersTimeoutMs \(10000, its default\)/);
    // Both written (or only headersTimeoutMs): headersTimeoutMs is named, as before.
    expect(errorOf({ ...base(), limits: { headersTimeoutMs: 60_000, requestTimeoutMs: 30_000 } })).toMatch(/^ConfigError: limits\.headersTimeoutMs: must be ≤ limits\.requestTimeoutMs \(60000 > 30000\)/);
    expect(errorOf({ ...base(), limits: { headersTimeoutMs: 60_000 } })).toMatch(/^ConfigError: limits\.headersTimeoutMs: must be ≤ limits\.requestTimeoutMs \(60000 > 30000, its default\)/);
  });

  // A blank listen.host (" ") is not a host, as a blank --host is not: refuse it by path instead of failing at serve.
  it('a blank listen.host is refused, naming listen.host', () => {
    expect(errorOf({ ...base(), listen: { host: ' ' } })).toMatch(/^ConfigError: listen\.host: /);
  });

  // A listen.host with a port, a scheme, brackets or a space passed check-config and then failed
  // serve ("does not resolve"): the form alone says it is no host.
  it('a listen.host that is not a host name or address alone (a port, scheme, brackets, space) is refused, naming listen.host', () => {
    for (const host of ['0.0.0.0:8080', 'http://127.0.0.1', '[::1]', 'localhost ', 'hooks.example.com/in']) {
      expect(errorOf({ ...base(), listen: { host } })).toMatch(/^ConfigError: listen\.host: must be a host name or IP address alone/);
    }
    for (const host of ['::1', '::', '0.0.0.0', 'localhost', 'fe80::1%eth0', 'inbox-1.internal']) {
      expect(parseConfig({ ...base(), listen: { host } }, {}).listen.host).toBe(host);
    }
  });

  // The README's own config example (and docs/destinations.md) writes `exchange: ""` for the default exchange: it must load, not fail with "must be a non-empty string".
  it('a rabbitmq destination with exchange: "" (the default exchange, as the README example writes it) is accepted', () => {
    const doc = { ...base(), destinations: [{ id: 'mq', type: 'rabbitmq', url: 'amqp://guest:guest@127.0.0.1:5672', exchange: '', routingKey: 'webhooks', queue: 'webhooks' }] };
    expect(errorOf(doc)).toBe('config was accepted');
  });

  // A route with `events: []` can never match (the matcher becomes ^(?:)$): refuse it as the endpoint-level `events: []` is refused, instead of a route that silently receives nothing.
  it('routes[].events: [] is refused, naming the path', () => {
    expect(errorOf({ ...base(), destinations: [api], endpoints: [stripeEp({ routes: [{ events: [], destination: 'api' }] })] }))
      .toMatch(/^ConfigError: endpoints\[0\]\.routes\[0\]\.events: /);
  });

  // A glob with surrounding whitespace (a quoting slip) matches no provider event type, so every event is answered 200 "ignored" and dropped: refuse it by path.
  it('an events glob with leading or trailing whitespace is refused', () => {
    expect(errorOf({ ...base(), endpoints: [stripeEp({ events: [' payment_intent.*'] })] })).toMatch(/^ConfigError: endpoints\[0\]\.events\[0\]: /);
    expect(errorOf({ ...base(), endpoints: [stripeEp({ events: ['charge.refunded\n'] })] })).toMatch(/^ConfigError: endpoints\[0\]\.events\[0\]: /);
    expect(errorOf({ ...base(), destinations: [api], endpoints: [stripeEp({ routes: [{ events: ['charge.* '], destination: 'api' }] })] }))
      .toMatch(/^ConfigError: endpoints\[0\]\.routes\[0\]\.events\[0\]: /);
  });

  // `*` is the only wildcard: shell- or regex-style syntax in a glob was matched literally, so
  // `charge.{succeeded,refunded}` or `payment_intent.?` let every event it was written for be
  // answered 200 "ignored" and dropped (the provider does not send it again).
  it('an events glob using a wildcard other than * (?, [..], {a,b}, a regex escape) is refused, naming the path', () => {
    for (const glob of ['charge.{succeeded,refunded}', 'payment_intent.?', 'charge.[rs]*', 'payment_intent\\..*']) {
      expect(errorOf({ ...base(), endpoints: [stripeEp({ events: ['charge.refunded', glob] })] })).toMatch(/^ConfigError: endpoints\[0\]\.events\[1\]: only "\*" is a wildcard/);
    }
    expect(errorOf({ ...base(), destinations: [api], endpoints: [stripeEp({ routes: [{ events: ['invoice.{paid,voided}'], destination: 'api' }] })] }))
      .toMatch(/^ConfigError: endpoints\[0\]\.routes\[0\]\.events\[0\]: only "\*" is a wildcard/);
    expect(errorOf({ ...base(), endpoints: [stripeEp({ events: ['payment_intent.*', '*.created', 'Push Hook', 'orders/create', '/deploy'] })] })).toBe('config was accepted');
  });

  // A NATS subject NATS cannot take is a static config error: parseConfig must refuse it with the config's path (it passed, serve started with the destination offline for good, and the error said destinations[id="bus"]).
  it('an invalid NATS subject is refused at load, naming destinations[0].subject', () => {
    expect(errorOf({ ...base(), destinations: [{ id: 'bus', type: 'nats', url: 'nats://127.0.0.1:4222', subject: 'webhooks events' }] }))
      .toMatch(/^ConfigError: destinations\[0\]\.subject: /);
  });

  // On the default exchange the routing key is the queue name: a static rule, refused at load with the config's path (it was found only when serve opened the destination).
  it('a rabbitmq routingKey other than its queue on the default exchange is refused at load, naming destinations[0].routingKey', () => {
    expect(errorOf({ ...base(), destinations: [{ id: 'mq', type: 'rabbitmq', url: 'amqp://127.0.0.1:5672', exchange: '', routingKey: 'webhooks.{provider}', queue: 'webhooks' }] }))
      .toMatch(/^ConfigError: destinations\[0\]\.routingKey: /);
  });

  // RabbitMQ refuses these on every declare (403 ACCESS_REFUSED for amq.*; a frame error past 255
  // bytes), so every delivery failed for good while check-config passed.
  it('a rabbitmq queue the broker can never declare (reserved amq.* prefix, over 255 bytes) is refused at load, naming destinations[0].queue', () => {
    for (const queue of ['amq.events', 'q'.repeat(256)]) {
      expect(errorOf({ ...base(), destinations: [{ id: 'mq', type: 'rabbitmq', url: 'amqp://127.0.0.1:5672', exchange: 'webhooks', queue }] }))
        .toMatch(/^ConfigError: destinations\[0\]\.queue: /);
    }
    expect(parseConfig({ ...base(), destinations: [{ id: 'mq', type: 'rabbitmq', url: 'amqp://127.0.0.1:5672', exchange: 'webhooks', queue: 'q'.repeat(255) }] }, {}).destinations[0]).toMatchObject({ queue: 'q'.repeat(255) });
  });

  // The SQLite URL's parameters (busyTimeoutMs, txTimeoutMs) are config too: a typo or a non-number silently fell back to the default.
  it('a SQLite URL parameter that is unknown or not a number is a config error naming database', () => {
    expect(errorOf({ ...base(), database: 'sqlite:/tmp/x.db?busyTimeoutMs=abc' })).toMatch(/^ConfigError: database: /);
    expect(errorOf({ ...base(), database: 'sqlite:/tmp/x.db?busyTimoutMs=100' })).toMatch(/^ConfigError: database: /);
  });

  // txTimeoutMs is a timer: past 2^31-1 ms Node fires it after 1 ms (TimeoutOverflowWarning), so a
  // "never time out" 3000000000 rolled back every handler transaction at once; 0 did the same. A
  // busy_timeout past a 32-bit int wraps in SQLite. Both passed check-config.
  it('SQLite URL timeouts a timer or SQLite cannot hold (0, past 2^31-1 ms) are a config error naming database', () => {
    for (const q of ['txTimeoutMs=3000000000', 'txTimeoutMs=0', 'busyTimeoutMs=2147483648']) {
      expect(errorOf({ ...base(), database: `sqlite:/tmp/x.db?${q}` })).toMatch(/^ConfigError: database: sqlite URL parameter \w+ must be an integer from \d+ to 2147483647/);
    }
    expect(parseConfig({ ...base(), database: 'sqlite:/tmp/x.db?txTimeoutMs=2147483647&busyTimeoutMs=0' }, {}).database).toContain('txTimeoutMs');
  });

  // sqlite:PATH takes the rest as a file path: `sqlite://./data/inbox.db` (URL habit) opened
  // /data/inbox.db at the file system's root, and `sqlite:///inbox.db` (relative in the
  // SQLAlchemy/Django convention) /inbox.db, without a word: in a container running as root, a
  // database outside the mounted volume.
  it('a sqlite URL with "//" (sqlite://…, sqlite:///…) is a config error naming database, not a file at the root', () => {
    for (const url of ['sqlite://./data/inbox.db', 'sqlite:///inbox.db', 'sqlite://data/inbox.db?busyTimeoutMs=100']) {
      expect(errorOf({ ...base(), database: url })).toMatch(/^ConfigError: database: .*sqlite:\.\/data\/webhook-inbox\.db.*sqlite:\/var\/lib/);
    }
    expect(parseConfig({ ...base(), database: 'sqlite:/tmp/x.db' }, {}).database).toBe('sqlite:/tmp/x.db');
  });

  // parseConfig(doc, env) resolves ${env:} references from `env` (destination URLs do); adapter option secrets read process.env instead, so a library caller's env was ignored.
  it('${env:} references in provider options are resolved from the env given to parseConfig', () => {
    const doc = { ...base(), endpoints: [{ id: 'c', provider: 'checkout', secrets: [{ version: 'v1', value: 'cko-secret' }], options: { authorization: ['${env:AUDIT_CKO_AUTH}'] } }] };
    expect(errorOf(doc, { AUDIT_CKO_AUTH: 'sk_audit_value' })).toBe('config was accepted');
  });

  // A long unknown key is not echoed (read.ts: it may be a secret in the wrong place); PayPal's options reader echoed it in full.
  it('a long unknown key in PayPal options is not echoed', () => {
    const secret = 'whsec_TOPSECRETVALUE1234567890abcdefghij';
    const message = errorOf({ ...base(), endpoints: [{ id: 'p', provider: 'paypal', secrets: [{ version: 'v1', value: '4JH86294D6297924G' }], options: { [secret]: 1 } }] });
    expect(message).toMatch(/^ConfigError: endpoints\[0\]\.options\./);
    expect(message).not.toContain('TOPSECRET');
  });

  // "YAML or JSON, same keys": a UTF-8 BOM (Windows editors) is ignored by the YAML reader, so the JSON reader must ignore it too (it said "not valid JSON at line 1, column 1").
  it('a JSON config with a UTF-8 BOM loads as the same file in YAML does', () => {
    const text = `\uFEFF${JSON.stringify({ ...base(), endpoints: [stripeEp()] })}`;
    writeFileSync(join(dir, 'bom.yaml'), text);
    writeFileSync(join(dir, 'bom.json'), text);
    expect(loadConfigFile(join(dir, 'bom.yaml'), {}).endpoints[0]!.id).toBe('ep');
    expect(loadConfigFile(join(dir, 'bom.json'), {}).endpoints[0]!.id).toBe('ep');
  });
});

describe('CLI errors', () => {
  const dir = mkdtempSync(join(tmpdir(), 'wi-errors-cli-'));
  const write = (name: string, doc: Record<string, unknown>) => {
    const file = join(dir, name);
    writeFileSync(file, stringify(doc));
    return file;
  };

  // check-config on `options:` with nothing after it must exit 78 naming the path; it printed a TypeError stack and exited 1.
  it('check-config: an empty options block exits 78 naming the path, no stack trace', async () => {
    const file = join(dir, 'options-null.yaml');
    writeFileSync(file, `${stringify(configDoc('sqlite:./x.db', { endpoints: [stripeEp()] }))}`.replace(/(\n {4}secrets:)/, '\n    options:$1'));
    const r = await runCli(['check-config', '--config', file]);
    expect(r.err).not.toMatch(STACK);
    expect(r.code).toBe(78);
    expect(r.err).toContain('endpoints[0].options');
  });

  // A YAML tag the loader does not know (`!vault …`) must be a config error that quotes nothing; the yaml parser's warning printed the source line (an inline secret) to stderr and the value was taken as an inline secret.
  it('check-config: an unknown YAML tag is refused and its line is never printed', async () => {
    const file = join(dir, 'tag.yaml');
    writeFileSync(file, [
      'database: sqlite:./x.db',
      `payloadKeys: { current: k1, keys: { k1: "${PAYLOAD_KEY}" } }`,
      'endpoints:',
      '  - id: stripe',
      '    provider: stripe',
      '    secrets: [{ version: v1, value: !vault whsec_TOPSECRETVALUE123 }]',
      '',
    ].join('\n'));
    const r = await runCli(['check-config', '--config', file]);
    expect(r.out + r.err).not.toContain('TOPSECRET');
    expect(r.code).toBe(78);
  });

  // Compose's `STRIPE_WHSEC: ${STRIPE_WHSEC}` with the host's variable unset starts the container
  // with the variable set to "": check-config said it "is not set", and `env` in the container
  // shows it set, sending the operator to look in the wrong place.
  it('check-config: a ${env:} secret set but empty is reported as empty, not as not set', async () => {
    const file = write('env-empty.yaml', configDoc('sqlite:./x.db', { endpoints: [stripeEp({ secrets: [{ version: 'v1', value: '${env:WI_EMPTY_SECRET}' }] })] }));
    const r = await runCli(['check-config', '--config', file], 30_000, { WI_EMPTY_SECRET: '' });
    expect(r.code).toBe(78);
    expect(r.err).toContain('endpoints[0].secrets[0].value: environment variable WI_EMPTY_SECRET is empty');
    expect(r.err).not.toContain('is not set');
  });

  // `${file:/run/secrets/stripe/v1}` where /run/secrets/stripe is a file (the secret mounted as a
  // file, not a folder): statting it fails with ENOTDIR, not ENOENT, and check-config (and serve, at
  // start) printed an ENOTDIR stack trace and exited 1 instead of naming the secret's path.
  it('check-config: a ${file:} secret under a path that is a file (ENOTDIR) exits 78 naming the secret, no stack trace', async () => {
    const notADir = join(dir, 'stripe');
    writeFileSync(notADir, 'whsec_abc\n');
    const file = write('enotdir.yaml', configDoc('sqlite:./x.db', { endpoints: [stripeEp({ secrets: [{ version: 'v1', value: `\${file:${join(notADir, 'v1')}}` }] })] }));
    const r = await runCli(['check-config', '--config', file]);
    expect(r.err).not.toMatch(STACK);
    expect(r.code).toBe(78);
    expect(r.err).toContain(`endpoints[0].secrets[0].value: cannot read ${join(notADir, 'v1')} (ENOTDIR)`);
  });

  // `database: sqlite:~/inbox/events.db` (a shell habit): nothing expands "~", so serve created a
  // folder named "~" in its working directory and kept the events there, and a command run from
  // elsewhere (events list, keys reseal) opened another, empty database.
  it('check-config: a sqlite path starting with "~" (not expanded) exits 78 naming database', async () => {
    const file = write('tilde.yaml', configDoc('sqlite:~/inbox/events.db'));
    const r = await runCli(['check-config', '--config', file]);
    expect(r.code).toBe(78);
    expect(r.err).toMatch(/config error: database: .*"~"/);
    const viaEnv = await runCli(['check-config', '--config', write('tilde-env.yaml', configDoc('sqlite:./x.db'))], 30_000, { DATABASE_URL: 'sqlite:~/inbox/events.db' });
    expect(viaEnv.code).toBe(78);
    expect(viaEnv.err).toMatch(/config error: DATABASE_URL: .*"~"/);
  });

  // limits.headersTimeoutMs > requestTimeoutMs: check-config must say so (78), as serve cannot start with it.
  it('check-config: headersTimeoutMs above requestTimeoutMs exits 78', async () => {
    const file = write('timeouts.yaml', configDoc('sqlite:./x.db', { limits: { headersTimeoutMs: 60_000, requestTimeoutMs: 30_000 } }));
    const r = await runCli(['check-config', '--config', file]);
    expect(r.code).toBe(78);
    expect(r.err).toMatch(/limits\.(headersTimeoutMs|requestTimeoutMs)/);
  });

  // A listen.host that does not resolve (a typo) must end serve with one line, as an address in use does; it was a getaddrinfo ENOTFOUND stack trace.
  it('serve: a listen.host that does not resolve exits 1 with one line, no stack trace', async () => {
    const file = write('badhost.yaml', configDoc(`sqlite:${join(dir, 'badhost.db')}`, { listen: { host: 'no-such-host.invalid', port: 0 } }));
    const r = await runCli(['serve', '--config', file], 20_000);
    expect(r.code).toBe(1);
    expect(r.err).toContain('no-such-host.invalid');
    expect(r.err).not.toMatch(STACK);
  });

  // `--handlers` naming a module that does not exist is a bad argument: usage error (2) naming it, not an ERR_MODULE_NOT_FOUND stack trace (exit 1).
  it.each(['serve', 'work'])('%s --handlers with a missing module is a usage error, no stack trace', async (cmd) => {
    const file = write(`handlers-${cmd}.yaml`, configDoc(`sqlite:${join(dir, `handlers-${cmd}.db`)}`));
    const r = await runCli([cmd, '--config', file, '--handlers', join(dir, 'no-such-handlers.mjs')], 20_000);
    expect(r.err).not.toMatch(STACK);
    expect(r.code).toBe(2);
    expect(r.err).toContain('no-such-handlers.mjs');
  });

  // An empty --config= (`--config=$CONFIG`, CONFIG unset) is a usage error like an empty --host=; it was exit 78 with the message ": cannot read config file (ENOENT)", naming nothing.
  it('an empty --config= is a usage error (2)', async () => {
    const r = await runCli(['check-config', '--config=']);
    expect(r.code).toBe(2);
    expect(r.err).toContain('--config');
  });

  // An optional option given empty (`--handlers=$MODULE`, MODULE unset) ran as if it were absent:
  // serve started with no handlers, events list --endpoint= listed every endpoint's events.
  it.each([
    ['serve', ['--handlers=']],
    ['work', ['--handlers= ']],
    ['events', ['list', '--endpoint=']],
    ['events', ['list', '--type=']],
    ['events', ['list', '--reason=']],
    ['send-sample', ['--endpoint', 'stripe', '--url=']],
    ['keys', ['reseal', '--per-second=']],
  ])('%s %j: an optional option given empty is a usage error (2) naming it', async (cmd, args) => {
    const file = write(`blank-${cmd}.yaml`, configDoc(`sqlite:${join(dir, 'blank.db')}`));
    const r = await runCli([cmd, '--config', file, ...args], 20_000);
    expect(r.code, r.err).toBe(2);
    const option = args.find((a) => a.includes('='))!.split('=')[0]!;
    expect(r.err).toContain(`${option} was given empty`);
  });

  // Options of another subcommand were ignored: `events show ID --status failed` showed the event
  // whatever its status; `keys list --busy 10` listed as if nothing was said.
  it.each([
    [['events', 'show', '00000000-0000-0000-0000-000000000000', '--status', 'failed'], '--status is for events list'],
    [['events', 'show', '00000000-0000-0000-0000-000000000000', '--limit', '5'], '--limit is for events list'],
    [['keys', 'list', '--busy', '10'], '--busy is for keys reseal'],
    [['outbox', 'requeue', '--all', '--limit', '5'], '--limit is for outbox parked'],
    [['outbox', 'parked', '--all'], '--all is for outbox requeue'],
  ])('%j: another subcommand\'s option is a usage error (2): %s', async (args, message) => {
    const file = write('other-sub.yaml', configDoc(`sqlite:${join(dir, 'other-sub.db')}`));
    const r = await runCli([args[0]!, '--config', file, ...args.slice(1)], 20_000);
    expect(r.code, r.err).toBe(2);
    expect(r.err).toContain(message);
  });

  // send-sample --url with a trailing slash (as copied from a browser) must POST to /webhooks/ID; it posted to //webhooks/ID and got 404.
  it('send-sample --url BASE/ posts to BASE/webhooks/ID', async () => {
    const paths: string[] = [];
    const server = createHttpServer((req, res) => {
      paths.push(req.url ?? '');
      req.resume();
      req.on('end', () => res.end('{}'));
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    try {
      const file = write('sample-slash.yaml', configDoc('sqlite:./x.db'));
      const { port } = server.address() as AddressInfo;
      const r = await runCli(['send-sample', '--config', file, '--endpoint', 'stripe', '--url', `http://127.0.0.1:${port}/`]);
      expect(paths).toEqual(['/webhooks/stripe']);
      expect(r.code).toBe(0);
    } finally {
      server.close();
    }
  });

  // A --url that is not an http(s) URL is a bad argument: usage error (2), not exit 1 with "is the server running there?".
  it('send-sample --url that is not a URL is a usage error (2)', async () => {
    const file = write('sample-bad-url.yaml', configDoc('sqlite:./x.db'));
    const r = await runCli(['send-sample', '--config', file, '--endpoint', 'stripe', '--url', 'localhost-8080']);
    expect(r.code).toBe(2);
    expect(r.err).toContain('--url');
  });

  // send-sample on a PayPal endpoint cannot sign (PayPal signs with its own key): the command must say so in one line; it printed an Error stack trace.
  it('send-sample on a PayPal endpoint says why in one line, no stack trace', async () => {
    const closed = createServer();
    await new Promise<void>((r) => closed.listen(0, '127.0.0.1', r));
    const { port } = closed.address() as AddressInfo;
    await new Promise((r) => closed.close(r));
    const file = write('sample-paypal.yaml', configDoc('sqlite:./x.db', { endpoints: [{ id: 'pp', provider: 'paypal', secrets: [{ version: 'v1', value: '4JH86294D6297924G' }] }] }));
    const r = await runCli(['send-sample', '--config', file, '--endpoint', 'pp', '--url', `http://127.0.0.1:${port}`]);
    expect(r.err).toContain('PayPal signs deliveries with its own private key');
    expect(r.err).not.toMatch(STACK);
    expect([1, 2]).toContain(r.code);
  });
});
