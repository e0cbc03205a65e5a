import { describe, expect, it } from 'vitest';
import { sqliteFsLine } from '../../bench/sys.js';

describe('bench machine description', () => {
  it('says when the SQLite files sit on a RAM filesystem, where fsync reaches no disk', () => {
    expect(sqliteFsLine('/dev/shm')).toMatch(/^tmpfs .*NOT durable/);
    expect(sqliteFsLine(process.cwd())).not.toMatch(/NOT durable/);
  });
});
