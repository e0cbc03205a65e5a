import { fork } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import type { LoadMessage, RateResult, RateSpec } from '../../bench/loadgen.js';

/**
 * Coordinated omission: when the server is slower than the offered rate, the load generator must
 * keep its schedule and charge each request the time it waited for a connection, not measure
 * only from when a connection freed up.
 */
describe('bench load generator, open loop', () => {
  let server: Server | undefined;
  afterEach(() => new Promise<void>((r) => (server ? server.close(() => r()) : r())));

  function runLoadgen(spec: RateSpec): Promise<RateResult> {
    const child = fork('bench/loadgen.ts', [JSON.stringify(spec)], { execArgv: ['--import', 'tsx'], stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
    return new Promise((res, rej) => {
      child.on('message', (m: LoadMessage) => {
        if (m.type === 'result') res(m.result as RateResult);
        else if (m.type === 'error') rej(new Error(m.message));
      });
      child.once('exit', (code) => rej(new Error(`loadgen exited ${code}`)));
    });
  }

  /** A server that answers 200 and records each body's size in arrival order. */
  async function sizeRecordingServer(): Promise<{ sizes: number[]; url: string }> {
    const sizes: number[] = [];
    server = createServer((req, res) => {
      let n = 0;
      req.on('data', (c: Buffer) => (n += c.length));
      req.on('end', () => {
        sizes.push(n);
        res.writeHead(200, { 'content-length': '2' }).end('{}');
      });
    });
    await new Promise<void>((r) => server!.listen(0, '127.0.0.1', r));
    return { sizes, url: `http://127.0.0.1:${(server.address() as AddressInfo).port}` };
  }

  it('counts the wait behind an exhausted connection pool from the scheduled send time', async () => {
    // 100 ms per request on each of 2 connections: 20 req/s of capacity, offered 40 req/s for 2 s.
    server = createServer((req, res) => {
      req.resume();
      req.on('end', () => setTimeout(() => res.writeHead(200, { 'content-length': '2' }).end('{}'), 100));
    });
    await new Promise<void>((r) => server!.listen(0, '127.0.0.1', r));
    const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    const r = await runLoadgen({
      mode: 'rate', url, path: '/x', secret: 'whsec_test', rate: 40, warmupS: 0, durationS: 2, drainS: 10, connections: 2,
      dupFraction: 0, largeFraction: 0, seed: 1, tag: 'ol',
    });
    expect(r.measured).toBe(80);
    expect(r.ok).toBe(80);
    // Closed loop would report ~100 ms for every request. Open loop: the k-th request waits for
    // k/2 × 100 ms of service minus its schedule offset k × 25 ms, so the last waits ~2 s.
    expect(r.latency.p50).toBeGreaterThan(800);
    expect(r.latency.max).toBeGreaterThan(1800);
    expect(r.sendLag.max).toBeGreaterThan(1700);
    expect(r.achieved).toBeLessThan(25);
  }, 30_000);

  it('opens the warm-up with a 1 MiB body when the mix has any, and sends none with --large-fraction 0', async () => {
    const { sizes, url } = await sizeRecordingServer();
    const spec = { mode: 'rate', url, path: '/x', secret: 'whsec_test', rate: 40, warmupS: 0.5, durationS: 0.5, drainS: 10, connections: 1, dupFraction: 0, seed: 3, tag: 'first' } as const;
    const MiB = 1024 * 1024;
    // 0.1 %: over these 30 requests the seed's own draw gives none, so the one is the warm-up's.
    await runLoadgen({ ...spec, largeFraction: 0.001 });
    expect(sizes[0]).toBe(MiB);
    expect(sizes.slice(1).every((n) => n < MiB)).toBe(true);
    sizes.length = 0;
    await runLoadgen({ ...spec, largeFraction: 0 });
    expect(sizes.length).toBeGreaterThan(20);
    expect(sizes.every((n) => n < MiB)).toBe(true);
  }, 30_000);

  it("--timeline counts each slice's 1 MiB bodies where the server received them", async () => {
    // The server records each body's size in arrival order; on one connection the loadgen sends
    // in schedule order, so arrival order is schedule order.
    const { sizes, url } = await sizeRecordingServer();
    const dir = mkdtempSync(join(tmpdir(), 'wi-timeline-'));
    const timelineFile = join(dir, 'step.csv');
    try {
      const r = await runLoadgen({
        mode: 'rate', url, path: '/x', secret: 'whsec_test', rate: 50, warmupS: 0, durationS: 2, drainS: 10, connections: 1,
        dupFraction: 0, largeFraction: 0.3, seed: 5, tag: 'tl', timelineFile,
      });
      expect(r.ok).toBe(100);
      const [head, ...rows] = readFileSync(timelineFile, 'utf8').trim().split('\n');
      expect(head!.split(',')).toEqual(['t_ms', 'epoch_ms', 'requests', 'p50_ms', 'p99_ms', 'max_ms', 'large_1mib']);
      // 5 requests per 100 ms slice at 50 req/s: slice k holds requests 5k..5k+4.
      const counted = rows.map((line) => Number(line.split(',')[6]));
      const received = Array.from({ length: rows.length }, (_, k) => sizes.slice(5 * k, 5 * k + 5).filter((n) => n >= 1024 * 1024).length);
      expect(counted).toEqual(received);
      expect(counted.reduce((a, b) => a + b, 0)).toBeGreaterThan(0);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }, 30_000);
});
