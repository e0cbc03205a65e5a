import { execFile } from 'node:child_process';
import { describe, expect, it } from 'vitest';

/**
 * `npm run bench` with a bad option stops before it starts anything: one line on stderr naming
 * the option, exit status 2. (A run takes ~16 min and rewrites bench/RESULTS.md: a typo must not
 * start one with NaN in it.) Every case also says --no-write --no-memory --only plain, so that if
 * validation ever let one through, the run would be short and write nothing (and time out here).
 */
function bench(...argv: string[]): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    execFile(process.execPath, ['--import', 'tsx', 'bench/run.ts', '--no-write', '--no-memory', '--only', 'plain', ...argv], { timeout: 30_000 }, (err, stdout, stderr) => {
      resolve({ code: err ? ((err as { code?: number }).code ?? null) : 0, stdout, stderr });
    });
  });
}

describe('bench options', () => {
  it.each([
    [['--rates', '2000,abc'], '--rates 2000,abc: "abc" is not a positive rate'],
    [['--rates', '2000,,3000'], '--rates 2000,,3000: "" is not a positive rate'],
    [['--rates=-5'], '--rates -5: "-5" is not a positive rate'],
    [['--seed', 'abc'], '--seed abc: not a number'],
    [['--server-config', '{"groupCommit":'], '--server-config: not JSON'],
    [['--workers', '[1]'], '--workers: not a JSON object'],
    [['--stores', 'mysql'], '--stores: unknown store "mysql"'],
    [['--bogus'], "Unknown option '--bogus'"],
  ])('%j is refused before anything runs', async (argv, message) => {
    const r = await bench(...argv);
    expect(r.code).toBe(2);
    expect(r.stdout).toBe('');
    const lines = r.stderr.trim().split('\n');
    expect(lines).toHaveLength(1);
    expect(lines[0]).toContain(`bench: ${message}`);
  }, 40_000);
});
