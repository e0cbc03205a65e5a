/**
 * `keys reseal` throughput: N bench events (the ladder's sizes, no 1 MiB ones) sealed under an old
 * payload key through the store API, then every one sealed again under a new current key by the
 * same code the CLI runs (resealAll), timed; then checked: every payload under the new key, and
 * a sample opened with the new key alone.
 *
 *   node --import tsx bench/reseal.ts sqlite|postgres [events]
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { resealAll } from '../src/cli/keys.js';
import { PayloadCipher } from '../src/crypto/payload-cipher.js';
import { openStore } from '../src/store/open.js';
import { dropDb, recreateDb } from './databases.js';
import { DEFAULT_SIZES } from './events.js';
import { seedEvents } from './records.js';

const kind = process.argv[2];
const n = Number(process.argv[3] ?? 20_000);
if (kind !== 'sqlite' && kind !== 'postgres') throw new Error('usage: bench/reseal.ts sqlite|postgres [events]');

const OLD = Buffer.alloc(32, 1);
const NEW = Buffer.alloc(32, 2);
const dir = mkdtempSync(join(tmpdir(), 'wi-reseal-'));
const url = kind === 'sqlite' ? `sqlite:${join(dir, 'inbox.db')}` : await recreateDb('wi_bench_reseal');
const store = openStore(url);
try {
  await store.migrate();
  const old = new PayloadCipher(new Map([['old', OLD]]), 'old');
  const bytes = await seedEvents(store, old, n, 'reseal', DEFAULT_SIZES, 7);
  const rotated = new PayloadCipher(new Map([['old', OLD], ['new', NEW]]), 'new');
  const cpu0 = process.cpuUsage();
  const t0 = performance.now();
  const tally = await resealAll(store, rotated);
  const s = (performance.now() - t0) / 1000;
  const cpu = process.cpuUsage(cpu0);
  const usage = await store.payloadKeyUsage();
  if (tally.resealed !== n || usage.length !== 1 || usage[0]!.keyId !== 'new') throw new Error(`not all resealed: ${JSON.stringify({ tally, usage })}`);
  const onlyNew = new PayloadCipher(new Map([['new', NEW]]), 'new');
  for (const id of (await store.listInboxIds()).slice(0, 200)) {
    const row = (await store.getInbox(id))!;
    onlyNew.open((await store.getPayload(row.rawPayloadRef!))!, row);
  }
  console.log(`${kind}: resealed ${n} payloads (mean body ${Math.round(bytes / n)} B) in ${s.toFixed(2)} s = ${Math.round(n / s)}/s; ` +
    `this process's CPU ${Math.round((cpu.user + cpu.system) / 1000 / s / 10)} % of a core`);
} finally {
  await store.close();
  rmSync(dir, { recursive: true, force: true });
  if (kind === 'postgres') await dropDb('wi_bench_reseal');
}
