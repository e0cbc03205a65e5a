#!/usr/bin/env node
import { readFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { ConfigError, HandlerError, ListenError, MigrationError, SchemaOutdatedError, StorageUnavailableError } from '../errors.js';
import { SecretUnavailableError } from '../config/secrets.js';
import { CommandError, UsageError } from './usage-error.js';
import { DEFAULT_BUSY_PERCENT, MAX_LIST_LIMIT } from './limits.js';

interface Command {
  readonly summary: string;
  readonly usage: string;
  readonly options: NonNullable<Parameters<typeof parseArgs>[0]>['options'];
  /** String options that may be absent (all others are required). */
  readonly optional?: readonly string[];
  /** Positional arguments, by name (all required). */
  readonly positionals?: readonly string[];
  run(values: Record<string, string | boolean | undefined>, args: string[]): Promise<number>;
}

const CONFIG = { config: { type: 'string', short: 'c' } } as const;
/** serve's and work's address of their own for /metrics, /healthz and /readyz. */
const METRICS_LISTEN = { 'metrics-port': { type: 'string' }, 'metrics-host': { type: 'string' } } as const;
const STATUSES = ['PENDING', 'PROCESSING', 'PROCESSED', 'FAILED'];
/** Inbox, outbox and effect ids alike (UUIDs). */
const INBOX_ID_RE = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/** An optional integer option within [min, max]; anything else is a usage error with `message`. */
function intOption(value: unknown, min: number, max: number, message: string): number | undefined {
  if (value === undefined) return undefined;
  // Decimal digits only: Number() reads "" and " " as 0 (`--port=` served on a random port), and
  // takes 0x1F90 and 1e3.
  const n = typeof value === 'string' && /^\d+$/.test(value) ? Number(value) : NaN;
  if (!Number.isInteger(n) || n < min || n > max) throw new UsageError(message);
  return n;
}

/** --metrics-port (0-65535) and --metrics-host, which is nothing without a port. */
function metricsListenOptions(v: Record<string, string | boolean | undefined>): { metricsPort?: number; metricsHost?: string } {
  const metricsHost = v['metrics-host'] as string | undefined;
  const metricsPort = intOption(v['metrics-port'], 0, 65535, `--metrics-port must be an integer from 0 to 65535, not "${String(v['metrics-port'])}"`);
  if (metricsHost !== undefined && metricsPort === undefined) throw new UsageError('--metrics-host needs --metrics-port');
  return { metricsPort, metricsHost };
}

const COMMANDS: Record<string, Command> = {
  serve: {
    summary: 'Run the webhook receiver (migrates first unless --no-migrate).',
    usage: 'webhook-inbox serve --config FILE [--host HOST] [--port PORT] [--no-migrate] [--demo] [--handlers MODULE]\n' +
      '                     [--metrics-port PORT [--metrics-host HOST]]\n\n' +
      '  --config, -c FILE    YAML or JSON config (DATABASE_URL overrides `database`)\n' +
      '  --host HOST          listen on HOST instead of the config\'s listen.host\n' +
      '  --port PORT          listen on PORT (0-65535; 0 = any free port) instead of listen.port\n' +
      '  --no-migrate         do not apply pending migrations at start\n' +
      '  --demo               also print a ready-to-run command that sends a signed sample event\n' +
      '  --handlers MODULE    a module whose default export registers in-process handlers: (inbox) => { inbox.on(…) }\n' +
      '  --metrics-port PORT  serve /metrics, /healthz and /readyz on PORT (0 = any free port) instead of the\n' +
      '                       webhook port, which then answers only /healthz of them: keeps database errors,\n' +
      '                       config paths and volumes off a port open to the internet\n' +
      '  --metrics-host HOST  the address for them (default: the webhook listen host)\n\n' +
      'Workers run in this process unless the config says workers.enabled: false.',
    options: { ...CONFIG, host: { type: 'string' }, port: { type: 'string' }, 'no-migrate': { type: 'boolean' }, demo: { type: 'boolean' }, handlers: { type: 'string' }, ...METRICS_LISTEN },
    optional: ['handlers', 'host', 'port', 'metrics-port', 'metrics-host'],
    run: async (v) => (await import('./serve.js')).runServe(String(v.config), {
      migrate: !v['no-migrate'],
      demo: Boolean(v.demo),
      handlers: v.handlers as string | undefined,
      host: v.host as string | undefined,
      port: intOption(v.port, 0, 65535, `--port must be an integer from 0 to 65535, not "${String(v.port)}"`),
      ...metricsListenOptions(v),
    }),
  },
  migrate: {
    summary: 'Apply pending database migrations and exit.',
    usage: 'webhook-inbox migrate --config FILE\n\n  --config, -c FILE  YAML or JSON config (DATABASE_URL overrides `database`)',
    options: CONFIG,
    run: async (v) => (await import('./migrate.js')).runMigrate(String(v.config)),
  },
  'check-config': {
    summary: 'Validate a config file and resolve every secret reference (values are never printed).',
    usage: 'webhook-inbox check-config --config FILE\n\n  --config, -c FILE  YAML or JSON config',
    options: CONFIG,
    run: async (v) => (await import('./check-config.js')).runCheckConfig(String(v.config)),
  },
  prune: {
    summary: "Run serve's hourly prune tasks once now (payload retention, PayPal transmission bindings) and exit.",
    usage: 'webhook-inbox prune --config FILE\n\n  --config, -c FILE  YAML or JSON config: retention.processedPayloadDays deletes the payloads of\n' +
      '                     PROCESSED events received longer ago, retention.failedPayloadDays those of FAILED\n' +
      '                     ones; PayPal endpoints, their old transmission bindings. Prints how many rows\n' +
      '                     went, per kind. serve does the same hourly.',
    options: CONFIG,
    run: async (v) => (await import('./prune.js')).runPrune(String(v.config)),
  },
  'send-sample': {
    summary: "Send one correctly signed sample event to a running server's endpoint.",
    usage: 'webhook-inbox send-sample --config FILE --endpoint ID [--url BASE] [--id SAMPLE]\n\n  --config, -c FILE  the config the server runs with (for the endpoint secret)\n  --endpoint, -e ID  endpoint id\n  --url BASE         server base URL (default: from listen)\n' +
      '  --id SAMPLE        send the sample event of an earlier run again (it prints its SAMPLE): the same\n' +
      '                     event id, newly signed, as a provider\'s retry; taken as a duplicate\n' +
      '                     (no new row; unsigned Mollie classic notices excepted).\n' +
      '                     Without it each run sends a new event.',
    options: { ...CONFIG, endpoint: { type: 'string', short: 'e' }, url: { type: 'string' }, id: { type: 'string' } },
    optional: ['url', 'id'],
    run: async (v) => (await import('./send-sample.js')).runSendSample(String(v.config), String(v.endpoint), v.url as string | undefined, v.id as string | undefined),
  },
  work: {
    summary: 'Run the processing workers alone (no HTTP ingress), so they scale apart from receiving.',
    usage: 'webhook-inbox work --config FILE [--handlers MODULE] [--metrics-port PORT [--metrics-host HOST]]\n\n' +
      '  --config, -c FILE    YAML or JSON config (destinations, routes, workers)\n' +
      '  --handlers MODULE    a module whose default export registers handlers: (inbox) => { inbox.on(…) }\n' +
      '  --metrics-port PORT  serve this process\'s metrics (the workers\', which serve has not), /healthz and\n' +
      '                       /readyz on PORT (0-65535; 0 = any free port). Without it, nothing is served.\n' +
      '  --metrics-host HOST  the address for them (default: the config\'s listen.host)',
    options: { ...CONFIG, handlers: { type: 'string' }, ...METRICS_LISTEN },
    optional: ['handlers', 'metrics-port', 'metrics-host'],
    run: async (v) => (await import('./work.js')).runWork(String(v.config), { handlers: v.handlers as string | undefined, ...metricsListenOptions(v) }),
  },
  events: {
    summary: 'List events (newest first) or show one: events list [filters] | events show INBOX_ID.',
    usage: 'webhook-inbox events list --config FILE [--status S] [--endpoint ID] [--type T] [--reason R] [--limit N] [--before INBOX_ID] [--json]\n       webhook-inbox events show --config FILE INBOX_ID',
    options: { ...CONFIG, status: { type: 'string' }, endpoint: { type: 'string' }, type: { type: 'string' }, reason: { type: 'string' }, limit: { type: 'string' }, before: { type: 'string' }, json: { type: 'boolean' } },
    optional: ['status', 'endpoint', 'type', 'reason', 'limit', 'before'],
    positionals: ['list|show'],
    run: async (v, args) => {
      if (args[0] === 'show') {
        if (!args[1]) throw new UsageError('events show needs an INBOX_ID');
        noMoreThan(args, 2);
        // (It prints JSON anyway, so --json is harmless.)
        onlyFor(v, ['status', 'endpoint', 'type', 'reason', 'limit', 'before'], 'events list');
        return (await import('./events.js')).runEventsShow(String(v.config), args[1].toLowerCase());
      }
      if (args[0] !== 'list') throw new UsageError(`unknown events subcommand "${args[0]}" (list or show)`);
      noMoreThan(args, 1);
      const limit = intOption(v.limit, 1, 1000, '--limit must be an integer from 1 to 1000');
      // Not an id, a cursor would page nowhere (PostgreSQL) or from the top (SQLite compares text): refuse it.
      if (v.before !== undefined && !INBOX_ID_RE.test(String(v.before))) throw new UsageError('--before must be an inbox id (a UUID, as "events list" prints it)');
      const status = (v.status as string | undefined)?.toUpperCase();
      if (status !== undefined && !STATUSES.includes(status)) throw new UsageError(`--status must be one of: ${STATUSES.join(', ').toLowerCase()}`);
      // A failure reason is kept on FAILED rows only: with another --status the list was always empty.
      if (v.reason !== undefined && status !== undefined && status !== 'FAILED') throw new UsageError(`--reason lists FAILED events; it cannot be combined with --status ${status.toLowerCase()}`);
      return (await import('./events.js')).runEventsList(String(v.config), { status, endpoint: v.endpoint as string | undefined, type: v.type as string | undefined,
        reason: v.reason as string | undefined, limit, before: (v.before as string | undefined)?.toLowerCase(), json: Boolean(v.json) });
    },
  },
  retry: {
    summary: 'Send one FAILED event back to PENDING (refuses any other status, and says why).',
    usage: 'webhook-inbox retry --config FILE INBOX_ID',
    options: CONFIG,
    positionals: ['INBOX_ID'],
    run: async (v, args) => {
      noMoreThan(args, 1);
      return (await import('./events.js')).runRetry(String(v.config), args[0]!.toLowerCase());
    },
  },
  requeue: {
    summary: 'Bulk-retry FAILED events of one failure class: "technical" (retries exhausted), "abandoned" (attempts that never finished) or "payload" (bodies that did not open with their key).',
    usage: 'webhook-inbox requeue --config FILE --reason technical|abandoned|payload\n\n' +
      '  technical  FAILED retries_exhausted: every attempt failed (an outage, a timeout); fix the cause, requeue\n' +
      '  abandoned  FAILED attempts_abandoned: the last attempt never finished (its worker crashed or hung,\n' +
      '             perhaps because of the event itself); requeue once that cause is fixed\n' +
      '  payload    FAILED payload_corrupt: the stored body did not open with its payload key\'s value (a key\n' +
      '             rewritten under its id); put the value it was sealed with back, then requeue',
    options: { ...CONFIG, reason: { type: 'string' } },
    run: async (v) => (await import('./events.js')).runRequeue(String(v.config), String(v.reason)),
  },
  outbox: {
    summary: 'Broker outbox rows the relay parked (a destination refused them for good): outbox parked | outbox requeue.',
    usage: 'webhook-inbox outbox parked --config FILE [--limit N] [--json]\n       webhook-inbox outbox requeue --config FILE (--all | OUTBOX_ID…)\n\n' +
      '  parked   the parked rows, oldest first (default --limit 100, at most 1000): reason, last error,\n' +
      '           and the destinations that already have the message\n' +
      '  requeue  after fixing the cause: the given parked rows (or --all) are due now; the relay publishes\n' +
      '           them only to the destinations that do not have them yet. Exits 1 if an id given was not parked.',
    options: { ...CONFIG, limit: { type: 'string' }, json: { type: 'boolean' }, all: { type: 'boolean' } },
    optional: ['limit'],
    positionals: ['parked|requeue'],
    run: listAndRequeue({ command: 'outbox', list: 'parked', requeue: 'requeue', id: 'outbox', runList: async (...a) => (await import('./outbox.js')).runOutboxParked(...a), runRequeue: async (...a) => (await import('./outbox.js')).runOutboxRequeue(...a) }),
  },
  effects: {
    summary: 'Effects that ended FAILED (retries exhausted, no executor, needs decision): effects failed | effects retry.',
    usage: 'webhook-inbox effects failed --config FILE [--limit N] [--json]\n       webhook-inbox effects retry --config FILE (--all | EFFECT_ID…)\n\n' +
      '  failed  the FAILED effects, oldest first (default --limit 100, at most 1000): inbox id and name (the\n' +
      '          idempotency key is <inbox_id>:<name>; --json prints it), attempts, failure reason and last\n' +
      '          error. Never the effect\'s data (it may carry customer details).\n' +
      '  retry   after fixing the cause: the given FAILED effects (or --all) are PENDING again, due now, with a\n' +
      '          fresh attempt count. The executor runs again with the SAME idempotency key (<inbox_id>:<name>),\n' +
      '          so a downstream that did get the call can drop the repeat. Effects in any other status are left\n' +
      '          alone (a DONE one never runs again). Exits 1 if an id given was not a FAILED effect.',
    options: { ...CONFIG, limit: { type: 'string' }, json: { type: 'boolean' }, all: { type: 'boolean' } },
    optional: ['limit'],
    positionals: ['failed|retry'],
    run: listAndRequeue({ command: 'effects', list: 'failed', requeue: 'retry', id: 'effect', runList: async (...a) => (await import('./effects.js')).runEffectsFailed(...a), runRequeue: async (...a) => (await import('./effects.js')).runEffectsRetry(...a) }),
  },
  keys: {
    summary: 'Payload key rotation: keys list (payloads and effects per key) | keys reseal (seal old ones under the current key).',
    usage: 'webhook-inbox keys list --config FILE\n       webhook-inbox keys reseal --config FILE [--busy PERCENT] [--per-second N]\n\n' +
      '  list    stored payloads and effects per payload key id, and whether each key is current, old or missing\n' +
      '  reseal  seal every payload and effect under an older key again under payloadKeys.current (same bytes,\n' +
      '          same hash; safe while serve and work run), so the older key can be removed.\n' +
      '          Exits 1 if some payload is left under an older key (its key missing, it does not authenticate,\n' +
      '          or it was stored under an older key while this ran).\n' +
      '  --busy PERCENT  spend at most PERCENT % of the time resealing, waiting in between in proportion\n' +
      `                  to how long each small slice took, so a loaded database slows it down (default ${DEFAULT_BUSY_PERCENT}\n` +
      '                  unless --per-second is given; 100 = no waits, for a maintenance window)\n' +
      '  --per-second N  reseal at most N payloads a second (it competes with a running server)',
    options: { ...CONFIG, 'per-second': { type: 'string' }, busy: { type: 'string' } },
    optional: ['per-second', 'busy'],
    positionals: ['list|reseal'],
    run: async (v, args) => {
      noMoreThan(args, 1);
      if (args[0] === 'list') {
        onlyFor(v, ['per-second', 'busy'], 'keys reseal');
        return (await import('./keys.js')).runKeysList(String(v.config));
      }
      if (args[0] === 'reseal') {
        const perSecond = intOption(v['per-second'], 1, Infinity, '--per-second must be a positive integer');
        const busyPercent = intOption(v.busy, 1, 100, '--busy must be an integer percentage from 1 to 100');
        return (await import('./keys.js')).runKeysReseal(String(v.config), { perSecond, busyPercent: busyPercent ?? (perSecond ? undefined : DEFAULT_BUSY_PERCENT) });
      }
      throw new UsageError(`unknown keys subcommand "${args[0]}" (list or reseal)`);
    },
  },
};

/**
 * `COMMAND LIST [--limit N] [--json]` | `COMMAND REQUEUE (--all | ID…)`: rows an operator lists,
 * fixes the cause of, then sends back (parked outbox rows, FAILED effects).
 */
function listAndRequeue(o: {
  command: string; list: string; requeue: string; id: string;
  runList(config: string, opts: { limit: number; json: boolean }): Promise<number>;
  runRequeue(config: string, ids: readonly string[] | null): Promise<number>;
}): Command['run'] {
  const listCmd = `${o.command} ${o.list}`;
  return (v, args) => {
    if (args[0] === o.list) {
      noMoreThan(args, 1);
      onlyFor(v, ['all'], `${o.command} ${o.requeue}`);
      const limit = intOption(v.limit, 1, MAX_LIST_LIMIT, `--limit must be an integer from 1 to ${MAX_LIST_LIMIT}`) ?? 100;
      return o.runList(String(v.config), { limit, json: Boolean(v.json) });
    }
    if (args[0] !== o.requeue) throw new UsageError(`unknown ${o.command} subcommand "${args[0]}" (${o.list} or ${o.requeue})`);
    onlyFor(v, ['limit', 'json'], listCmd);
    const ids = [...new Set(args.slice(1).map((id) => id.toLowerCase()))];
    if (v.all ? ids.length > 0 : ids.length === 0) throw new UsageError(`${o.command} ${o.requeue} needs either --all or ${o.id.toUpperCase()}_IDs (as "${listCmd}" prints them)`);
    const bad = ids.find((id) => !INBOX_ID_RE.test(id));
    if (bad !== undefined) throw new UsageError(`"${bad}" is not an ${o.id} id (a UUID, as "${listCmd}" prints it)`);
    return o.runRequeue(String(v.config), v.all ? null : ids);
  };
}

/**
 * Options of another subcommand of the same command are a mistake to report, not to ignore
 * (`events show ID --status failed` showed the event whatever its status).
 */
function onlyFor(values: Record<string, unknown>, options: readonly string[], subcommand: string): void {
  const given = options.find((o) => values[o] !== undefined);
  if (given !== undefined) throw new UsageError(`--${given} is for ${subcommand}`);
}

/** A word past what the command takes is a mistake to report, not to ignore (`retry A B` retried only A). */
function noMoreThan(args: readonly string[], n: number): void {
  if (args.length > n) throw new UsageError(`unexpected argument "${args[n]}"`);
}

function topHelp(): string {
  const lines = Object.entries(COMMANDS).map(([name, c]) => `  ${name.padEnd(14)} ${c.summary}`);
  return `Usage: webhook-inbox <command> [options]\n\nCommands:\n${lines.join('\n')}\n\nRun "webhook-inbox <command> --help" for a command's options.\n` +
    'DATABASE_URL, when set, overrides the config\'s database. --version prints the version. Exit codes: 0 ok, 1 failure, 2 usage error, 78 config error.';
}

async function main(argv: string[]): Promise<number> {
  const [name, ...rest] = argv;
  if (name === 'help' && rest[0] !== undefined) {
    const c = COMMANDS[rest[0]];
    if (!c) {
      console.error(`webhook-inbox help: unknown command "${rest[0]}"\n\n${topHelp()}`);
      return 2;
    }
    console.log(`${c.summary}\n\nUsage: ${c.usage}`);
    return 0;
  }
  if (name === '--version' || name === '-V' || name === 'version') {
    // What a bug report needs first; it was "unknown command".
    const pkg = JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { version: string };
    console.log(pkg.version);
    return 0;
  }
  if (!name || name === '--help' || name === '-h' || name === 'help') {
    console.log(topHelp());
    return name ? 0 : 2;
  }
  const cmd = COMMANDS[name];
  if (!cmd) {
    console.error(`webhook-inbox: unknown command "${name}"\n\n${topHelp()}`);
    return 2;
  }
  let values: Record<string, string | boolean | undefined>;
  let args: string[];
  try {
    const parsed = parseArgs({ args: rest, options: { ...cmd.options, help: { type: 'boolean', short: 'h' } }, strict: true, allowPositionals: cmd.positionals !== undefined });
    values = parsed.values as typeof values;
    args = parsed.positionals;
  } catch (err) {
    console.error(`webhook-inbox ${name}: ${(err as Error).message}\n\nUsage: ${cmd.usage}`);
    return 2;
  }
  if (values.help) {
    console.log(`${cmd.summary}\n\nUsage: ${cmd.usage}`);
    return 0;
  }
  for (const [opt, spec] of Object.entries(cmd.options ?? {})) {
    // A blank value (`--config=$CONFIG` with CONFIG unset) is no value: missing, not a path "".
    const v = values[opt];
    if (spec.type !== 'string') continue;
    const blank = typeof v === 'string' && v.trim() === '';
    if ((v === undefined || blank) && !cmd.optional?.includes(opt)) {
      console.error(`webhook-inbox ${name}: --${opt} is required${v === undefined ? '' : ' (it was given empty)'}\n\nUsage: ${cmd.usage}`);
      return 2;
    }
    // An optional one given empty (`--handlers=$MODULE` with MODULE unset) was meant to say
    // something: running as if it were absent (no handlers, no filter) would hide the slip, and
    // an empty --host listened on every interface instead of the config's (127.0.0.1 by default).
    if (blank) {
      console.error(`webhook-inbox ${name}: --${opt} was given empty; leave it out or give it a value\n\nUsage: ${cmd.usage}`);
      return 2;
    }
  }
  if (cmd.positionals && args.length < cmd.positionals.length) {
    console.error(`webhook-inbox ${name}: ${cmd.positionals.join(' ')} is required\n\nUsage: ${cmd.usage}`);
    return 2;
  }
  try {
    return await cmd.run(values, args);
  } catch (err) {
    if (err instanceof UsageError) {
      console.error(`webhook-inbox ${name}: ${err.message}\n\nUsage: ${cmd.usage}`);
      return 2;
    }
    if (err instanceof ConfigError || err instanceof SecretUnavailableError) {
      console.error(`webhook-inbox ${name}: config error: ${err.message}`);
      return 78; // EX_CONFIG
    }
    if (err instanceof ListenError || err instanceof CommandError || err instanceof SchemaOutdatedError || err instanceof MigrationError || err instanceof HandlerError) {
      console.error(`webhook-inbox ${name}: ${err.message}`);
      return 1;
    }
    if (err instanceof StorageUnavailableError) {
      // The store's message names the store and, with its cause, the reason (the SQLite thread's
      // "cannot open …", the driver's "connect ECONNREFUSED …"); a stack would be ours, not the cause's.
      const cause = err.cause instanceof Error && !err.message.includes(err.cause.message) ? `: ${err.cause.message}` : '';
      console.error(`webhook-inbox ${name}: database unavailable: ${err.message}${cause}`);
      return 1;
    }
    const sqliteCode = (err as { code?: unknown }).code;
    if (typeof sqliteCode === 'string' && sqliteCode.startsWith('SQLITE_')) {
      // The database refused the statement (a file the operator may only read, a damaged file, a
      // full disk): its own words say why, as PostgreSQL's do (those arrive as StorageUnavailableError);
      // the stack would be the writer thread's reply path.
      console.error(`webhook-inbox ${name}: database error: SQLite: ${(err as Error).message} (${sqliteCode})`);
      return 1;
    }
    // The cause says why (the SQLite thread's "cannot open …"); the stack alone does not carry it.
    const cause = (err as Error).cause instanceof Error ? `\ncaused by: ${((err as Error).cause as Error).message}` : '';
    console.error(`webhook-inbox ${name}: ${(err as Error).stack ?? String(err)}${cause}`);
    return 1;
  }
}

/**
 * A reader that stops early closes the pipe (`events list --json | head -1`): the rest of the
 * output has nowhere to go, which is no failure of the command, so it runs to its end and exits
 * with its own code. Unheard, the EPIPE was an uncaught exception: a stack trace and exit 1,
 * midway through the command.
 */
for (const out of [process.stdout, process.stderr]) {
  out.on('error', (err: NodeJS.ErrnoException) => {
    if (err.code !== 'EPIPE') throw err;
  });
}

main(process.argv.slice(2)).then(
  (code) => {
    if (code !== -1) process.exitCode = code;
  },
  (err) => {
    console.error(err);
    process.exitCode = 1;
  },
);
