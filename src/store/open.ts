import { PostgresStore } from './postgres/store.js';
import type { InboxStore } from './port.js';
import { SqliteStore } from './sqlite/store.js';

/** Opens the store a `database` URL names: `sqlite:PATH` or `postgres://…`. */
export function openStore(url: string, opts: { queryTimeoutMs?: number } = {}): InboxStore {
  if (url.startsWith('sqlite:')) return SqliteStore.fromUrl(url);
  if (/^postgres(ql)?:\/\//.test(url)) return new PostgresStore(url, opts);
  throw new Error(`unsupported database URL (use sqlite:PATH or postgres://…)`);
}
