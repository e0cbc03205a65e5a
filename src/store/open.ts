import { PostgresStore } from './postgres/store.js';
import type { InboxStore } from './port.js';
import { SqliteStore } from './sqlite/store.js';

export interface OpenOptions {
  readonly queryTimeoutMs?: number;
  /** false: the engine's commits do not wait for the disk (workers.durableCommits); accepts always do. */
  readonly durableEngineCommits?: boolean;
}

/** Opens the store a `database` URL names: `sqlite:PATH` or `postgres://…`. */
export function openStore(url: string, opts: OpenOptions = {}): InboxStore {
  if (url.startsWith('sqlite:')) return SqliteStore.fromUrl(url, opts.durableEngineCommits ?? true);
  if (/^postgres(ql)?:\/\//.test(url)) return new PostgresStore(url, opts);
  throw new Error(`unsupported database URL (use sqlite:PATH or postgres://…)`);
}
