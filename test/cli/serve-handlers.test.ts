import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { configDoc } from '../helpers/app.js';
import { spawnServer } from '../helpers/server-process.js';

/**
 * `serve --handlers MODULE` with a config that says workers.enabled: false: no worker runs in
 * that process, so its handlers never run. It imported the module and served on, the option
 * silently ignored (the operator meant `work --handlers`, or workers on). It still starts (one
 * command line for both modes, as the bench's own "workers off" scenario uses), but says so.
 */
describe('serve --handlers with workers.enabled: false', () => {
  const dir = mkdtempSync(join(tmpdir(), 'wi-serve-handlers-'));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it('starts and warns on stderr, naming --handlers and workers.enabled', async () => {
    const handlers = join(dir, 'handlers.mjs');
    writeFileSync(handlers, "export default (inbox) => { inbox.on('payment_intent.succeeded', () => undefined); };\n");
    const server = await spawnServer(join(dir, 'serve.yaml'), configDoc(`sqlite:${join(dir, 'serve.db')}`, { workers: { enabled: false } }), {}, ['--handlers', handlers]);
    try {
      expect(server.stderr()).toMatch(/warning: --handlers has no effect: the config says workers\.enabled: false/);
      expect(server.stderr()).toContain('workers off');
    } finally {
      server.child.kill('SIGKILL');
    }
  });

  it('the other way round, workers on and no --handlers: starts and warns that the events it claims without a route fail here', async () => {
    const server = await spawnServer(join(dir, 'bare.yaml'), configDoc(`sqlite:${join(dir, 'bare.db')}`));
    try {
      expect(server.stderr()).toMatch(/warning: workers are on and no --handlers module was given: an event this process claims that no route takes ends FAILED unsupported_type/);
      expect(server.stderr()).toContain('workers on, 0 handler(s)');
    } finally {
      server.child.kill('SIGKILL');
    }
  });

  it('with workers on and --handlers, no warning', async () => {
    const handlers = join(dir, 'on.mjs');
    writeFileSync(handlers, "export default (inbox) => { inbox.on('payment_intent.succeeded', () => undefined); };\n");
    const server = await spawnServer(join(dir, 'on.yaml'), configDoc(`sqlite:${join(dir, 'on.db')}`), {}, ['--handlers', handlers]);
    try {
      expect(server.stderr()).not.toContain('warning');
    } finally {
      server.child.kill('SIGKILL');
    }
  });
});
