import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { stringify } from 'yaml';
import { configDoc } from '../helpers/app.js';
import { runCli } from '../helpers/server-process.js';

/**
 * `--handlers MODULE` naming a module whose default export is not the registering function (a
 * named export only, or an object) is a bad argument, as a missing module is: a usage error (2)
 * naming it, not an Error stack trace from loadHandlers and exit 1.
 */
describe('--handlers MODULE without a default export function', () => {
  const dir = mkdtempSync(join(tmpdir(), 'wi-handlers-module-'));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it.each(['serve', 'work'])('%s: a usage error (2) naming the module, no stack trace', async (cmd) => {
    const module = join(dir, `named-only-${cmd}.mjs`);
    writeFileSync(module, 'export function register(inbox) { inbox.on("payment_intent.succeeded", () => undefined); }\n');
    const config = join(dir, `${cmd}.yaml`);
    writeFileSync(config, stringify(configDoc(`sqlite:${join(dir, `${cmd}.db`)}`)));
    const r = await runCli([cmd, '--config', config, '--handlers', module], 20_000);
    expect(r.err).not.toMatch(/\n\s+at /);
    expect(r.code).toBe(2);
    expect(r.err).toContain(`named-only-${cmd}.mjs`);
    expect(r.err).toContain('default export');
  });
});
