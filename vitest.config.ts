import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    pool: 'forks',
    // Three test files at once on the 2-core machines: the suite mostly waits (real timeouts,
    // leases, child processes, the databases), and two files at a time kept under one core busy
    // (2026-12-07, fast-memory AMD EPYC: 2 workers 444 s wall for 406 s of CPU; 3 workers 369 s;
    // 4 workers 327 s, every test passing in each; 3 workers beside a busy loop that held one of
    // the two cores: all passing, 456 s). Three, not four: on the slow machines a test costs ~1.5x
    // the CPU, and the timing-bound tests need a core when their moment comes.
    maxWorkers: 3,
    testTimeout: 60_000,
    hookTimeout: 60_000,
    reporters: ['default'],
  },
});
