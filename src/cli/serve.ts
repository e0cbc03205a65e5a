import type { AddressInfo } from 'node:net';
import { startApp, type RunningApp } from '../app.js';
import { loadConfigFile } from '../config/load.js';
import { databaseName } from './database-name.js';
import { loadHandlers } from './handlers-module.js';
import { exitAfterStop, reloadOnHangup, untilStopSignal } from './signals.js';
import { tuneV8 } from './v8-tuning.js';

/** Runs until SIGINT/SIGTERM; then stops accepting, finishes in-flight commits, and exits. */
export interface ServeOptions {
  readonly migrate: boolean;
  readonly demo: boolean;
  readonly handlers?: string;
  readonly host?: string;
  readonly port?: number;
  /** --metrics-port; with it, /metrics and /readyz move off the webhook port to --metrics-host (default: the webhook host). */
  readonly metricsPort?: number;
  readonly metricsHost?: string;
}

export async function runServe(configFile: string, opts: ServeOptions): Promise<number> {
  tuneV8();
  // Logs 'secrets reloaded' with what is still missing (keepSecretsCurrent).
  const started = reloadOnHangup<RunningApp>((a) => void a.reloadSecrets());
  const loaded = loadConfigFile(configFile);
  // No worker runs here then, so the handlers never run: said, not silently ignored. A warning,
  // not a refusal: one command line for both modes (the config toggles workers) must still start.
  if (opts.handlers !== undefined && !loaded.workers.enabled) {
    process.stderr.write(`webhook-inbox serve: warning: --handlers has no effect: the config says workers.enabled: false, so no handler runs in serve (give --handlers to "webhook-inbox work")\n`);
  }
  const listen = { host: opts.host ?? loaded.listen.host, port: opts.port ?? loaded.listen.port };
  const config = { ...loaded, listen };
  const handlers = await loadHandlers(opts.handlers);
  const metricsListen = opts.metricsPort === undefined ? undefined : { host: opts.metricsHost ?? listen.host, port: opts.metricsPort };
  const app = await startApp(config, { migrate: opts.migrate, handlers, metricsListen });
  started(app);
  // The other way round (said once started, not before a failed start's one line): its workers
  // claim events like any other, and one that none of its routes takes ends FAILED
  // unsupported_type here, though a "work --handlers" beside it has a handler.
  if (opts.handlers === undefined && config.workers.enabled) {
    process.stderr.write(`webhook-inbox serve: warning: workers are on and no --handlers module was given: an event this process claims that no route takes ends FAILED unsupported_type. If "webhook-inbox work --handlers" runs beside it, give serve the same --handlers, or set workers.enabled: false\n`);
  }
  // send-sample reads listen from the config: tell it the URL when that is not where we listen
  // (--host/--port, or port 0, which listens on a port the config does not name).
  const moved = listen.host !== loaded.listen.host || (app.server.address() as AddressInfo).port !== loaded.listen.port;
  const workers = config.workers.enabled ? `workers on, ${handlers.size} handler(s)` : 'workers off';
  const lines = [`webhook-inbox listening on ${app.url} (${databaseName(config.database)}, ${workers})`];
  config.endpoints.forEach((ep, i) => lines.push(`  POST ${app.url}/webhooks/${ep.id}   (${ep.provider})${offline(app, config.payloadKeys.current, ep.id, i)}`));
  const ops = app.metricsUrl ?? app.url;
  lines.push(`  GET  ${ops}/metrics  ${ops}/healthz  ${ops}/readyz${app.metricsUrl ? `  (and ${app.url}/healthz)` : ''}`);
  if (opts.demo) {
    const first = config.endpoints[0]!;
    lines.push('', 'Send a correctly signed sample event (in another terminal):',
      `  npx webhook-inbox send-sample --config ${shellWord(configFile)} --endpoint ${shellWord(first.id)}${moved ? ` --url ${app.url}` : ''}`);
  }
  // The stop signals are listened for before the line that says we are up: a supervisor (or a
  // test) that signals on reading it found no listener yet when this process was descheduled
  // right after the write, and the signal's default action killed it, skipping the graceful close.
  const stop = untilStopSignal();
  console.error(lines.join('\n'));

  await stop;
  console.error('webhook-inbox: shutting down (finishing in-flight requests)');
  try {
    await app.close();
  } finally {
    exitAfterStop();
  }
  return 0;
}

/**
 * `word` as one POSIX shell word: the sample command is printed to be pasted as is, and a config
 * path with a space or a quote in it (a "My Projects" folder) came apart into several arguments.
 */
function shellWord(word: string): string {
  return /^[\w./:@%+=,-]+$/.test(word) ? word : `'${word.replaceAll("'", `'\\''`)}'`;
}

/**
 * An endpoint whose secrets (or the current payload key) did not load answers 503 until they do:
 * said on its own line of the list, with the config paths, since the error log line before the
 * migrations was easy to miss and the first request's 503 then came with nothing on screen.
 */
function offline(app: RunningApp, currentKey: string, endpointId: string, index: number): string {
  if (app.keyring.keysFor(endpointId) && app.keyring.cipher) return '';
  const mine = (p: string) => p.startsWith(`endpoints[${index}].`) || (!app.keyring.cipher && p.startsWith(`payloadKeys.keys.${currentKey}:`));
  const paths = app.keyring.problems.filter(mine).map((p) => p.slice(0, p.indexOf(': ')));
  return `   offline: 503 secrets_unavailable until ${paths.length > 0 ? paths.join(', ') : 'its secrets'} load${paths.length === 1 ? 's' : ''}`;
}
