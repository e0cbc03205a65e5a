/**
 * Soak: does a long-running `webhook-inbox serve` leak memory, file descriptors, timers/handles,
 * or leave rows in a non-terminal state?
 *
 *   node --import tsx bench/soak.ts [--store sqlite|postgres|both] [--minutes N] [--rate R] [--write]
 *
 * (after `npm run build`). Per store: a fresh database, `node dist/cli/main.js serve --config <tmp>
 * --handlers bench/noop-handlers.mjs` with the workers on (the default), one Stripe endpoint
 * whose maxBodyBytes is 64 KiB. bench/soak-load.ts (a child process) drives it open loop at
 * --rate req/s (800) for --minutes (6) with a production-like mix (its header lists the kinds;
 * shares in MIX below): distinct signed events, exact duplicates, bad signatures (401), oversized
 * bodies (413; Content-Length and chunked), uploads aborted mid-body, an unknown endpoint (404),
 * `Expect: 100-continue`, keep-alive plus short-lived connections.
 *
 * Every --sample-s (10 s) it samples the server: VmRSS, open FDs (sockets apart), threads, CPU,
 * and from /metrics the in-flight body bytes, commit queue and event-loop delay; with the probe
 * (bench/soak-probe.mjs, preloaded into the server; `--no-probe` leaves it out) also the V8 heap
 * and the live handles by type (timers, sockets). The server has no heap metric of its own.
 * Also the database's PENDING/PROCESSING count (the workers keeping up).
 *
 * After the load: waits (≤ 60 s) until no row is PENDING/PROCESSING, samples once more with the
 * client's connections closed, then checks every distinct event id that got a 2xx is in the
 * database and PROCESSED, and nothing else is. Prints a markdown table; `--write` appends it to
 * bench/RESULTS.md.
 */
import { fork } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { appendFileSync, existsSync, mkdtempSync, readFileSync, readdirSync, readlinkSync, rmSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { launch, RUN_DIR, track, type Running } from './children.js';
import { dropDb, recreateDb } from './databases.js';
import { f0, f1, readMetrics, table } from './format.js';
import { BUILD, buildChildren, ROOT } from './load.js';
import { openProbe, type Probe, type StoreKind } from './probe.js';
import type { Kind, SoakLoadMessage, SoakLoadResult, SoakLoadSpec, SoakProgress } from './soak-load.js';
import { procCpuMs, rssBytes } from './sys.js';

const { values: args } = parseArgs({
  options: {
    store: { type: 'string', default: 'both' },
    minutes: { type: 'string', default: '6' },
    rate: { type: 'string', default: '800' },
    connections: { type: 'string', default: '64' },
    'sample-s': { type: 'string', default: '10' },
    'no-probe': { type: 'boolean' },
    server: { type: 'string' },
    write: { type: 'boolean' },
    help: { type: 'boolean', short: 'h' },
  },
  strict: true,
});
if (args.help) {
  console.log(readFileSync(new URL(import.meta.url), 'utf8').split('*/')[0]!.replace(/^\/\*\*?|^ \* ?/gm, ''));
  process.exit(0);
}
const stores: StoreKind[] = args.store === 'both' ? ['sqlite', 'postgres'] : [args.store as StoreKind];
for (const s of stores) if (s !== 'sqlite' && s !== 'postgres') throw new Error(`--store: sqlite, postgres or both, not "${s}"`);
const MINUTES = Number(args.minutes);
const RATE = Number(args.rate);
const SAMPLE_MS = Number(args['sample-s']) * 1000;
const PROBE = !args['no-probe'];
const SERVER_MAIN = resolve(args.server ?? join(ROOT, 'dist', 'cli', 'main.js'));
if (!(MINUTES > 0 && RATE > 0 && SAMPLE_MS > 0)) throw new Error('--minutes, --rate and --sample-s must be positive');

const ENDPOINT = 'stripe-soak';
const MAX_BODY_BYTES = 64 * 1024;
const MIX: Partial<Record<Kind, number>> = { dup: 0.03, badsig: 0.03, oversized: 0.01, aborted: 0.01, unknown: 0.01, short: 0.02, expect: 0.003 };
/** What each kind should get; anything else is reported as unexpected. */
// The server answers 413, then lingers (src/http/linger.ts: drops what still arrives until the
// sender's FIN, within bounds), so a sender still writing reads its 413; EPIPE/ECONNRESET is flagged (!).
const EXPECTED: Record<string, string> = { event: '200', short: '200', expect: '200', dup: '200', badsig: '401', 'oversized-cl': '413', 'oversized-chunked': '413', aborted: 'aborted', unknown: '404' };
const DRAIN_LIMIT_MS = 60_000;
const SECRET = 'whsec_soak_' + randomBytes(12).toString('hex');
const PAYLOAD_KEY = randomBytes(32).toString('base64');
const PG_DB = 'wi_bench_soak';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const MiB = (b: number | null | undefined) => (b == null ? NaN : b / 1024 ** 2);

// ---------------------------------------------------------------- sampling

interface ProbeLine {
  t: number;
  heapUsed: number;
  heapTotal: number;
  external: number;
  arrayBuffers: number;
  resources: Record<string, number>;
}

interface Sample {
  /** Seconds since the load started (negative: before it). */
  t: number;
  phase: 'idle' | 'load' | 'after';
  rssMiB: number;
  fds: number;
  socketFds: number;
  threads: number;
  /** Server CPU since the previous sample, % of one core. */
  cpuPct: number;
  inflightBodyBytes: number;
  commitQueue: number;
  loopP99Ms: number;
  unfinished: number;
  heapMiB: number;
  timeouts: number;
  tcpHandles: number;
  okP99Ms: number;
  done: number;
}

function fdCounts(pid: number): { fds: number; sockets: number } {
  let fds = 0;
  let sockets = 0;
  try {
    for (const fd of readdirSync(`/proc/${pid}/fd`)) {
      fds++;
      try {
        if (readlinkSync(`/proc/${pid}/fd/${fd}`).startsWith('socket:')) sockets++;
      } catch {
        /* closed meanwhile */
      }
    }
  } catch {
    return { fds: NaN, sockets: NaN };
  }
  return { fds, sockets };
}

function threadCount(pid: number): number {
  try {
    return readdirSync(`/proc/${pid}/task`).length;
  } catch {
    return NaN;
  }
}

async function scrape(url: string): Promise<{ inflight: number; queue: number; loopP99Ms: number }> {
  try {
    const v = await readMetrics(url);
    return { inflight: v('webhook_inflight_body_bytes'), queue: v('webhook_commit_queue_depth'), loopP99Ms: v('webhook_event_loop_delay_seconds\\{stat="p99"\\}') * 1000 };
  } catch {
    return { inflight: NaN, queue: NaN, loopP99Ms: NaN };
  }
}

function probeLines(file: string): ProbeLine[] {
  if (!existsSync(file)) return [];
  return readFileSync(file, 'utf8').trim().split('\n').filter(Boolean).map((l) => JSON.parse(l) as ProbeLine);
}

function sampler(srv: Running, probe: Probe, probeFile: string, loadStart: () => number) {
  let lastCpu = procCpuMs(srv.pid) ?? 0;
  let lastAt = performance.now();
  return async (phase: Sample['phase'], progress?: SoakProgress): Promise<Sample> => {
    const now = performance.now();
    const cpu = procCpuMs(srv.pid) ?? lastCpu;
    const cpuPct = ((cpu - lastCpu) / (now - lastAt)) * 100;
    lastCpu = cpu;
    lastAt = now;
    const { fds, sockets } = fdCounts(srv.pid);
    const m = await scrape(srv.url);
    const p = probeLines(probeFile).at(-1);
    const s: Sample = {
      t: phase === 'idle' ? NaN : (now - loadStart()) / 1000, phase, rssMiB: MiB(rssBytes(srv.pid)), fds, socketFds: sockets, threads: threadCount(srv.pid), cpuPct,
      inflightBodyBytes: m.inflight, commitQueue: m.queue, loopP99Ms: m.loopP99Ms, unfinished: await probe.unfinished(),
      heapMiB: p ? MiB(p.heapUsed) : NaN, timeouts: p?.resources.Timeout ?? NaN, tcpHandles: p?.resources.TCPSocketWrap ?? NaN,
      okP99Ms: progress?.okP99 ?? NaN, done: progress?.done ?? NaN,
    };
    console.log(
      `  ${phase.padEnd(5)} t=${s.t.toFixed(0).padStart(4)}s rss ${s.rssMiB.toFixed(1)} MiB heap ${s.heapMiB.toFixed(1)} MiB fds ${s.fds} (sockets ${s.socketFds}) threads ${s.threads} ` +
        `cpu ${s.cpuPct.toFixed(0)}% inflight ${s.inflightBodyBytes} B queue ${s.commitQueue} loop p99 ${s.loopP99Ms.toFixed(1)} ms unfinished ${s.unfinished} ` +
        `timers ${s.timeouts} tcp ${s.tcpHandles}${progress ? ` | done ${progress.done} ok p99 ${progress.okP99.toFixed(1)} ms lag max ${progress.sendLagMaxMs.toFixed(0)} ms` : ''}`,
    );
    return s;
  };
}

// ---------------------------------------------------------------- one store

interface StoreResult {
  store: StoreKind;
  minutes: number;
  rate: number;
  samples: Sample[];
  probe: ProbeLine[];
  loadStartMs: number;
  load: SoakLoadResult;
  drainS: number;
  drained: boolean;
  statuses: Record<string, number>;
  acceptedIds: number;
  rows: number;
  missing: number;
  unexpected: number;
  missingExample?: string;
  unexpectedExample?: string;
}

function runSoakLoad(spec: SoakLoadSpec, onProgress: (p: SoakProgress) => void): Promise<SoakLoadResult> {
  const lg = track(fork(join(BUILD, 'soak-load.js'), [JSON.stringify(spec)], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'], execArgv: [] }));
  return new Promise((res, rej) => {
    let got: SoakLoadResult | undefined;
    lg.on('message', (m: SoakLoadMessage) => {
      if (m.type === 'progress') onProgress(m.progress);
      else if (m.type === 'result') got = m.result;
      else rej(new Error(`soak-load: ${m.message}`));
    });
    lg.once('exit', (code) => (got ? res(got) : rej(new Error(`soak-load exited with code ${code} without a result`))));
  });
}

async function soak(store: StoreKind, seed: number): Promise<StoreResult> {
  const dir = mkdtempSync(join(RUN_DIR, `soak-${store}-`));
  const database = store === 'sqlite' ? `sqlite:${join(dir, 'inbox.db')}` : await recreateDb(PG_DB);
  const cfg = join(dir, 'config.json');
  writeFileSync(cfg, JSON.stringify({
    listen: { host: '127.0.0.1', port: 0 },
    database,
    payloadKeys: { current: 'soak', keys: { soak: PAYLOAD_KEY } },
    log: { level: 'warn' },
    endpoints: [{ id: ENDPOINT, provider: 'stripe', maxBodyBytes: MAX_BODY_BYTES, secrets: [{ version: 'v1', value: SECRET }] }],
  }, null, 2));
  const probeFile = join(dir, 'probe.jsonl');
  const pre = PROBE ? ['--import', join(ROOT, 'bench', 'soak-probe.mjs')] : [];
  let srv: Running | undefined;
  let probe: Probe | undefined;
  try {
    srv = await launch([...pre, SERVER_MAIN, 'serve', '--config', cfg, '--handlers', join(ROOT, 'bench', 'noop-handlers.mjs')],
      { DATABASE_URL: database, SOAK_PROBE_FILE: probeFile }, `soak-${store}`, async () => undefined);
    probe = await openProbe(store, database);
    let loadStartMs = Infinity;
    const sample = sampler(srv, probe, probeFile, () => loadStartMs);
    // As a deployment's first Prometheus scrape: its one-off cost (queue gauges' connections) before the baseline.
    await scrape(srv.url);
    await sleep(3000);
    const samples: Sample[] = [await sample('idle')];
    console.log(`soak ${store}: ${RATE} req/s for ${MINUTES} min (pid ${srv.pid}, log ${srv.logFile})`);
    loadStartMs = performance.now();
    const spec: SoakLoadSpec = {
      url: srv.url, path: `/webhooks/${ENDPOINT}`, unknownPath: '/webhooks/no-such-endpoint', secret: SECRET, rate: RATE, durationS: MINUTES * 60,
      connections: Number(args.connections), mix: MIX, maxBodyBytes: MAX_BODY_BYTES, seed, tag: `soak${Date.now().toString(36)}`,
      idsFile: join(dir, 'accepted-ids.txt'), progressMs: SAMPLE_MS, drainS: 30,
    };
    // The load child reports every SAMPLE_MS; each report triggers a sample, so they line up.
    const pending: Promise<Sample>[] = [];
    const load = await runSoakLoad(spec, (p) => pending.push(sample('load', p)));
    samples.push(...(await Promise.all(pending)));
    const loadEnd = performance.now();

    let unfinished = await probe.unfinished();
    while (unfinished > 0 && performance.now() - loadEnd < DRAIN_LIMIT_MS) {
      await sleep(250);
      unfinished = await probe.unfinished();
    }
    const drainS = (performance.now() - loadEnd) / 1000;
    // The client's connections are closed now: what the server still holds is its own.
    await sleep(5000);
    samples.push(await sample('after'));

    const statuses = await probe.statusCounts();
    const ids = new Set(readFileSync(spec.idsFile, 'utf8').split('\n').filter(Boolean));
    const rowsIds = await probe.eventIds(ENDPOINT);
    const inDb = new Set(rowsIds);
    const missing = [...ids].filter((id) => !inDb.has(id));
    const unexpected = rowsIds.filter((id) => !ids.has(id));
    await srv.stop();
    return {
      store, minutes: MINUTES, rate: RATE, samples, probe: probeLines(probeFile).map((l) => ({ ...l, t: l.t })), loadStartMs: performance.timeOrigin + loadStartMs, load, drainS,
      drained: unfinished === 0, statuses, acceptedIds: ids.size, rows: rowsIds.length, missing: missing.length, unexpected: unexpected.length,
      ...(missing[0] ? { missingExample: missing[0] } : {}), ...(unexpected[0] ? { unexpectedExample: unexpected[0] } : {}),
    };
  } finally {
    await probe?.close();
    await srv?.stop();
    rmSync(dir, { recursive: true, force: true });
    if (store === 'postgres') await dropDb(PG_DB);
  }
}

// ---------------------------------------------------------------- report

/** Least-squares slope of y over x. */
function slope(points: [number, number][]): number {
  const n = points.length;
  if (n < 2) return NaN;
  const mx = points.reduce((a, p) => a + p[0], 0) / n;
  const my = points.reduce((a, p) => a + p[1], 0) / n;
  let num = 0;
  let den = 0;
  for (const [x, y] of points) {
    num += (x - mx) * (y - my);
    den += (x - mx) ** 2;
  }
  return den > 0 ? num / den : NaN;
}

const f2 = (n: number) => (Number.isFinite(n) ? (n >= 0 ? '+' : '') + n.toFixed(2) : '–');

interface Summary {
  label: string;
  cells: string[];
  leak: string[];
}

function summarize(r: StoreResult): Summary {
  const load = r.samples.filter((s) => s.phase === 'load');
  const idle = r.samples.find((s) => s.phase === 'idle')!;
  const after = r.samples.find((s) => s.phase === 'after')!;
  const T = r.minutes * 60;
  const at = (t: number) => load.reduce((best, s) => (Math.abs(s.t - t) < Math.abs(best.t - t) ? s : best), load[0]!);
  const min1 = at(60);
  const last = load.at(-1)!;
  const lastMinute = load.filter((s) => s.t > last.t - 60);
  const secondHalf = load.filter((s) => s.t >= T / 2);
  const rssSlope = slope(secondHalf.map((s) => [s.t / 60, s.rssMiB]));
  const fdSlope = slope(secondHalf.map((s) => [s.t / 60, s.fds]));
  // Heap: the lowest reading per minute (the floor after collections), first vs last minute of load.
  const probeT = (l: ProbeLine) => (l.t - r.loadStartMs) / 1000;
  const heapFloor = (from: number, to: number) => Math.min(...r.probe.filter((l) => probeT(l) >= from && probeT(l) < to).map((l) => MiB(l.heapUsed)));
  const heapSecondHalf = r.probe.filter((l) => probeT(l) >= T / 2 && probeT(l) <= T).map((l): [number, number] => [probeT(l) / 60, MiB(l.heapUsed)]);
  const lastProbeIdle = r.probe.filter((l) => probeT(l) < 0).at(-1);
  const lastProbe = r.probe.at(-1);
  const o = r.load.outcomes;
  const byKind = new Map<string, string[]>();
  for (const [k, n] of Object.entries(o).sort()) {
    const [kind, st] = k.split(' ') as [string, string];
    const list = byKind.get(kind) ?? [];
    list.push(`${st}:${f0(n)}${EXPECTED[kind] !== st ? ' (!)' : ''}`);
    byKind.set(kind, list);
  }
  const statusCell = [...byKind].map(([k, v]) => `${k} ${v.join(' ')}`).join('; ');
  const stuck = (r.statuses.PENDING ?? 0) + (r.statuses.PROCESSING ?? 0);
  const allProcessed = r.missing === 0 && stuck === 0 && (r.statuses.FAILED ?? 0) === 0 && (r.statuses.PROCESSED ?? 0) === r.acceptedIds;
  const leak: string[] = [];
  if (rssSlope > 1) leak.push(`RSS climbs ${f2(rssSlope)} MiB/min over the second half`);
  // During the load the FD count follows the client's connections (up to --connections keep-alive
  // ones, more when answers slow down, plus the short-lived ones): only what is left after counts.
  if (after.fds > idle.fds + 2) leak.push(`FDs: idle ${idle.fds}, after ${after.fds} (slope under load ${f2(fdSlope)}/min)`);
  if (after.threads > idle.threads) leak.push(`threads: idle ${idle.threads}, after ${after.threads}`);
  if (Number.isFinite(after.timeouts) && after.timeouts > idle.timeouts + 2) leak.push(`timers: idle ${idle.timeouts}, after ${after.timeouts}`);
  if (after.inflightBodyBytes > 0) leak.push(`in-flight body bytes after the load: ${after.inflightBodyBytes}`);
  if (!allProcessed) leak.push(`rows: ${JSON.stringify(r.statuses)}, missing ${r.missing}${r.missingExample ? ` (e.g. ${r.missingExample})` : ''}`);
  if (r.unexpected) leak.push(`${r.unexpected} rows not acked with a 2xx (e.g. ${r.unexpectedExample})`);
  const errs = Object.entries(o).filter(([k]) => { const [kind, st] = k.split(' ') as [string, string]; return EXPECTED[kind] !== st; });
  if (errs.length) leak.push(`unexpected answers: ${errs.map(([k, n]) => `${k}:${n}`).join(', ')}`);
  const label = r.store === 'sqlite' ? 'SQLite' : 'PostgreSQL';
  return {
    label,
    leak,
    cells: [
      `${r.minutes} min × ${f0(r.rate)}/s: ${f0(r.load.sent)} sent, ok p99 last interval ${f1(last.okP99Ms)} ms`,
      `${f1(idle.rssMiB)} MiB`,
      `${f1(min1.rssMiB)} → ${f1(last.rssMiB)} MiB (last-minute mean ${f1(lastMinute.reduce((a, s) => a + s.rssMiB, 0) / lastMinute.length)}, max ${f1(Math.max(...load.map((s) => s.rssMiB)))})`,
      `${f2(rssSlope)} MiB/min`,
      r.probe.length ? `floor ${f1(heapFloor(0, 60))} → ${f1(heapFloor(T - 60, T))} MiB; slope ${f2(slope(heapSecondHalf))} MiB/min` : '– (no probe)',
      `${f1(after.rssMiB)} MiB`,
      `idle ${idle.fds} (${idle.socketFds} sockets); load ${load[0]!.fds} → ${last.fds} (max ${Math.max(...load.map((s) => s.fds))}, slope ${f2(fdSlope)}/min); after ${after.fds} (${after.socketFds} sockets)`,
      `idle ${idle.threads}; load ${load[0]!.threads} → ${last.threads}; after ${after.threads}`,
      lastProbe ? `timers ${lastProbeIdle?.resources.Timeout ?? '–'} → ${last.timeouts} → ${after.timeouts}; TCP ${lastProbeIdle?.resources.TCPSocketWrap ?? '–'} → ${last.tcpHandles} → ${after.tcpHandles}` : '–',
      `${f0(after.inflightBodyBytes)} B (max during load ${f0(Math.max(...load.map((s) => s.inflightBodyBytes)))} B)`,
      `max ${f0(Math.max(...load.map((s) => s.unfinished)))}; drained ${r.drained ? `in ${r.drainS.toFixed(1)} s` : `NOT within ${DRAIN_LIMIT_MS / 1000} s`}`,
      statusCell,
      `${f0(r.acceptedIds)} acked ids; ${f0(r.rows)} rows; ${Object.entries(r.statuses).map(([k, v]) => `${k} ${f0(v)}`).join(', ')}; missing ${r.missing}, not acked ${r.unexpected}`,
      allProcessed ? 'yes' : '**NO**',
      `${f1(Math.min(...load.map((s) => s.cpuPct)))}–${f1(Math.max(...load.map((s) => s.cpuPct)))} % (first ${f1(load[0]!.cpuPct)}, last ${f1(last.cpuPct)})`,
    ],
  };
}

const ROWS = ['run', 'RSS idle', 'RSS minute 1 → last sample', 'RSS slope, 2nd half', 'V8 heap used (probe)', 'RSS after drain', 'open FDs', 'threads', 'handles idle → last → after (probe)',
  'in-flight body bytes after', 'PENDING/PROCESSING during load', 'answers (kind status:count)', 'rows', 'every 2xx PROCESSED, none stuck', 'server CPU per interval'];

function timeline(r: StoreResult): string {
  const pick = r.samples.filter((s, i, a) => s.phase !== 'load' || Math.round(s.t) % 60 === 0 || i === a.length - 2 || Math.abs(s.t % 60) < SAMPLE_MS / 2000);
  return table(['phase', 't s', 'RSS MiB', 'heap MiB', 'FDs', 'sockets', 'threads', 'timers', 'CPU %', 'in-flight B', 'PENDING+PROCESSING', 'loop p99 ms', 'ok p99 ms'],
    pick.map((s) => [s.phase, f0(s.t), f1(s.rssMiB), f1(s.heapMiB), f0(s.fds), f0(s.socketFds), f0(s.threads), f0(s.timeouts), f0(s.cpuPct), f0(s.inflightBodyBytes), f0(s.unfinished), f1(s.loopP99Ms), f1(s.okP99Ms)]));
}

function render(results: StoreResult[]): string {
  const sums = results.map(summarize);
  const out: string[] = [];
  out.push(`## Soak ${new Date().toISOString().slice(0, 16).replace('T', ' ')} UTC: ${results.map((r) => r.store).join(' + ')}, ${MINUTES} min × ${RATE} req/s each (bench/soak.ts)`);
  out.push('');
  out.push(`\`serve\` with the workers on and a no-op handler (\`bench/noop-handlers.mjs\`), one Stripe endpoint (maxBodyBytes ${MAX_BODY_BYTES / 1024} KiB), log level warn. ` +
    `Open-loop mix: ${Object.entries(MIX).map(([k, v]) => `${k} ${(v! * 100).toFixed(1)}%`).join(', ')}, the rest distinct signed events of 1–13 KiB on ${args.connections} keep-alive connections ` +
    '(short / expect / oversized / aborted each on a connection of its own). Sampled every ' + `${SAMPLE_MS / 1000} s; ` +
    (PROBE ? 'heap and handles from bench/soak-probe.mjs preloaded into the server (not product code); ' : '') + '"after" = 5 s after the drain, client connections closed.');
  out.push('');
  out.push(table(['', ...sums.map((s) => s.label)], ROWS.map((row, i) => [row, ...sums.map((s) => s.cells[i]!)])));
  out.push('');
  for (const s of sums) out.push(`- ${s.label}: ${s.leak.length ? s.leak.join('; ') : 'no leak signal (RSS slope ≤ 1 MiB/min, FDs/threads/timers back to idle, every acked event PROCESSED)'}`);
  out.push('');
  for (const r of results) {
    out.push(`Timeline, ${r.store} (one sample a minute):`);
    out.push('');
    out.push(timeline(r));
    out.push('');
  }
  return out.join('\n');
}

// ---------------------------------------------------------------- main

buildChildren();
const results: StoreResult[] = [];
for (const [i, s] of stores.entries()) results.push(await soak(s, 7000 + i));
const md = render(results);
console.log('\n' + md);
if (args.write) {
  appendFileSync(join(ROOT, 'bench', 'RESULTS.md'), '\n' + md + '\n');
  console.log('appended to bench/RESULTS.md');
}
