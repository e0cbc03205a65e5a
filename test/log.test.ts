import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { LOG_BUFFER_MAX_BYTES } from '../src/log.js';

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

describe('a stdout nobody reads', () => {
  it('past the 16 MiB buffer, lines are dropped and counted, not held until the process runs out of memory; the count is logged once stdout takes lines again', async () => {
    const lines = 100_000; // ~40 MiB of log lines
    const child = spawn(process.execPath, ['--import', 'tsx', 'test/fixtures/log-flood.ts', String(lines)], { stdio: ['ignore', 'pipe', 'pipe'] });
    try {
      child.stdout.pause(); // the pipe fills, then the logger's own buffer
      await new Promise<void>((resolve, reject) => {
        let err = '';
        child.stderr.on('data', (d: Buffer) => { err += d; if (err.includes('written')) resolve(); });
        child.on('exit', (code) => reject(new Error(`exited ${code}: ${err}`)));
      });
      // Only the unfinished last line is carried to the next chunk's search: searching all that
      // was read at every chunk (~16 MiB, in 64 KiB chunks) made the reading itself take seconds.
      const chunks: string[] = [];
      let tail = '';
      child.stdout.setEncoding('utf8');
      const report = await new Promise<{ droppedLines: number }>((resolve) => {
        child.stdout.on('data', (d: string) => {
          chunks.push(d);
          const text = tail + d;
          const m = /\{[^\n]*"droppedLines"[^\n]*\}\n/.exec(text);
          if (m) resolve(JSON.parse(m[0]));
          tail = text.slice(text.lastIndexOf('\n') + 1);
        });
        child.stdout.resume();
      });
      const received = chunks.join('').split('\n').filter((l) => l.includes('"msg":"flood"'));
      expect(report).toMatchObject({ level: 'warn', droppedLines: lines - received.length });
      expect(report.droppedLines).toBeGreaterThan(0);
      // What was kept fits the cap (plus what the pipe and the reader held before it filled).
      expect(received.join('\n').length).toBeLessThan(LOG_BUFFER_MAX_BYTES + 1024 * 1024);
    } finally {
      child.kill('SIGKILL');
    }
  }, 30_000);
});
