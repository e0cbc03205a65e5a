import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pino from 'pino';
import { afterEach, describe, expect, it } from 'vitest';
import { stringify } from 'yaml';
import { createInbox, HandlerError, HandlerRegistry, parseConfig, startApp, startWorkers, type Config } from '../../src/index.js';
import { configDoc, STRIPE_SECRET } from '../helpers/app.js';
import { runCli } from '../helpers/server-process.js';

/**
 * A handler registered with options.endpoint naming no endpoint of the config (a typo, another
 * deployment's id) never ran: every event meant for it ended FAILED unsupported_type. So did one
 * whose endpoint is of another provider than its options.provider, and one registered after
 * start (the workers had claimed events meanwhile). Each is now refused, before anything opens.
 */
const quiet = { logger: pino({ level: 'silent' }), env: {} };
const fn = () => undefined;

describe('library: handler registrations that could never run', () => {
  let dir: string;
  let close: (() => Promise<void>) | undefined;
  afterEach(async () => {
    await close?.();
    close = undefined;
    rmSync(dir, { recursive: true, force: true });
  });

  function config(): { config: Config; db: string } {
    dir = mkdtempSync(join(tmpdir(), 'wi-handler-reg-'));
    const db = join(dir, 'inbox.db');
    const doc = configDoc(`sqlite:${db}`, {
      endpoints: [
        { id: 'stripe-live', provider: 'stripe', secrets: [{ version: 'v1', value: STRIPE_SECRET }] },
        { id: 'gh', provider: 'github', secrets: [{ version: 'v1', value: 'gh-secret' }] },
      ],
    });
    return { config: parseConfig(doc, {}), db };
  }

  it.each(['startApp', 'startWorkers'] as const)('%s refuses options.endpoint naming no configured endpoint, naming it and the endpoints, before opening the store', async (start) => {
    const { config: c, db } = config();
    const handlers = new HandlerRegistry().on('charge.refunded', fn, { endpoint: 'stripe-lve' });
    const err = await (start === 'startApp' ? startApp(c, { ...quiet, handlers }) : startWorkers(c, { ...quiet, handlers })).then(() => null, (e: unknown) => e);
    expect(err).toBeInstanceOf(HandlerError);
    expect((err as Error).message).toBe('handler "charge.refunded": option endpoint "stripe-lve" is not an endpoint of this config, so the handler would never run (endpoints: stripe-live, gh)');
    expect(existsSync(db)).toBe(false);
  });

  it('refuses an endpoint of another provider than options.provider', async () => {
    const { config: c } = config();
    const handlers = new HandlerRegistry().on('*', fn, { name: 'refunds', provider: 'stripe', endpoint: 'gh' });
    await expect(startApp(c, { ...quiet, handlers })).rejects.toThrow('handler "refunds": option endpoint "gh" is a github endpoint, not stripe, so the handler would never run');
  });

  it('takes a configured endpoint (with its provider), and then refuses on() and effect() after start', async () => {
    const { config: c } = config();
    const inbox = createInbox(c).on('charge.refunded', fn, { provider: 'stripe', endpoint: 'stripe-live' });
    const app = await inbox.start({ ...quiet, workers: false });
    close = () => app.close();
    expect(() => inbox.on('payment_intent.succeeded', fn)).toThrow(HandlerError);
    expect(() => inbox.on('payment_intent.succeeded', fn)).toThrow('handler "payment_intent.succeeded" registered after start: register every handler and effect executor before start()');
    expect(() => inbox.effect('notify', fn)).toThrow('effect executor "notify" registered after start');
    expect(inbox.size).toBe(1);
  });
});

describe('CLI: a --handlers module whose handler names no configured endpoint', () => {
  it.each(['serve', 'work'])('%s exits 1 with one line naming the handler and the endpoint', async (cmd) => {
    const dir = mkdtempSync(join(tmpdir(), 'wi-handler-cli-'));
    try {
      const file = join(dir, 'inbox.yaml');
      writeFileSync(file, stringify(configDoc(`sqlite:${join(dir, 'inbox.db')}`)));
      const module = join(dir, 'handlers.mjs');
      writeFileSync(module, `export default (inbox) => { inbox.on('charge.*', () => undefined, { name: 'refunds', endpoint: 'stripe-live' }); };\n`);
      const r = await runCli([cmd, '--config', file, '--handlers', module], 20_000);
      expect(r.code, r.err).toBe(1);
      expect(r.err.trim()).toBe(`webhook-inbox ${cmd}: handler "refunds": option endpoint "stripe-live" is not an endpoint of this config, so the handler would never run (endpoints: stripe)`);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
