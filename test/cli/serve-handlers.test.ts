import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { stringify } from 'yaml';
import { configDoc } from '../helpers/app.js';
import { runCli } from '../helpers/server-process.js';

/**
 * `serve --handlers MODULE` with a config that says workers.enabled: false: no worker runs in
 * that process, so its handlers never run. It imported the module and served on, the option
 * silently ignored (the operator meant `work --handlers`, or workers on): a usage error now.
 */
describe('serve --handlers with workers.enabled: false', () => {
  const dir = mkdtempSync(join(tmpdir(), 'wi-serve-handlers-'));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it('is a usage error (2) naming --handlers and workers.enabled, before it listens', async () => {
    const handlers = join(dir, 'handlers.mjs');
    writeFileSync(handlers, "export default (inbox) => { inbox.on('payment_intent.succeeded', () => undefined); };\n");
    const config = join(dir, 'serve.yaml');
    writeFileSync(config, stringify(configDoc(`sqlite:${join(dir, 'serve.db')}`, { workers: { enabled: false } })));
    const r = await runCli(['serve', '--config', config, '--handlers', handlers], 15_000);
    expect(r.err).not.toContain('listening on');
    expect(r.code).toBe(2);
    expect(r.err).toContain('--handlers');
    expect(r.err).toContain('workers.enabled');
  });
});
