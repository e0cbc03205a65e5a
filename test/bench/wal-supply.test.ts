import { describe, expect, it } from 'vitest';
import { ensureWalSupply, pgAdmin, walState } from '../../bench/databases.js';
import { pgAvailable, PG_ADMIN_URL } from '../helpers/pg.js';

// The bench tops up PostgreSQL's free WAL segment files before each step that writes to it, so a
// step does not stall on the creation of one (bench/README.md, Targets).
describe.runIf(await pgAvailable())('bench WAL top-up [postgres]', () => {
  it('leaves at least the asked-for bytes of WAL segment files ahead of the insert position', async () => {
    const before = await pgAdmin((c) => walState(c), PG_ADMIN_URL);
    // More than is free now (64 MiB = 4 segment files), so the top-up must write and recycle. But
    // past max_wal_size / 1.9 of WAL PostgreSQL checkpoints by itself and reuses what it wrote, so
    // no top-up gets further than about that: after bench runs (the free files already there)
    // this asks for what is free, and on a server with fewer (a fresh one) for 4 files more.
    const target = Math.min(before.aheadBytes + 64 * 2 ** 20, Math.max(before.aheadBytes, before.maxWalBytes / 2 - 32 * 2 ** 20));
    const r = await ensureWalSupply(target, PG_ADMIN_URL);
    expect(r).toBeDefined();
    expect(r!.aheadAfter).toBeGreaterThanOrEqual(target);
    const after = await pgAdmin((c) => walState(c), PG_ADMIN_URL);
    expect(after.aheadBytes).toBeGreaterThanOrEqual(target);
    expect(after.files).toBeGreaterThan(after.aheadBytes / (16 * 2 ** 20));
  });
});
