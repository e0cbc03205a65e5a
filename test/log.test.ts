import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it, vi } from 'vitest';

/** The module afresh: its one flush timer is module state, made under whichever timers a test has. */
async function freshLogModule(): Promise<typeof import('../src/log.js')> {
  vi.resetModules();
  return import('../src/log.js');
}

describe('the default logger (createLogger)', () => {
  const dir = mkdtempSync(join(tmpdir(), 'wi-log-'));
  afterEach(() => {
    vi.useRealTimers();
  });

  // Each logger started a 250 ms flush timer that nothing ever stopped: a library caller that
  // starts and closes apps (a test suite, a supervisor retrying a start) gathered one per app.
  it('one flush timer serves every logger, however many are made', async () => {
    vi.useFakeTimers({ toFake: ['setInterval', 'clearInterval'] });
    const { createLogger } = await freshLogModule();
    for (let i = 0; i < 3; i++) createLogger('info', join(dir, `fake-${i}.log`));
    expect(vi.getTimerCount()).toBe(1);
  });

  it('a line at a quiet moment is written within the flush interval, without more traffic or an exit', async () => {
    const { createLogger } = await freshLogModule();
    const file = join(dir, 'quiet.log');
    const log = createLogger('info', file);
    log.info({ endpoint: 'stripe' }, 'one line');
    let text = '';
    for (let i = 0; i < 40 && !text.includes('one line'); i++) {
      await new Promise((r) => setTimeout(r, 50));
      try {
        text = readFileSync(file, 'utf8');
      } catch {
        // not created yet
      }
    }
    expect(JSON.parse(text.trim())).toMatchObject({ level: 'info', endpoint: 'stripe', msg: 'one line' });
    rmSync(dir, { recursive: true, force: true });
  });
});
