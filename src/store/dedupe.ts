import { logicalKey, type AcceptRecord, type AcceptResult } from './port.js';

/**
 * Copies of one logical event inside a batch go to the store once; the others share the
 * first copy's row and are answered as duplicates. The store still enforces uniqueness
 * against rows from earlier batches and other processes.
 */
export async function acceptUnique(
  records: readonly AcceptRecord[],
  insertUnique: (unique: AcceptRecord[]) => Promise<AcceptResult[]>,
): Promise<AcceptResult[]> {
  const firstIndex = new Map<string, number>();
  const unique: AcceptRecord[] = [];
  const slot: number[] = [];
  for (const r of records) {
    // Notices for one resource collapse like copies of one event (the store coalesces across batches).
    const k = r.coalesceKey === undefined ? logicalKey(r) : `notice\0${r.provider}\0${r.endpointId}\0${r.coalesceKey}`;
    let u = firstIndex.get(k);
    if (u === undefined) {
      u = unique.length;
      firstIndex.set(k, u);
      unique.push(r);
    }
    slot.push(u);
  }
  const results = await insertUnique(unique);
  const seen = new Set<number>();
  return slot.map((u) => {
    const r = results[u]!;
    if (seen.has(u)) return { inboxId: r.inboxId, duplicate: true };
    seen.add(u);
    return r;
  });
}
