#!/usr/bin/env node
import { parseArgs } from 'node:util';
import { ConfigError } from '../errors.js';
import { SecretUnavailableError } from '../config/secrets.js';
import { runServe } from './serve.js';
import { runMigrate } from './migrate.js';
import { runCheckConfig } from './check-config.js';
import { runSendSample } from './send-sample.js';

interface Command {
  readonly summary: string;
  readonly usage: string;
  readonly options: NonNullable<Parameters<typeof parseArgs>[0]>['options'];
  run(values: Record<string, string | boolean | undefined>): Promise<number>;
}

const CONFIG = { config: { type: 'string', short: 'c' } } as const;

const COMMANDS: Record<string, Command> = {
  serve: {
    summary: 'Run the webhook receiver (migrates first unless --no-migrate).',
    usage: 'webhook-inbox serve --config FILE [--no-migrate] [--demo]\n\n  --config, -c FILE  YAML or JSON config (DATABASE_URL overrides `database`)\n  --no-migrate       do not apply pending migrations at start\n  --demo             also print a ready-to-run command that sends a signed sample event',
    options: { ...CONFIG, 'no-migrate': { type: 'boolean' }, demo: { type: 'boolean' } },
    run: (v) => runServe(String(v.config), { migrate: !v['no-migrate'], demo: Boolean(v.demo) }),
  },
  migrate: {
    summary: 'Apply pending database migrations and exit.',
    usage: 'webhook-inbox migrate --config FILE\n\n  --config, -c FILE  YAML or JSON config (DATABASE_URL overrides `database`)',
    options: CONFIG,
    run: (v) => runMigrate(String(v.config)),
  },
  'check-config': {
    summary: 'Validate a config file and resolve every secret reference (values are never printed).',
    usage: 'webhook-inbox check-config --config FILE\n\n  --config, -c FILE  YAML or JSON config',
    options: CONFIG,
    run: (v) => runCheckConfig(String(v.config)),
  },
  'send-sample': {
    summary: "Send one correctly signed sample event to a running server's endpoint.",
    usage: 'webhook-inbox send-sample --config FILE --endpoint ID [--url BASE]\n\n  --config, -c FILE  the config the server runs with (for the endpoint secret)\n  --endpoint, -e ID  endpoint id\n  --url BASE         server base URL (default: from listen)',
    options: { ...CONFIG, endpoint: { type: 'string', short: 'e' }, url: { type: 'string' } },
    run: (v) => runSendSample(String(v.config), String(v.endpoint), v.url as string | undefined),
  },
};

function topHelp(): string {
  const lines = Object.entries(COMMANDS).map(([name, c]) => `  ${name.padEnd(14)} ${c.summary}`);
  return `Usage: webhook-inbox <command> [options]\n\nCommands:\n${lines.join('\n')}\n\nRun "webhook-inbox <command> --help" for a command's options.`;
}

async function main(argv: string[]): Promise<number> {
  const [name, ...rest] = argv;
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
  try {
    values = parseArgs({ args: rest, options: { ...cmd.options, help: { type: 'boolean', short: 'h' } }, strict: true }).values as typeof values;
  } catch (err) {
    console.error(`webhook-inbox ${name}: ${(err as Error).message}\n\nUsage: ${cmd.usage}`);
    return 2;
  }
  if (values.help) {
    console.log(`${cmd.summary}\n\nUsage: ${cmd.usage}`);
    return 0;
  }
  for (const [opt, spec] of Object.entries(cmd.options ?? {})) {
    if (spec.type === 'string' && values[opt] === undefined && opt !== 'url') {
      console.error(`webhook-inbox ${name}: --${opt} is required\n\nUsage: ${cmd.usage}`);
      return 2;
    }
  }
  try {
    return await cmd.run(values);
  } catch (err) {
    if (err instanceof ConfigError || err instanceof SecretUnavailableError) {
      console.error(`webhook-inbox ${name}: config error: ${err.message}`);
      return 78; // EX_CONFIG
    }
    console.error(`webhook-inbox ${name}: ${(err as Error).stack ?? String(err)}`);
    return 1;
  }
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
