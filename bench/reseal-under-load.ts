/**
 * What `keys reseal` costs a running server: a `serve` (dist/, workers off) on a database holding
 * N payloads under an old key takes the bench's open-loop load (bench/loadgen.ts, the ladder's
 * events) at RATE req/s twice — alone, then with the shipped `keys reseal` running beside it —
 * and the ack latency of both windows is printed. Run after `npm run build`.
 *
 *   node --import tsx bench/reseal-under-load.ts sqlite|postgres [events] [rate] [seconds] [keys reseal flags…, e.g. --busy 50]
 */
import { spawn } from 'node:child_process';
import { rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { PayloadCipher } from '../src/crypto/payload-cipher.js';
import { openStore } from '../src/store/open.js';
import { killAll, launch, RUN_DIR } from './children.js';
import { dropDb, recreateDb } from './databases.js';
import { DEFAULT_SIZES } from './events.js';
import { buildChildren, ROOT, runLoad } from './load.js';
import type { RateResult } from './loadgen.js';
import { seedEvents } from './records.js';

const kind = process.argv[2];
const n = Number(process.argv[3] ?? 50_000);
const rate = Number(process.argv[4] ?? 1000);
const seconds = Number(process.argv[5] ?? 10);
const flags = process.argv.slice(6);
if (kind !== 'sqlite' && kind !== 'postgres') throw new Error('usage: bench/reseal-under-load.ts sqlite|postgres [events] [rate] [seconds] [keys reseal flags…]');

const CLI = join(ROOT, 'dist', 'cli', 'main.js');
const OLD = Buffer.alloc(32, 1).toString('base64');
const NEW = Buffer.alloc(32, 2).toString('base64');
const SECRET = 'whsec_reseal_under_load';
const url = kind === 'sqlite' ? `sqlite:${join(RUN_DIR, 'inbox.db')}` : await recreateDb('wi_bench_reseal_load');

/** One open-loop window on `base` (no duplicates, no 1 MiB bodies: the reseal is what varies). */
async function load(base: string, tag: string): Promise<string> {
  const r = await runLoad<RateResult>({
    mode: 'rate', url: base, path: '/webhooks/stripe-bench', secret: SECRET, rate, warmupS: 2, durationS: seconds, drainS: 10,
    connections: 256, dupFraction: 0, largeFraction: 0, seed: 3, tag,
    ...(process.env.RESEAL_TIMELINE ? { timelineFile: `${process.env.RESEAL_TIMELINE}-${tag}.csv` } : {}),
  }, { windowStart: () => undefined, windowEnd: () => undefined });
  const notOk = r.measured - r.ok;
  return `p50 ${r.latency.p50.toFixed(1)} / p99 ${r.latency.p99.toFixed(1)} / max ${r.latency.max.toFixed(1)} ms, ${notOk} not 2xx`;
}

try {
  buildChildren();
  const seed = openStore(url);
  try {
    await seed.migrate();
    await seedEvents(seed, new PayloadCipher(new Map([['old', Buffer.from(OLD, 'base64')]]), 'old'), n, 'seed', DEFAULT_SIZES, 11);
  } finally {
    await seed.close();
  }
  const cfg = join(RUN_DIR, 'config.json');
  writeFileSync(cfg, JSON.stringify({
    listen: { host: '127.0.0.1', port: 0 }, database: url, log: { level: 'warn' }, workers: { enabled: false },
    payloadKeys: { current: 'new', keys: { old: OLD, new: NEW } },
    endpoints: [{ id: 'stripe-bench', provider: 'stripe', secrets: [{ version: 'v1', value: SECRET }] }],
  }));
  const server = await launch([CLI, 'serve', '--config', cfg], {}, 'reseal-serve', async () => undefined);
  try {
    console.log(`${kind}, ${n} payloads under the old key, ${rate} req/s for ${seconds} s`);
    console.log(`  alone:              ${await load(server.url, 'alone')}`);
    const t0 = performance.now();
    const reseal = spawn(process.execPath, [CLI, 'keys', 'reseal', '--config', cfg, ...flags], { stdio: 'ignore' });
    const resealed = new Promise<number>((resolve) => reseal.once('exit', () => resolve((performance.now() - t0) / 1000)));
    console.log(`  beside keys reseal${flags.length ? ` ${flags.join(' ')}` : ''}: ${await load(server.url, 'beside')}`);
    console.log(`  keys reseal took ${(await resealed).toFixed(1)} s (exit ${reseal.exitCode})`);
  } finally {
    await server.stop();
  }
} finally {
  killAll();
  rmSync(RUN_DIR, { recursive: true, force: true });
  if (kind === 'postgres') await dropDb('wi_bench_reseal_load');
}
