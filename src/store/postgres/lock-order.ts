/**
 * `items` in row-lock order: by `key`, compared as strings (code-unit order), each key computed
 * once. Every statement that locks several rows takes them in one fixed order per table, so two
 * concurrent statements over the same rows queue behind each other instead of deadlocking
 * (40P01): the accept by logical key, the settle by inbox_id (as EXTEND_INBOX_LEASES locks).
 */
export function inLockOrder<T>(items: readonly T[], key: (item: T) => string): T[] {
  return items.map((item) => ({ k: key(item), item }))
    .sort((a, b) => (a.k < b.k ? -1 : a.k > b.k ? 1 : 0))
    .map((x) => x.item);
}
