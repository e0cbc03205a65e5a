/**
 * The processing-engine scenarios of `npm run bench` (`--only drain,e2e`; method in
 * bench/README.md). Driven from bench/run.ts, whose child-process, database, load and table
 * helpers this module uses; run.ts imports it, so nothing here touches them at import time.
 *
 * drain — a fresh database per store, seeded with N accepted events through the real store API
 *   (`acceptBatch`, records sealed under the payload key the worker opens them with, Stripe-style
 *   bodies of 1–2 KiB), then ONE `webhook-inbox work` process with a no-op handler. Drain time
 *   runs from the first to the last `processed_at` (so process start-up is excluded); a separate
 *   connection polls the unfinished count every 250 ms to see the end.
 * e2e — a fresh database, `webhook-inbox serve --handlers bench/noop-handlers.mjs` with the
 *   workers on, 2,000 req/s open loop from bench/loadgen.ts. Ingress ack latency comes from the
 *   load generator; accept → PROCESSED (`processed_at - received_at`) from the rows received in
 *   the measured window, in SQL, after the backlog has drained.
 */
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseWorkers, type WorkersConfig } from '../src/config/engine.js';
import { PayloadCipher } from '../src/crypto/payload-cipher.js';
import { openStore } from '../src/store/open.js';
import type { RateResult } from './loadgen.js';
import { seedEvents } from './records.js';
import { openProbe, waitDrained, type Latency, type Probe, type StoreKind } from './probe.js';
import { formatSummary, profileFiles, summarizeProfile } from './profile-summary.js';
import { launch, RUN_DIR, type Running } from './children.js';
import { dropDb, ensureWalSupply, pgAdmin, recreateDb, walForRequests } from './databases.js';
import { ROOT, runLoad } from './load.js';
import { passes } from './verdict.js';
import {
  A_P99_TARGET_MS, A_RATE, NOISY_PCT, PATH, PAYLOAD_KEY, SERVER_MAIN, STRIPE_SECRET,
  cpuSampler, loadgenPct, opts, otherCpuPct, outcomesText, scrapeCommitStats, serverConfig, waitQuiet, type CpuWindow, type Usage,
} from './run.js';
import { f0, f1, ms, table } from './format.js';

export const ENGINE_SCENARIOS = ['drain', 'e2e'] as const;
export type EngineScenario = (typeof ENGINE_SCENARIOS)[number];

export interface EngineReport {
  readonly markdown: string;
}

const HANDLERS_FILE = () => (opts.handlersRead ? 'reading-handlers.mjs' : 'noop-handlers.mjs');
const handlersModule = () => join(ROOT, 'bench', HANDLERS_FILE());
const ENGINE_DB = 'wi_bench_engine';
const SEED_BATCH = 500;
const SEED_SIZES = { minBytes: 1024, maxBytes: 2048, largeBytes: 4096 };
/** A drain that has not finished by then is reported as it stands. */
const DRAIN_LIMIT_MS = 240_000;
/** After the e2e load, how long the workers get to finish the backlog. */
const E2E_TAIL_LIMIT_MS = 60_000;
const DRAIN_TARGET = 5000;
const E2E_P99_TARGET_MS = 1000;
const STORE_LABEL: Record<StoreKind, string> = { sqlite: 'SQLite', postgres: 'PostgreSQL' };

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

// ---------------------------------------------------------------- databases

interface FreshDb {
  readonly url: string;
  readonly dir: string;
  cleanup(): Promise<void>;
}

async function freshDatabase(store: StoreKind): Promise<FreshDb> {
  const dir = mkdtempSync(join(RUN_DIR, `engine-${store}-`));
  const url = store === 'sqlite' ? `sqlite:${join(dir, 'inbox.db')}` : await recreateDb(ENGINE_DB);
  return {
    url,
    dir,
    async cleanup() {
      rmSync(dir, { recursive: true, force: true });
      if (store === 'postgres') await dropDb(ENGINE_DB);
    },
  };
}

// ---------------------------------------------------------------- seeding

/**
 * Writes `n` accepted events as the ingress would have (same endpoint, provider, payload key,
 * record shape), `SEED_BATCH` per transaction, through this checkout's store code.
 */
async function seed(url: string, n: number, tag: string): Promise<{ seconds: number; meanBodyBytes: number }> {
  const t0 = performance.now();
  const store = openStore(url);
  try {
    await store.migrate();
    const cipher = new PayloadCipher(new Map([['bench', Buffer.from(PAYLOAD_KEY, 'base64')]]), 'bench');
    const bytes = await seedEvents(store, cipher, n, tag, SEED_SIZES, 42, SEED_BATCH);
    return { seconds: (performance.now() - t0) / 1000, meanBodyBytes: bytes / n };
  } finally {
    await store.close();
  }
}

// ---------------------------------------------------------------- scenarios

function profileDirFor(what: string): string | undefined {
  if (!opts.profile) return undefined;
  const dir = join(ROOT, 'dist-bench', 'profiles', `${new Date().toISOString().replace(/[:.]/g, '-')}-${what}`);
  mkdirSync(dir, { recursive: true });
  return dir;
}

function summarizeProfiles(dir: string | undefined): string | undefined {
  if (!dir) return undefined;
  const files = profileFiles(dir);
  const text = files.length ? files.map((f) => formatSummary(summarizeProfile(f, 25))).join('\n') : '(no profile written — did the process exit cleanly?)';
  console.log(text);
  return text;
}

interface DrainResult {
  readonly store: StoreKind;
  readonly workers: WorkersConfig;
  readonly backlog: number;
  readonly meanBodyBytes: number;
  readonly seedS: number;
  /** From launching the work process to the first processed_at. */
  readonly startupS: number;
  readonly drainS: number;
  readonly eventsPerS: number;
  readonly done: boolean;
  readonly statuses: Record<string, number>;
  readonly outboxUnpublished: number;
  readonly cpu: CpuWindow;
  readonly profile?: string;
}

async function drain(store: StoreKind, tag: string): Promise<DrainResult> {
  const n = opts.backlog;
  const db = await freshDatabase(store);
  let work: Running | undefined;
  let probe: Probe | undefined;
  try {
    console.log(`drain ${store}: seeding ${f0(n)} events…`);
    const seeded = await seed(db.url, n, tag);
    // A backlog that built up over time would have been vacuumed and analysed by autovacuum.
    if (store === 'postgres') await pgAdmin((c) => c.query('VACUUM ANALYZE'), db.url);
    const workersCfg = { ...opts.workers };
    const workers = parseWorkers(workersCfg);
    const cfg = join(db.dir, 'config.json');
    writeFileSync(cfg, JSON.stringify(serverConfig(db.url, workersCfg), null, 2));
    probe = await openProbe(store, db.url);
    // Settling an event writes its row again (status, processed marker, outbox): as an accept.
    if (store === 'postgres') await ensureWalSupply(walForRequests(n));
    await waitQuiet();
    const profileDir = profileDirFor(`drain-${store}`);
    const prof = profileDir ? ['--cpu-prof', `--cpu-prof-dir=${profileDir}`] : [];
    const launchedAt = Date.now();
    work = await launch([...prof, SERVER_MAIN, 'work', '--config', cfg, '--handlers', handlersModule()], { DATABASE_URL: db.url }, `work-${store}`, async () => undefined, /workers running/);
    const cpu = cpuSampler(work.pid);
    let started = false;
    const end = await waitDrained(probe, DRAIN_LIMIT_MS, (unfinished) => {
      // CPU is sampled from the first poll that sees progress to the poll that sees the end.
      if (!started && unfinished < n) {
        started = true;
        cpu.start();
      }
    });
    if (!started) cpu.start();
    cpu.end();
    const span = await probe.processedSpan();
    const statuses = await probe.statusCounts();
    const outboxUnpublished = await probe.outboxUnpublished();
    await work.stop();
    const profile = summarizeProfiles(profileDir);
    const processed = statuses.PROCESSED ?? 0;
    const drainS = span ? Math.max(0.001, (span.last - span.first) / 1000) : NaN;
    const r: DrainResult = {
      store, workers, backlog: n, meanBodyBytes: seeded.meanBodyBytes, seedS: seeded.seconds,
      startupS: span ? (span.first - launchedAt) / 1000 : NaN, drainS, eventsPerS: processed / drainS,
      done: end.done && processed === n, statuses, outboxUnpublished, cpu: cpu.result(), ...(profile ? { profile } : {}),
    };
    console.log(table(DRAIN_HEAD, [drainRow(r)]));
    return r;
  } finally {
    await probe?.close();
    await work?.stop();
    await db.cleanup();
  }
}

interface E2eResult {
  readonly store: StoreKind;
  readonly workers: WorkersConfig;
  /** false: the same load with `workers.enabled: false`, as the reference for the ingress numbers. */
  readonly workersOn: boolean;
  readonly mode: WorkersMode;
  readonly load: RateResult;
  readonly cpu: CpuWindow;
  readonly e2e: Latency;
  /** From the end of the measured window until nothing was left PENDING/PROCESSING. */
  readonly tailS: number;
  readonly done: boolean;
  readonly statuses: Record<string, number>;
  /** The server's group commit, from its /metrics (warm-up included). */
  readonly commit: Usage['commit'];
  readonly profile?: string;
}

/** Where the workers run in an e2e step: not at all (the ingress reference), inside `serve`, or in a `work` process of their own. */
export type WorkersMode = 'off' | 'in-serve' | 'separate';
const MODE_LABEL: Record<WorkersMode, string> = { off: ' (workers off)', 'in-serve': '', separate: ' (separate work process)' };

async function e2e(store: StoreKind, mode: WorkersMode, tag: string, seed: number): Promise<E2eResult> {
  const workersOn = mode !== 'off';
  const db = await freshDatabase(store);
  let srv: Running | undefined;
  let work: Running | undefined;
  let probe: Probe | undefined;
  try {
    const workersCfg = { ...opts.workers, enabled: mode === 'in-serve' };
    const workers = parseWorkers(workersCfg);
    const cfg = join(db.dir, 'config.json');
    writeFileSync(cfg, JSON.stringify(serverConfig(db.url, workersCfg), null, 2));
    if (store === 'postgres') await ensureWalSupply(walForRequests(A_RATE * (opts.warmupS + opts.e2eDurationS)));
    await waitQuiet();
    const profileDir = workersOn ? profileDirFor(`e2e-${store}`) : undefined;
    const prof = profileDir ? ['--cpu-prof', `--cpu-prof-dir=${profileDir}`] : [];
    srv = await launch([...prof, SERVER_MAIN, 'serve', '--config', cfg, '--handlers', handlersModule()], { DATABASE_URL: db.url }, `e2e-${store}`, async () => undefined);
    if (mode === 'separate') {
      const workCfg = join(db.dir, 'work.json');
      writeFileSync(workCfg, JSON.stringify(serverConfig(db.url, { ...opts.workers, enabled: true }), null, 2));
      work = await launch([SERVER_MAIN, 'work', '--config', workCfg, '--handlers', handlersModule()], { DATABASE_URL: db.url }, `e2e-work-${store}`, async () => undefined, /workers running/);
    }
    await sleep(300);
    const cpu = cpuSampler(srv.pid);
    let w0 = 0;
    let w1 = 0;
    console.log(`e2e ${store}${MODE_LABEL[mode]}: ${f0(A_RATE)} req/s, ${opts.warmupS} s warm-up + ${opts.e2eDurationS} s measured…`);
    const load = await runLoad<RateResult>({
      mode: 'rate', url: srv.url, path: PATH, secret: STRIPE_SECRET, rate: A_RATE, warmupS: opts.warmupS, durationS: opts.e2eDurationS, drainS: opts.drainS,
      connections: opts.connections, dupFraction: opts.dupFraction, largeFraction: opts.largeFraction, seed, tag,
    }, {
      windowStart: () => { w0 = Date.now(); cpu.start(); },
      windowEnd: () => { w1 = Date.now(); cpu.end(); },
    });
    if (!cpu.ended) {
      w1 = Date.now();
      cpu.end();
    }
    probe = await openProbe(store, db.url);
    const end = workersOn ? await waitDrained(probe, E2E_TAIL_LIMIT_MS) : { done: false, atMs: w1 };
    const latency = await probe.latency(w0, w1);
    const statuses = await probe.statusCounts();
    const commit = await scrapeCommitStats(srv.url);
    await srv.stop();
    await work?.stop();
    const profile = summarizeProfiles(profileDir);
    const r: E2eResult = {
      store, workers, workersOn, mode, load, cpu: cpu.result(), e2e: latency, tailS: (end.atMs - w1) / 1000, commit,
      done: end.done && Object.keys(statuses).every((s) => s === 'PROCESSED'), statuses, ...(profile ? { profile } : {}),
    };
    console.log(table(E2E_HEAD, [e2eRow(r)]));
    return r;
  } finally {
    await probe?.close();
    await srv?.stop();
    await work?.stop();
    await db.cleanup();
  }
}

// ---------------------------------------------------------------- report

const pct = (n: number) => (Number.isFinite(n) ? Math.round(n).toLocaleString('en-US') : '–');
const workersText = (w: WorkersConfig) => `${w.concurrency} / ${w.batchSize}`;
const noisy = (other: number) => (other > NOISY_PCT ? ' (noisy)' : '');
const statusText = (s: Record<string, number>) => Object.entries(s).filter(([k]) => k !== 'PROCESSED').map(([k, v]) => `${k}:${f0(v)}`).join(' ');

const DRAIN_HEAD = ['store', 'backlog', 'body B (mean)', 'workers conc / batch', 'seed s', 'start → 1st PROCESSED s', 'drain s', 'events/s',
  'work CPU %', 'main thr %', 'top other thr %', 'CPU µs/event', 'PG CPU %', 'other CPU %', 'disk write MiB/s', 'disk flushes/s', 'all PROCESSED', 'outbox unpublished at end'];
function drainRow(r: DrainResult): string[] {
  const c = r.cpu;
  const other = otherCpuPct(c.machineBusyPct, c.cpuPct, c.pgCpuPct);
  return [
    STORE_LABEL[r.store], f0(r.backlog), f0(r.meanBodyBytes), workersText(r.workers), r.seedS.toFixed(1), r.startupS.toFixed(2), r.drainS.toFixed(1),
    f0(r.eventsPerS) + noisy(other), pct(c.cpuPct), pct(c.mainThreadCpuPct), pct(c.otherThreadCpuPct), f0((c.cpuMs * 1000) / Math.max(1, r.eventsPerS * c.windowS)),
    r.store === 'postgres' ? pct(c.pgCpuPct) : '–', pct(other), f1(c.diskWriteMiBps), f0(c.diskFlushesPerS), r.done ? 'yes' : `NO ${statusText(r.statuses)}`, f0(r.outboxUnpublished),
  ];
}

const E2E_HEAD = ['store', 'offered/s', 'achieved/s', 'ack p50 ms', 'ack p95 ms', 'ack p99 ms', 'ack max ms', 'non-2xx/errors', 'events in window',
  'e2e p50 ms', 'e2e p95 ms', 'e2e p99 ms', 'e2e max ms', 'all PROCESSED', 'drained s after window', 'group commit req/batch, ms', 'srv CPU %', 'main thr %', 'top other thr %', 'PG CPU %', 'loadgen CPU %', 'other CPU %', 'disk write MiB/s', 'disk flushes/s'];
function e2eRow(r: E2eResult): string[] {
  const l = r.load;
  const c = r.cpu;
  const lgPct = loadgenPct(l);
  const other = otherCpuPct(c.machineBusyPct, c.cpuPct, c.pgCpuPct, lgPct);
  return [
    STORE_LABEL[r.store] + MODE_LABEL[r.mode], f0(l.offered), f0(l.achieved), ms(l.latency.p50), ms(l.latency.p95), ms(l.latency.p99) + noisy(other), ms(l.latency.max), outcomesText(l.outcomes),
    !r.workersOn || r.e2e.processed === r.e2e.rows ? f0(r.e2e.rows) : `${f0(r.e2e.processed)} of ${f0(r.e2e.rows)}`,
    ...(r.workersOn
      ? [ms(r.e2e.p50), ms(r.e2e.p95), ms(r.e2e.p99), ms(r.e2e.max), r.done ? 'yes' : `NO ${statusText(r.statuses)}`, r.tailS.toFixed(1)]
      : ['–', '–', '–', '–', '–', '–']),
    r.commit ? `${f1(r.commit.meanBatch)}, ${ms(r.commit.meanCommitMs)}` : '–',
    pct(c.cpuPct), pct(c.mainThreadCpuPct), pct(c.otherThreadCpuPct), r.store === 'postgres' ? pct(c.pgCpuPct) : '–', pct(lgPct), pct(other),
    f1(c.diskWriteMiBps), f0(c.diskFlushesPerS),
  ];
}

const verdict = (ok: boolean) => (ok ? 'met' : '**MISSED**');

function render(drains: DrainResult[], e2es: E2eResult[], stores: StoreKind[]): string {
  const out: string[] = ['### Processing engine', ''];
  if (drains.length) {
    const w = drains[0]!.workers;
    out.push(`Drain: a backlog of ${f0(drains[0]!.backlog)} accepted events (seeded through the store API, ${f0(SEED_BATCH)} per transaction; Stripe-style JSON bodies of ` +
      `${SEED_SIZES.minBytes}–${SEED_SIZES.maxBytes} bytes, sealed under the payload key the worker uses), drained by ONE \`webhook-inbox work\` process with ` +
      `${opts.handlersRead ? 'a handler that parses every body (`bench/reading-handlers.mjs`)' : 'a no-op handler that reads no body (`bench/noop-handlers.mjs`, `readsPayload: false`)'} for \`*\` (workers: concurrency ${w.concurrency}, batchSize ${w.batchSize}, leaseMs ${w.leaseMs}, pollMs ${w.pollMs}${Object.keys(opts.workers).length ? ', set by --workers' : ', the defaults'}). ` +
      'Drain time = first to last `processed_at` (the process start-up, shown apart, is excluded); CPU from the first poll that saw progress to the poll that saw none left. ' +
      (drains.some((d) => d.store === 'postgres') ? 'PostgreSQL: `VACUUM ANALYZE` after seeding, as autovacuum would have done for a backlog built up over time. ' : '') +
      'The outbox relay runs too (no broker routes: it marks each outbox row published); its leftovers are in the last column.');
    out.push('');
    out.push(table(DRAIN_HEAD, drains.map(drainRow)));
    out.push('');
  }
  if (e2es.length) {
    const on = e2es.find((x) => x.workersOn) ?? e2es[0]!;
    const l = on.load;
    out.push(`End to end: \`webhook-inbox serve --handlers bench/${HANDLERS_FILE()}\` with the workers on (concurrency ${on.workers.concurrency}, batchSize ${on.workers.batchSize}); "workers off" = the same load and server with \`workers.enabled: false\` (the reference for ingress latency); "separate work process" = that server plus one \`webhook-inbox work\` process (the deployment that scales them apart); ` +
      `${f0(A_RATE)} req/s open loop (the ladder's load: ${opts.warmupS} s warm-up + ${f0(l.windowMs / 1000)} s measured, mean body ${f0(l.meanBodyBytes)} bytes, 1% duplicates, 0.3% of 1 MiB). ` +
      'Ack = the loadgen\'s latency from scheduled send to response. e2e = `processed_at − received_at` of the rows received in the measured window, read after the backlog drained ' +
      '(`processed_at` is taken as the batch\'s settle transaction reaches the row, just before its COMMIT).');
    out.push('');
    out.push(table(E2E_HEAD, e2es.map(e2eRow)));
    out.push('');
  }
  out.push('Targets (issue 3):');
  out.push('');
  for (const s of stores) {
    const d = drains.find((x) => x.store === s);
    const parts: string[] = [];
    if (d) parts.push(`drain ≥ ${f0(DRAIN_TARGET)}/s: ${verdict(d.done && d.eventsPerS >= DRAIN_TARGET)} (${f0(d.eventsPerS)}/s${d.done ? '' : ', not all PROCESSED'})`);
    for (const e of e2es.filter((x) => x.store === s && x.workersOn)) {
      const where = e.mode === 'separate' ? ' (separate work process)' : ' (in serve)';
      parts.push(`ingress p99 ≤ ${A_P99_TARGET_MS} ms with workers${where}: ${verdict(passes(e.load, A_P99_TARGET_MS))} (${ms(e.load.latency.p99)} ms)`);
      parts.push(`e2e p99 ≤ 1 s${where}: ${verdict(e.done && e.e2e.p99 <= E2E_P99_TARGET_MS)} (${ms(e.e2e.p99)} ms${e.done ? '' : ', not all PROCESSED'})`);
    }
    if (parts.length) out.push(`- ${STORE_LABEL[s]}: ${parts.join('; ')}`);
  }
  out.push('');
  for (const r of [...drains, ...e2es]) {
    if (!r.profile) continue;
    out.push(`Profile, ${'load' in r ? 'e2e server' : 'drain work process'} on ${STORE_LABEL[r.store]} (--cpu-prof; its numbers include the profiler's overhead):\n\n\`\`\`\n${r.profile}\n\`\`\`\n`);
  }
  return out.join('\n');
}

/** Runs the chosen scenarios on each store (drain first); returns their RESULTS.md section. */
export async function runEngineBench(scenarios: readonly EngineScenario[], stores: readonly string[]): Promise<EngineReport> {
  const tag = Date.now().toString(36);
  const drains: DrainResult[] = [];
  const e2es: E2eResult[] = [];
  const kinds = stores as StoreKind[];
  console.log('\nProcessing engine:');
  for (const s of kinds) {
    if (scenarios.includes('drain')) drains.push(await drain(s, `${tag}_drain_${s}`));
    if (scenarios.includes('e2e')) {
      // The same load with the workers off first: the reference for the ingress latency.
      e2es.push(await e2e(s, 'off', `${tag}_e2e0_${s}`, 1000 + e2es.length));
      e2es.push(await e2e(s, 'in-serve', `${tag}_e2e_${s}`, 1000 + e2es.length));
      e2es.push(await e2e(s, 'separate', `${tag}_e2e2_${s}`, 1000 + e2es.length));
    }
  }
  const markdown = render(drains, e2es, kinds);
  return { markdown };
}
