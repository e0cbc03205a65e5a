import { createServer, type IncomingMessage, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import pino from 'pino';
import { Webhook } from 'standardwebhooks';
import { expect } from 'vitest';
import { startApp } from '../../src/app.js';
import { parseConfig } from '../../src/config/schema.js';
import { stripeEvent, stripeHeaders } from './events.js';
import { post } from './http.js';
import { scrape } from './metric-samples.js';

export const FORWARD_SECRET = `whsec_${Buffer.from('forward-secret-for-tests-32bytes').toString('base64')}`;

/** Polls until fn returns a truthy value (or throws the last error after timeoutMs). */
export async function waitFor<T>(fn: () => Promise<T> | T, timeoutMs = 10_000, what = 'condition'): Promise<NonNullable<T>> {
  const deadline = Date.now() + timeoutMs;
  let last: unknown;
  for (;;) {
    try {
      const v = await fn();
      if (v) return v as NonNullable<T>;
    } catch (err) {
      last = err;
    }
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}${last ? `: ${(last as Error).message}` : ''}`);
    await new Promise((r) => setTimeout(r, 25));
  }
}

export interface ReceivedForward {
  readonly idempotencyKey: string;
  readonly body: Buffer;
  /** Whether the signature verifies with FORWARD_SECRET. */
  readonly verified: boolean;
  readonly headers: IncomingMessage['headers'];
}

/**
 * The user's own service, as a test double over real HTTP: verifies our Standard Webhooks
 * signature with the official library, records each request, answers `status()`.
 */
export class DestinationServer {
  readonly received: ReceivedForward[] = [];
  status: (req: IncomingMessage) => number = () => 200;
  /** Headers of each answer (e.g. Retry-After). */
  headers: (req: IncomingMessage) => Record<string, string> = () => ({});
  private server: Server | undefined;
  port = 0;

  async start(port = 0): Promise<this> {
    const wh = new Webhook(FORWARD_SECRET);
    this.server = createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on('data', (c: Buffer) => chunks.push(c));
      req.on('end', () => {
        const body = Buffer.concat(chunks);
        let verified = true;
        try {
          wh.verify(body.toString('utf8'), req.headers as Record<string, string>);
        } catch {
          verified = false;
        }
        this.received.push({ idempotencyKey: String(req.headers['idempotency-key']), body, verified, headers: req.headers });
        res.writeHead(this.status(req), this.headers(req)).end();
      });
    });
    await new Promise<void>((resolve) => this.server!.listen(port, '127.0.0.1', resolve));
    this.port = (this.server.address() as AddressInfo).port;
    return this;
  }

  get url(): string {
    return `http://127.0.0.1:${this.port}/hooks`;
  }

  keys(): Set<string> {
    return new Set(this.received.map((r) => r.idempotencyKey));
  }

  async stop(): Promise<void> {
    const s = this.server;
    this.server = undefined;
    if (!s) return;
    s.closeAllConnections();
    await new Promise<void>((resolve) => s.close(() => resolve()));
  }
}

/** Engine settings that make tests fast: quick polls, short leases, tiny backoff. */
export const FAST_WORKERS = { workers: { pollMs: 50, leaseMs: 2000, concurrency: 8, batchSize: 8 }, retry: { baseMs: 10, capMs: 40, maxAttempts: 3 } };

/**
 * One scrape of GET /metrics, read by exact metric name (and an optional label substring):
 * values from two scrapes would mix two moments. NaN when the series is absent.
 */
export async function scrapeMetrics(baseUrl: string): Promise<(name: string, label?: string) => number> {
  const samples = await scrape(baseUrl);
  return (name, label = '') => {
    for (const [series, value] of samples) if ((series === name || series.startsWith(`${name}{`)) && series.includes(label)) return value;
    return NaN;
  };
}

/**
 * Accepts Stripe events with these ids through a real ingress of config `doc` with no workers
 * running (a serve that stops again), each answered 200; their inbox ids, in order.
 */
export async function acceptThroughIngress(doc: Record<string, unknown>, ids: readonly string[]): Promise<string[]> {
  const app = await startApp(parseConfig(doc, {}), { logger: pino({ level: 'silent' }), workers: false });
  try {
    const out: string[] = [];
    for (const id of ids) {
      const body = stripeEvent(id);
      const r = await post(`${app.url}/webhooks/stripe`, body, stripeHeaders(body));
      expect(r.status).toBe(200);
      out.push(r.json().inbox_id);
    }
    return out;
  } finally {
    await app.close();
  }
}
