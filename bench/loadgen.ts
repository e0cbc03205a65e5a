/**
 * The load generator, run as its own process (forked by bench/run.ts; spec as JSON in argv[2]).
 *
 * mode "rate" — open loop: request i has a fixed SCHEDULED send time, whatever happened to
 *   earlier requests; its latency is measured from that scheduled time to the end of the response,
 *   so time spent queued (behind the connection cap, or in a loadgen that fell behind) counts.
 *   Warm-up: the rate ramps linearly from 0 to `rate` over the first half of `warmupS`, then holds
 *   for the second half (a cold process is not hit by the full rate at once; the queue reaches
 *   its steady state before measuring). Then the measured window at exactly `rate`: request
 *   warmupN + k is scheduled at warmupS + k/rate. After the window no new requests are
 *   scheduled and outstanding measured ones get `drainS` seconds, then count as timeouts.
 * mode "flood" — closed loop: `concurrency` workers each post a fresh 1 MiB event back to back
 *   for `durationS` (a short pause after a 503), to test that the server's memory stays bounded.
 *
 * It sends IPC messages 'window-start' / 'window-end' so the parent samples server CPU over
 * exactly the measured window, then one 'result' message.
 */
import { writeFileSync } from 'node:fs';
import { performance } from 'node:perf_hooks';
import { Pool } from 'undici';
import { H1Pool } from './h1-client.js';
import { nearestRank } from './rank.js';
import { EventFactory, LARGE_BODY_BYTES, prng, stripeSignature, DEFAULT_SIZES } from './events.js';

export interface RateSpec {
  readonly mode: 'rate';
  readonly url: string;
  readonly path: string;
  readonly secret: string;
  readonly rate: number;
  readonly warmupS: number;
  readonly durationS: number;
  readonly drainS: number;
  readonly connections: number;
  readonly dupFraction: number;
  readonly largeFraction: number;
  readonly seed: number;
  readonly tag: string;
  /** If set, write per-100 ms latency buckets (by scheduled time) of the measured window here, as CSV. */
  readonly timelineFile?: string;
}

export interface FloodSpec {
  readonly mode: 'flood';
  readonly url: string;
  readonly path: string;
  readonly secret: string;
  readonly concurrency: number;
  readonly durationS: number;
  readonly backoffMs: number;
  readonly seed: number;
  readonly tag: string;
}

export type LoadSpec = RateSpec | FloodSpec;

export interface Percentiles {
  readonly p50: number;
  readonly p95: number;
  readonly p99: number;
  readonly max: number;
}

export interface RateResult {
  readonly mode: 'rate';
  readonly offered: number;
  /** 2xx responses completed inside the measured window, per second. */
  readonly achieved: number;
  readonly measured: number;
  readonly ok: number;
  /** status code or error code → count, for measured requests. */
  readonly outcomes: Record<string, number>;
  /** ms, from scheduled send time to end of response; timeouts enter at their lower bound. */
  readonly latency: Percentiles;
  /** ms, how late requests were actually handed to the client (connection cap / loadgen lag). */
  readonly sendLag: Percentiles;
  readonly meanBodyBytes: number;
  readonly largeSent: number;
  readonly dupSent: number;
  readonly dupAcked: number;
  /** ms of loadgen CPU during the window. */
  readonly loadgenCpuMs: number;
  readonly windowMs: number;
  /**
   * 100 ms slices of the window (by scheduled send time) whose MEDIAN request took over
   * STALL_MS: moments when everything waited, not a few slow requests. A handful of them is
   * enough to set a step's p99.
   */
  readonly stalls: { readonly slices: number; readonly of: number };
}

export interface FloodResult {
  readonly mode: 'flood';
  readonly concurrency: number;
  readonly sent: number;
  readonly outcomes: Record<string, number>;
  readonly retryAfter503: number;
  readonly okLatency: Percentiles;
  readonly acceptedMiBps: number;
  readonly loadgenCpuMs: number;
  readonly windowMs: number;
}

export type LoadResult = RateResult | FloodResult;

export type LoadMessage = { type: 'window-start' } | { type: 'window-end' } | { type: 'result'; result: LoadResult } | { type: 'error'; message: string };

function percentiles(values: Float64Array | number[]): Percentiles {
  const a = Float64Array.from(values).sort();
  const n = a.length;
  if (n === 0) return { p50: NaN, p95: NaN, p99: NaN, max: NaN };
  const at = (q: number) => a[nearestRank(q, n)]!;
  return { p50: at(0.5), p95: at(0.95), p99: at(0.99), max: a[n - 1]! };
}

function send(m: LoadMessage): void {
  process.send?.(m);
}

/** Keep-alive connections, one request at a time on each (like a provider's sender). */
function newPool(url: string, connections: number): Pool {
  return new Pool(url, { connections, pipelining: 1, headersTimeout: 60_000, bodyTimeout: 60_000, keepAliveTimeout: 60_000 });
}

function errorCode(err: unknown): string {
  const e = err as { code?: string; name?: string };
  return `err:${e.code ?? e.name ?? 'unknown'}`;
}

interface Prepared {
  readonly head: Buffer;
  readonly body: Buffer;
  readonly dup: boolean;
  readonly large: boolean;
}

/**
 * The step's requests, in send order: each a distinct signed event, or (dupFraction) an exact
 * resend of a recent ordinary one — its body and signature, so the server sees the same bytes.
 */
function prepareRequests(spec: RateSpec, factory: EventFactory, rnd: () => number, pool: H1Pool, total: number): (Prepared | undefined)[] {
  const RING = 1024;
  const ring: Prepared[] = [];
  let ringPos = 0;
  const nowSec = Math.floor(Date.now() / 1000);
  const out: (Prepared | undefined)[] = new Array(total);
  for (let i = 0; i < total; i++) {
    if (ring.length > 0 && rnd() < spec.dupFraction) {
      const prev = ring[Math.floor(rnd() * ring.length)]!;
      out[i] = { ...prev, dup: true };
      continue;
    }
    // The warm-up opens with a 1 MiB body (when the mix has any): a fresh server's first one is a
    // one-off cost (its helper thread starts, and code optimised on small one-chunk bodies meets a
    // body in many chunks), which the warm-up is there to take before the window. Left to chance
    // it came 0.2-1.3 s into the ramp, where the server was busy enough to queue behind it for up
    // to ~1 s, on a slow box into the window (bench/RESULTS.md, 2026-12-07 18:45). The draw is
    // kept, so the rest of a seed's schedule is unchanged.
    const large = rnd() < spec.largeFraction || (i === 0 && spec.largeFraction > 0);
    const body = factory.make(`${spec.tag}_${i}`, large, rnd, nowSec);
    const sig = stripeSignature(spec.secret, body, nowSec);
    const req = { head: pool.head(spec.path, ['content-type: application/json', `stripe-signature: ${sig}`], body.length), body, dup: false, large };
    out[i] = req;
    if (!large) {
      if (ring.length < RING) ring.push(req);
      else ring[ringPos++ % RING] = req;
    }
  }
  return out;
}

async function runRate(spec: RateSpec): Promise<RateResult> {
  // The lean client (bench/h1-client.ts says why); the flood below keeps undici.
  const pool = new H1Pool(spec.url, spec.connections);
  const factory = new EventFactory(DEFAULT_SIZES);
  const rnd = prng(spec.seed);
  const interval = 1000 / spec.rate;
  const rampS = spec.warmupS / 2;
  const rampN = Math.floor((spec.rate * rampS) / 2);
  const warmupN = rampN + Math.round(spec.rate * (spec.warmupS - rampS));
  /** Scheduled send time of request i, ms after t0. */
  const at = (i: number): number => {
    if (i < rampN) return Math.sqrt((2 * rampS * i) / spec.rate) * 1000;
    if (i < warmupN) return rampS * 1000 + (i - rampN) * interval;
    return spec.warmupS * 1000 + (i - warmupN) * interval;
  };
  const measuredN = Math.round(spec.rate * spec.durationS);
  const total = warmupN + measuredN;

  const latency = new Float64Array(measuredN).fill(NaN);
  // The warm-up's latencies, for --timeline only: a cold server's backlog can last into the window.
  const warmLatency = spec.timelineFile ? new Float64Array(warmupN).fill(NaN) : undefined;
  const sendLag = new Float64Array(measuredN);
  const outcomes: Record<string, number> = {};
  let okInWindow = 0;
  let ok = 0;
  let bodyBytes = 0;
  let dupAcked = 0;

  // Every request of the step is built and signed here, before t0: body assembly and the HMAC
  // (a 1 MiB body costs ~1.5 ms of both) would otherwise run inside the measured window, on the
  // two cores the server is measured on, and stall the sends behind them. Signatures carry this
  // moment's timestamp; a step lasts well under the 300 s tolerance.
  const requests = prepareRequests(spec, factory, rnd, pool, total);
  // Which requests carry a 1 MiB body, for --timeline: a seed fixes where they cluster, and a
  // slice holding several can be slow for every request in it (bench/README.md: the load's seed).
  const largeAt = spec.timelineFile ? Uint8Array.from(requests, (r) => (r!.large ? 1 : 0)) : undefined;
  let largeSent = 0;
  let dupSent = 0;
  for (let i = warmupN; i < total; i++) {
    if (requests[i]!.dup) dupSent++;
    else if (requests[i]!.large) largeSent++;
  }

  const t0 = performance.now() + 50;
  const windowStart = t0 + at(warmupN);
  const windowEnd = windowStart + measuredN * interval;
  const deadline = windowEnd + spec.drainS * 1000;
  let next = 0;
  let inflight = 0;
  let finished = false;
  let cpuStart = process.cpuUsage();
  let cpuWindow = 0;

  let resolveDone!: () => void;
  const done = new Promise<void>((r) => (resolveDone = r));

  const complete = (i: number, scheduled: number, key: string, isOk: boolean) => {
    if (finished) return;
    inflight--;
    const now = performance.now();
    if (isOk && now >= windowStart && now < windowEnd) okInWindow++;
    const m = i - warmupN;
    if (m >= 0) {
      latency[m] = now - scheduled;
      outcomes[key] = (outcomes[key] ?? 0) + 1;
      if (isOk) ok++;
    } else if (warmLatency) warmLatency[i] = now - scheduled;
    pump();
  };

  const dispatch = (i: number, scheduled: number, now: number) => {
    const { head, body } = requests[i]!;
    requests[i] = undefined; // sent: its bytes can go (a duplicate holds its own reference)
    const m = i - warmupN;
    if (m >= 0) {
      sendLag[m] = now - scheduled;
      bodyBytes += body.length;
    }
    inflight++;
    pool
      .send(head, body)
      .then(
        (res) => {
          const isOk = res.status >= 200 && res.status < 300;
          if (isOk && m >= 0 && res.body.includes('"duplicate":true')) dupAcked++; // either copy of a racing pair may be the one
          complete(i, scheduled, String(res.status), isOk);
        },
        (err: unknown) => complete(i, scheduled, errorCode(err), false),
      );
  };

  const pump = () => {
    if (finished) return;
    const now = performance.now();
    if (now >= deadline) return finish();
    while (next < total && inflight < spec.connections) {
      const scheduled = t0 + at(next);
      if (scheduled > now) break;
      dispatch(next++, scheduled, now);
    }
    if (next >= total && inflight === 0) finish();
  };

  const finish = () => {
    if (finished) return;
    finished = true;
    clearInterval(timer);
    resolveDone();
  };

  const startTimer = setTimeout(() => {
    cpuStart = process.cpuUsage();
    send({ type: 'window-start' });
  }, Math.max(0, windowStart - performance.now()));
  const endTimer = setTimeout(() => {
    const u = process.cpuUsage(cpuStart);
    cpuWindow = (u.user + u.system) / 1000;
    send({ type: 'window-end' });
  }, Math.max(0, windowEnd - performance.now()));
  const timer = setInterval(pump, 1);
  await done;
  clearTimeout(startTimer);
  clearTimeout(endTimer);
  if (cpuWindow === 0) {
    const u = process.cpuUsage(cpuStart);
    cpuWindow = (u.user + u.system) / 1000;
    send({ type: 'window-end' });
  }

  // Requests that never finished (or were never sent) within the drain: timeouts, at their lower bound.
  const end = Math.max(performance.now(), deadline);
  for (let m = 0; m < measuredN; m++) {
    if (!Number.isNaN(latency[m]!)) continue;
    latency[m] = end - (windowStart + m * interval);
    outcomes.timeout = (outcomes.timeout ?? 0) + 1;
  }
  pool.destroy();
  const perSlice = slices(latency, interval, largeAt?.subarray(warmupN));
  if (spec.timelineFile) writeTimeline(spec.timelineFile, [...warmUpSlices(warmLatency!, (i) => at(i) - at(warmupN), largeAt!), ...perSlice], windowStart);

  const sentMeasured = Math.max(0, Math.min(next, total) - warmupN);
  return {
    mode: 'rate',
    offered: spec.rate,
    achieved: okInWindow / spec.durationS,
    measured: measuredN,
    ok,
    outcomes,
    latency: percentiles(latency),
    sendLag: percentiles(sendLag.subarray(0, sentMeasured)),
    meanBodyBytes: sentMeasured > 0 ? bodyBytes / sentMeasured : 0,
    largeSent,
    dupSent,
    dupAcked,
    loadgenCpuMs: cpuWindow,
    windowMs: windowEnd - windowStart,
    stalls: { slices: perSlice.filter((w) => w.p.p50 > STALL_MS).length, of: perSlice.length },
  };
}

/** The 2,000 req/s line's p99 target: a slice whose median is past it stalled as a whole. */
const STALL_MS = 50;

/** Latency per 100 ms slice of the window, by scheduled send time. */
function slices(latency: Float64Array, interval: number, largeAt?: Uint8Array): { startMs: number; requests: number; large: number; p: Percentiles }[] {
  const per = Math.max(1, Math.round(100 / interval));
  const out = [];
  for (let i = 0; i < latency.length; i += per) {
    const large = largeAt ? largeAt.subarray(i, i + per).reduce((n, l) => n + l, 0) : 0;
    out.push({ startMs: i * interval, requests: Math.min(per, latency.length - i), large, p: percentiles(latency.subarray(i, i + per)) });
  }
  return out;
}

/** The warm-up's requests in 100 ms slices by scheduled time (its rate ramps), before the window: negative start times. */
function warmUpSlices(latency: Float64Array, sinceWindowMs: (i: number) => number, largeAt: Uint8Array): ReturnType<typeof slices> {
  const bySlice = new Map<number, { values: number[]; large: number }>();
  for (let i = 0; i < latency.length; i++) {
    if (Number.isNaN(latency[i]!)) continue; // not answered before the step ended
    const start = Math.floor(sinceWindowMs(i) / 100) * 100;
    let slice = bySlice.get(start);
    if (!slice) bySlice.set(start, (slice = { values: [], large: 0 }));
    slice.values.push(latency[i]!);
    slice.large += largeAt[i]!;
  }
  return [...bySlice].sort((a, b) => a[0] - b[0]).map(([startMs, { values, large }]) => ({ startMs, requests: values.length, large, p: percentiles(values) }));
}

function writeTimeline(file: string, perSlice: ReturnType<typeof slices>, windowStart: number): void {
  // epoch_ms lines a window up with a server's own timestamped logs (BENCH_KEEP_LOGS).
  const epoch0 = performance.timeOrigin + windowStart;
  const lines = ['t_ms,epoch_ms,requests,p50_ms,p99_ms,max_ms,large_1mib'];
  for (const { startMs, requests, large, p } of perSlice) {
    lines.push(`${Math.round(startMs)},${Math.round(epoch0 + startMs)},${requests},${p.p50.toFixed(2)},${p.p99.toFixed(2)},${p.max.toFixed(2)},${large}`);
  }
  writeFileSync(file, lines.join('\n') + '\n');
}

async function runFlood(spec: FloodSpec): Promise<FloodResult> {
  const pool = newPool(spec.url, spec.concurrency);
  const factory = new EventFactory(DEFAULT_SIZES);
  const rnd = prng(spec.seed);
  const outcomes: Record<string, number> = {};
  const okLat: number[] = [];
  let sent = 0;
  let retryAfter503 = 0;
  let acceptedBytes = 0;
  const start = performance.now();
  const deadline = start + spec.durationS * 1000;
  const cpu0 = process.cpuUsage();
  send({ type: 'window-start' });
  const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

  const worker = async (w: number) => {
    for (let n = 0; performance.now() < deadline; n++) {
      const t = Math.floor(Date.now() / 1000);
      const body = factory.make(`${spec.tag}_f${w}_${n}`, true, rnd, t);
      const sig = stripeSignature(spec.secret, body, t);
      const began = performance.now();
      sent++;
      let key: string;
      let backoff = 0;
      try {
        const res = await pool.request({ path: spec.path, method: 'POST', headers: { 'content-type': 'application/json', 'stripe-signature': sig }, body });
        await res.body.text();
        key = String(res.statusCode);
        if (res.statusCode >= 200 && res.statusCode < 300) {
          okLat.push(performance.now() - began);
          acceptedBytes += body.length;
        } else {
          backoff = spec.backoffMs;
          if (res.statusCode === 503 && res.headers['retry-after'] !== undefined) retryAfter503++;
        }
      } catch (err) {
        key = errorCode(err);
        backoff = spec.backoffMs;
      }
      outcomes[key] = (outcomes[key] ?? 0) + 1;
      if (backoff) await sleep(backoff);
    }
  };
  await Promise.all(Array.from({ length: spec.concurrency }, (_, w) => worker(w)));
  const windowMs = performance.now() - start;
  const u = process.cpuUsage(cpu0);
  send({ type: 'window-end' });
  await pool.destroy().catch(() => undefined);
  return {
    mode: 'flood',
    concurrency: spec.concurrency,
    sent,
    outcomes,
    retryAfter503,
    okLatency: percentiles(okLat),
    acceptedMiBps: acceptedBytes / LARGE_BODY_BYTES / (windowMs / 1000),
    loadgenCpuMs: (u.user + u.system) / 1000,
    windowMs,
  };
}

async function main(): Promise<void> {
  const spec = JSON.parse(process.argv[2] ?? '{}') as LoadSpec;
  if (!spec.url || !new URL(spec.url).hostname.match(/^127\.0\.0\.1$/)) throw new Error('loadgen only targets 127.0.0.1');
  const result = spec.mode === 'rate' ? await runRate(spec) : await runFlood(spec);
  send({ type: 'result', result });
}

main().then(
  () => process.disconnect?.(),
  (err: unknown) => {
    send({ type: 'error', message: (err as Error).stack ?? String(err) });
    process.exitCode = 1;
    process.disconnect?.();
  },
);
