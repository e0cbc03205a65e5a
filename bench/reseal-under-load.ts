/**
 * What `keys reseal` costs a running server: a `serve` (dist/, workers off) on a database holding
 * N payloads under an old key, an open-loop load of bench events at RATE req/s for the window,
 * measured twice on the same server — once alone, once with the shipped `keys reseal` running
 * beside it — and the ack latency of both windows printed. Run after `npm run build`.
 *
 *   node --import tsx bench/reseal-under-load.ts sqlite|postgres [events] [rate] [seconds] [reseal --per-second]
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { Pool } from 'undici';
import { PayloadCipher } from '../src/crypto/payload-cipher.js';
import { openStore } from '../src/store/open.js';
import { dropDb, recreateDb } from './databases.js';
import { DEFAULT_SIZES, EventFactory, prng, stripeSignature } from './events.js';
import { seedEvents } from './records.js';

const kind = process.argv[2];
const n = Number(process.argv[3] ?? 50_000);
const rate = Number(process.argv[4] ?? 1000);
const seconds = Number(process.argv[5] ?? 10);
const perSecond = process.argv[6];
if (kind !== 'sqlite' && kind !== 'postgres') throw new Error('usage: bench/reseal-under-load.ts sqlite|postgres [events] [rate] [seconds]');

const CLI = join(import.meta.dirname, '..', 'dist', 'cli', 'main.js');
const OLD = Buffer.alloc(32, 1).toString('base64');
const NEW = Buffer.alloc(32, 2).toString('base64');
const SECRET = 'whsec_reseal_under_load';
const dir = mkdtempSync(join(tmpdir(), 'wi-reseal-load-'));
const url = kind === 'sqlite' ? `sqlite:${join(dir, 'inbox.db')}` : await recreateDb('wi_bench_reseal_load');

async function seed(): Promise<void> {
  const store = openStore(url);
  try {
    await store.migrate();
    await seedEvents(store, new PayloadCipher(new Map([['old', Buffer.from(OLD, 'base64')]]), 'old'), n, 'seed', DEFAULT_SIZES, 11);
  } finally {
    await store.close();
  }
}

function percentile(sorted: number[], p: number): number {
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!;
}

/** Open loop: request i is due at start + i/rate; its latency counts from then. */
async function load(base: string, tag: string): Promise<string> {
  const pool = new Pool(base, { connections: 64 });
  const factory = new EventFactory(DEFAULT_SIZES);
  const rnd = prng(3);
  const total = rate * seconds;
  const lat: number[] = [];
  let failed = 0;
  const start = performance.now() + 50;
  const sends: Promise<void>[] = [];
  for (let i = 0; i < total; i++) {
    const due = start + (i * 1000) / rate;
    const wait = due - performance.now();
    if (wait > 1) await new Promise((r) => setTimeout(r, wait));
    const body = factory.make(`${tag}_${i}`, false, rnd, Math.floor(Date.now() / 1000));
    const headers = { 'content-type': 'application/json', 'stripe-signature': stripeSignature(SECRET, body, Math.floor(Date.now() / 1000)) };
    sends.push(pool.request({ path: '/webhooks/stripe-bench', method: 'POST', headers, body }).then(async (res) => {
      await res.body.dump();
      if (res.statusCode === 200) lat.push(performance.now() - due);
      else failed++;
    }, () => void failed++));
  }
  await Promise.all(sends);
  await pool.close();
  lat.sort((a, b) => a - b);
  return `p50 ${percentile(lat, 50).toFixed(1)} / p99 ${percentile(lat, 99).toFixed(1)} / max ${lat.at(-1)!.toFixed(1)} ms, ${failed} not 200`;
}

await seed();
const cfg = join(dir, 'config.json');
writeFileSync(cfg, JSON.stringify({
  listen: { host: '127.0.0.1', port: 0 }, database: url, log: { level: 'warn' }, workers: { enabled: false },
  payloadKeys: { current: 'new', keys: { old: OLD, new: NEW } },
  endpoints: [{ id: 'stripe-bench', provider: 'stripe', secrets: [{ version: 'v1', value: SECRET }] }],
}));
const server = spawn(process.execPath, [CLI, 'serve', '--config', cfg], { stdio: ['ignore', 'ignore', 'pipe'] });
try {
  const base = await new Promise<string>((resolve, reject) => {
    let out = '';
    // The banner is on stderr (stdout carries the one JSON line per request).
    server.stderr!.on('data', (d: Buffer) => {
      out += d.toString();
      const m = /listening on (http:\/\/127\.0\.0\.1:\d+)/.exec(out);
      if (m) resolve(m[1]!);
    });
    server.once('exit', () => reject(new Error(`server exited:\n${out}`)));
  });
  await load(base, 'warm');
  console.log(`${kind}, ${n} payloads under the old key, ${rate} req/s for ${seconds} s`);
  console.log(`  alone:              ${await load(base, 'alone')}`);
  const t0 = performance.now();
  const reseal = spawn(process.execPath, [CLI, 'keys', 'reseal', '--config', cfg, ...(perSecond ? ['--per-second', perSecond] : [])], { stdio: 'ignore' });
  const resealed = new Promise<number>((resolve) => reseal.once('exit', () => resolve((performance.now() - t0) / 1000)));
  console.log(`  beside keys reseal${perSecond ? ` --per-second ${perSecond}` : ''}: ${await load(base, 'beside')}`);
  console.log(`  keys reseal took ${(await resealed).toFixed(1)} s (exit ${reseal.exitCode})`);
} finally {
  server.kill('SIGTERM');
  await new Promise((r) => server.once('exit', r));
  rmSync(dir, { recursive: true, force: true });
  if (kind === 'postgres') await dropDb('wi_bench_reseal_load');
}
