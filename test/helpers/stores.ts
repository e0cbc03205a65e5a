import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe } from 'vitest';
import { createTestDatabase, pgAvailable, PG_REQUIRED } from './pg.js';
import type { WorkStore } from '../../src/store/work-port.js';

/** A fresh, empty database URL of one kind, and how to clean it up. */
export interface TestDatabase {
  readonly kind: 'sqlite' | 'postgres';
  readonly url: string;
  cleanup(): Promise<void>;
}

export async function freshDatabase(kind: 'sqlite' | 'postgres'): Promise<TestDatabase> {
  if (kind === 'sqlite') {
    const dir = mkdtempSync(join(tmpdir(), 'wi-test-'));
    return { kind, url: `sqlite:${join(dir, 'inbox.db')}`, cleanup: async () => rmSync(dir, { recursive: true, force: true }) };
  }
  const db = await createTestDatabase();
  return { kind, url: db.url, cleanup: () => db.drop() };
}

const pgUp = await pgAvailable();
if (!pgUp) {
  if (PG_REQUIRED) throw new Error('WEBHOOK_INBOX_REQUIRE_PG=1 but PostgreSQL at 127.0.0.1:5432 is unreachable: the PostgreSQL suite must not be skipped');
  console.warn('[webhook-inbox tests] PostgreSQL is unreachable: the PostgreSQL suite is SKIPPED (SQLite suite still runs)');
}

/**
 * Runs the same contract suite on every store: SQLite always, PostgreSQL when reachable
 * (and always in CI, where WEBHOOK_INBOX_REQUIRE_PG=1 turns "unreachable" into a failure).
 */
export function describeEachStore(name: string, fn: (kind: 'sqlite' | 'postgres') => void): void {
  describe(`${name} [sqlite]`, () => fn('sqlite'));
  (pgUp ? describe : describe.skip)(`${name} [postgres]`, () => fn('postgres'));
}

/**
 * Opens a handler transaction (on SQLite, BEGIN IMMEDIATE on the one writer thread) and keeps it
 * open until `release()`; resolves once it has begun. `ended` settles when the transaction does.
 */
export async function holdInTransaction(store: Pick<WorkStore, 'transaction'>): Promise<{ release(): void; ended: Promise<void> }> {
  let release!: () => void;
  const held = new Promise<void>((resolve) => (release = resolve));
  let begun!: () => void;
  const isBegun = new Promise<void>((resolve) => (begun = resolve));
  const ended = store.transaction(async (t) => {
    await t.begin();
    begun();
    await held;
  });
  // Should it fail before it begins, that failure is the caller's answer.
  await Promise.race([isBegun, ended]);
  return { release, ended };
}
