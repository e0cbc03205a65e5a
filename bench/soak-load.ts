/**
 * The soak's load generator (bench/soak.ts forks it; spec as JSON in argv[2]): open loop at a
 * fixed rate for a fixed time, request i scheduled at i/rate, with a mix of what a receiver meets
 * in production, each request drawn at random (seeded) as one of:
 *
 *   event      a distinct, correctly signed Stripe-style event (1–13 KiB) on a keep-alive connection
 *   short      the same, but on a connection of its own with `Connection: close`
 *   expect     the same, on a connection of its own, sent with `Expect: 100-continue` (the body only
 *              after the server's `100 Continue`)
 *   dup        the exact bytes (body and signature) of a recent `event`
 *   badsig     a distinct event signed with the wrong secret (expect 401)
 *   oversized  a signed event above the endpoint's maxBodyBytes (expect 413); half declare their
 *              size in Content-Length, half are sent chunked (the server finds out while reading)
 *   aborted    Content-Length of the whole body, half of it sent, then the socket destroyed
 *   unknown    a signed event POSTed to an endpoint that does not exist (expect 404)
 *
 * Unlike bench/loadgen.ts (which builds a whole short step before its clock starts), bodies are
 * built and signed as they are sent: a soak lasts longer than the 300 s signature tolerance, and
 * minutes of bodies would not fit in memory. At the soak's modest rate that costs a few % of a core.
 *
 * Messages to the parent: 'progress' every `progressMs` (counts so far, latency of the last
 * interval), then 'result'. The distinct event ids that got a 2xx are written to `idsFile`, one a
 * line, so the parent can check each of them is in the database.
 */
import { connect } from 'node:net';
import { writeFileSync } from 'node:fs';
import { performance } from 'node:perf_hooks';
import { H1Pool } from './h1-client.js';
import { nearestRank } from './rank.js';
import { DEFAULT_SIZES, EventFactory, prng, stripeSignature } from './events.js';

export const KINDS = ['event', 'short', 'expect', 'dup', 'badsig', 'oversized', 'aborted', 'unknown'] as const;
export type Kind = (typeof KINDS)[number];

export interface SoakLoadSpec {
  readonly url: string;
  readonly path: string;
  readonly unknownPath: string;
  readonly secret: string;
  readonly rate: number;
  readonly durationS: number;
  /** Keep-alive connections of the `event`/`dup`/`badsig`/`unknown` requests. */
  readonly connections: number;
  /** Share of each kind but `event` (which takes the rest). */
  readonly mix: Readonly<Partial<Record<Kind, number>>>;
  readonly maxBodyBytes: number;
  readonly seed: number;
  readonly tag: string;
  readonly idsFile: string;
  readonly progressMs: number;
  /** After the schedule, outstanding requests get this long; then they count as `timeout`. */
  readonly drainS: number;
}

export interface SoakProgress {
  readonly elapsedS: number;
  readonly sent: number;
  readonly done: number;
  readonly inflight: number;
  /** `${kind} ${status or error}` → count, since the start (oversized as `oversized-cl` / `oversized-chunked`). */
  readonly outcomes: Record<string, number>;
  /** 2xx answers' latency over the last interval (scheduled send → response), ms. */
  readonly okP50: number;
  readonly okP99: number;
  readonly sendLagMaxMs: number;
}

export interface SoakLoadResult extends SoakProgress {
  readonly acceptedIds: number;
  readonly loadgenCpuMs: number;
}

export type SoakLoadMessage = { type: 'progress'; progress: SoakProgress } | { type: 'result'; result: SoakLoadResult } | { type: 'error'; message: string };

/** The status of a raw request, or an error code. */
type Outcome = { status: number; body: string } | { error: string };

const CRLF2 = Buffer.from('\r\n\r\n');

/**
 * One request on a connection of its own, closed after the answer (or the abort): the short-lived
 * connections, `Expect: 100-continue`, chunked uploads and aborted uploads, which the keep-alive
 * pool does not do. `parts` are written in order; with `expectContinue` they wait for the 100.
 * `abortAfterParts` destroys the socket after writing that many parts (and a short pause, so the
 * server has started reading the body).
 */
function rawRequest(host: string, port: number, head: Buffer, parts: Buffer[], o: { expectContinue?: boolean; abortAfterParts?: number; timeoutMs?: number } = {}): Promise<Outcome> {
  return new Promise((resolve) => {
    const socket = connect({ host, port, noDelay: true });
    let buf: Buffer = Buffer.alloc(0);
    let status = 0;
    let bodyAt = -1;
    let length = -1;
    let settled = false;
    let bodySent = false;
    const done = (r: Outcome) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      socket.destroy();
      resolve(r);
    };
    const timer = setTimeout(() => done({ error: 'timeout' }), o.timeoutMs ?? 30_000);
    const sendBody = () => {
      if (bodySent) return;
      bodySent = true;
      const n = o.abortAfterParts ?? parts.length;
      for (let i = 0; i < n; i++) socket.write(parts[i]!);
      if (o.abortAfterParts !== undefined) setTimeout(() => done({ error: 'aborted' }), 20);
    };
    socket.on('connect', () => {
      socket.write(head);
      if (!o.expectContinue) sendBody();
    });
    socket.on('data', (chunk: Buffer) => {
      buf = buf.length ? Buffer.concat([buf, chunk]) : chunk;
      for (;;) {
        if (bodyAt < 0) {
          const end = buf.indexOf(CRLF2);
          if (end < 0) return;
          const lines = buf.toString('latin1', 0, end).split('\r\n');
          const m = /^HTTP\/1\.[01] (\d{3})/.exec(lines[0]!);
          if (!m) return done({ error: 'EH1PROTO' });
          const st = Number(m[1]);
          if (st === 100) {
            buf = buf.subarray(end + 4);
            sendBody();
            continue;
          }
          status = st;
          length = 0;
          for (const l of lines.slice(1)) if (/^content-length:/i.test(l)) length = Number(l.slice(l.indexOf(':') + 1).trim());
          bodyAt = end + 4;
        }
        if (buf.length >= bodyAt + length) return done({ status, body: buf.toString('utf8', bodyAt, bodyAt + length) });
        return;
      }
    });
    // A server that answers before reading the whole body (413) may close while we still write:
    // the answer, once its head is in, is the outcome.
    const ended = (code: string) => (status ? done({ status, body: bodyAt >= 0 ? buf.toString('utf8', bodyAt) : '' }) : done({ error: code }));
    socket.on('error', (err: NodeJS.ErrnoException) => ended(err.code ?? 'error'));
    socket.on('close', () => ended('ECONNRESET'));
  });
}

function percentile(a: number[], q: number): number {
  if (a.length === 0) return NaN;
  const s = Float64Array.from(a).sort();
  return s[nearestRank(q, s.length)]!;
}

function chunked(body: Buffer, size: number): Buffer[] {
  const out: Buffer[] = [];
  for (let i = 0; i < body.length; i += size) {
    const c = body.subarray(i, i + size);
    out.push(Buffer.concat([Buffer.from(`${c.length.toString(16)}\r\n`), c, Buffer.from('\r\n')]));
  }
  out.push(Buffer.from('0\r\n\r\n'));
  return out;
}

async function run(spec: SoakLoadSpec): Promise<SoakLoadResult> {
  const u = new URL(spec.url);
  const host = u.hostname;
  const port = Number(u.port);
  const pool = new H1Pool(spec.url, spec.connections);
  const factory = new EventFactory(DEFAULT_SIZES);
  // Above the endpoint's limit: 1.1× to 3× of it (built from the same kind of items).
  const bigFactory = new EventFactory({ minBytes: Math.ceil(spec.maxBodyBytes * 1.1), maxBytes: spec.maxBodyBytes * 3, largeBytes: spec.maxBodyBytes * 4 });
  const rnd = prng(spec.seed);
  const wrongSecret = spec.secret + '_wrong';
  const cumulative: [Kind, number][] = [];
  let acc = 0;
  for (const k of KINDS) {
    if (k === 'event') continue;
    acc += spec.mix[k] ?? 0;
    cumulative.push([k, acc]);
  }
  if (acc >= 1) throw new Error('soak-load: the mix leaves nothing for plain events');
  const pick = (): Kind => {
    const r = rnd();
    for (const [k, c] of cumulative) if (r < c) return k;
    return 'event';
  };

  const RING = 512;
  const ring: { head: Buffer; body: Buffer; id: string }[] = [];
  const accepted = new Set<string>();
  const outcomes: Record<string, number> = {};
  let okLat: number[] = [];
  let maxLag = 0;
  let sent = 0;
  let doneCount = 0;
  let inflight = 0;
  const total = Math.round(spec.rate * spec.durationS);
  const interval = 1000 / spec.rate;
  const cpu0 = process.cpuUsage();
  const t0 = performance.now() + 50;
  const deadline = t0 + spec.durationS * 1000 + spec.drainS * 1000;
  let finished = false;
  let resolveDone!: () => void;
  const allDone = new Promise<void>((r) => (resolveDone = r));

  const finish = (kind: string, id: string | null, scheduled: number, o: Outcome) => {
    if (finished) return;
    inflight--;
    doneCount++;
    const key = 'status' in o ? `${kind} ${o.status}` : `${kind} ${o.error}`;
    outcomes[key] = (outcomes[key] ?? 0) + 1;
    if ('status' in o && o.status >= 200 && o.status < 300) {
      okLat.push(performance.now() - scheduled);
      if (id !== null) accepted.add(id);
    }
    if (sent >= total && inflight === 0) end();
  };

  const signedHead = (path: string, body: Buffer, secret: string, extra: string[] = []) =>
    pool.head(path, ['content-type: application/json', `stripe-signature: ${stripeSignature(secret, body, Math.floor(Date.now() / 1000))}`, ...extra], body.length);

  const dispatch = (i: number, scheduled: number) => {
    let kind = pick();
    if (kind === 'dup' && ring.length === 0) kind = 'event'; // nothing to repeat yet
    const id = `${spec.tag}_${kind}_${i}`;
    const evtId = `evt_${id}`;
    let p: Promise<Outcome>;
    let countsAs: string | null = evtId;
    switch (kind) {
      case 'event': {
        const body = factory.make(id, false, rnd);
        const head = signedHead(spec.path, body, spec.secret);
        if (ring.length < RING) ring.push({ head, body, id: evtId });
        else ring[i % RING] = { head, body, id: evtId };
        p = pool.send(head, body);
        break;
      }
      case 'dup': {
        const prev = ring[Math.floor(rnd() * ring.length)]!;
        countsAs = prev.id;
        p = pool.send(prev.head, prev.body);
        break;
      }
      case 'badsig': {
        const body = factory.make(id, false, rnd);
        p = pool.send(signedHead(spec.path, body, wrongSecret), body);
        countsAs = null;
        break;
      }
      case 'unknown': {
        const body = factory.make(id, false, rnd);
        p = pool.send(signedHead(spec.unknownPath, body, spec.secret), body);
        countsAs = null;
        break;
      }
      case 'short': {
        const body = factory.make(id, false, rnd);
        p = rawRequest(host, port, signedHead(spec.path, body, spec.secret, ['connection: close']), [body]);
        break;
      }
      case 'expect': {
        const body = factory.make(id, false, rnd);
        p = rawRequest(host, port, signedHead(spec.path, body, spec.secret, ['expect: 100-continue']), [body], { expectContinue: true });
        break;
      }
      case 'oversized': {
        const body = bigFactory.make(id, false, rnd);
        const sig = stripeSignature(spec.secret, body, Math.floor(Date.now() / 1000));
        if (i % 2 === 0) {
          p = rawRequest(host, port, signedHead(spec.path, body, spec.secret), [body]);
        } else {
          const head = Buffer.from(`POST ${spec.path} HTTP/1.1\r\nHost: ${u.host}\r\ncontent-type: application/json\r\nstripe-signature: ${sig}\r\ntransfer-encoding: chunked\r\n\r\n`, 'latin1');
          p = rawRequest(host, port, head, chunked(body, 16 * 1024));
        }
        countsAs = null;
        break;
      }
      case 'aborted': {
        const body = factory.make(id, false, rnd);
        const half = Math.floor(body.length / 2);
        p = rawRequest(host, port, signedHead(spec.path, body, spec.secret), [body.subarray(0, half), body.subarray(half)], { abortAfterParts: 1 });
        countsAs = null;
        break;
      }
    }
    inflight++;
    sent++;
    // The two oversized variants are counted apart: only the declared one can be refused before its body.
    const label = kind === 'oversized' ? (i % 2 === 0 ? 'oversized-cl' : 'oversized-chunked') : kind;
    p.then(
      (o) => finish(label, countsAs, scheduled, o),
      (err: unknown) => finish(label, countsAs, scheduled, { error: (err as { code?: string }).code ?? 'error' }),
    );
  };

  let next = 0;
  const pump = () => {
    if (finished) return;
    const now = performance.now();
    if (now >= deadline) return end();
    while (next < total) {
      const scheduled = t0 + next * interval;
      if (scheduled > now) break;
      maxLag = Math.max(maxLag, now - scheduled);
      dispatch(next++, scheduled);
    }
  };

  const snapshot = (): SoakProgress => {
    const p = { elapsedS: (performance.now() - t0) / 1000, sent, done: doneCount, inflight, outcomes: { ...outcomes }, okP50: percentile(okLat, 0.5), okP99: percentile(okLat, 0.99), sendLagMaxMs: maxLag };
    okLat = [];
    maxLag = 0;
    return p;
  };

  const timer = setInterval(pump, 1);
  const progress = setInterval(() => process.send?.({ type: 'progress', progress: snapshot() } satisfies SoakLoadMessage), spec.progressMs);

  function end(): void {
    if (finished) return;
    finished = true;
    clearInterval(timer);
    clearInterval(progress);
    resolveDone();
  }

  await allDone;
  if (inflight > 0) outcomes['timeout'] = inflight;
  pool.destroy();
  writeFileSync(spec.idsFile, [...accepted].join('\n') + '\n');
  const u1 = process.cpuUsage(cpu0);
  return { ...snapshot(), acceptedIds: accepted.size, loadgenCpuMs: (u1.user + u1.system) / 1000 };
}

async function main(): Promise<void> {
  const spec = JSON.parse(process.argv[2] ?? '{}') as SoakLoadSpec;
  if (!/^127\.0\.0\.1$/.test(new URL(spec.url).hostname)) throw new Error('soak-load only targets 127.0.0.1');
  const result = await run(spec);
  process.send?.({ type: 'result', result } satisfies SoakLoadMessage);
}

main().then(
  () => process.disconnect?.(),
  (err: unknown) => {
    process.send?.({ type: 'error', message: (err as Error).stack ?? String(err) } satisfies SoakLoadMessage);
    process.exitCode = 1;
    process.disconnect?.();
  },
);
