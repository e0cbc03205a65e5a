import { connect, createServer, type AddressInfo } from 'node:net';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pino from 'pino';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { startApp } from '../../src/app.js';
import { parseConfig } from '../../src/config/schema.js';
import { ListenError } from '../../src/errors.js';
import { configDoc, startTestApp, type TestApp } from '../helpers/app.js';
import { stripeEvent, stripeHeaders } from '../helpers/events.js';
import { post, rawExchange, statusOf } from '../helpers/http.js';
import { scrape, series, valueOf } from '../helpers/metric-samples.js';
import { runCli, spawnServer } from '../helpers/server-process.js';
import { describeEachStore, freshDatabase, type TestDatabase } from '../helpers/stores.js';

/**
 * `serve --metrics-port` (startApp's metricsListen): /readyz names config paths and database
 * errors, /metrics names endpoints and volumes. With a port of their own they are not answered on
 * the webhook port, which is the one open to the internet; /healthz (only "up") stays there too,
 * for a load balancer in front of it.
 */

const get = (url: string) => post(url, '', {}, 'GET');

/** Resolves once nothing accepts connections on 127.0.0.1:port. */
function refused(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const s = connect(port, '127.0.0.1');
    s.once('connect', () => {
      s.destroy();
      resolve(false);
    });
    s.once('error', () => resolve(true));
  });
}

async function takenPort(): Promise<{ port: number; release: () => Promise<void> }> {
  const taken = createServer();
  await new Promise<void>((r) => taken.listen(0, '127.0.0.1', r));
  return { port: (taken.address() as AddressInfo).port, release: () => new Promise((r) => taken.close(() => r())) };
}

describeEachStore('serve with a metrics port of its own', (kind) => {
  let app: TestApp;
  beforeEach(async () => {
    app = await startTestApp(kind, {}, {}, { metricsListen: { host: '127.0.0.1', port: 0 } });
  });
  afterEach(async () => {
    await app.stop();
  });

  it('/metrics and /readyz answer there and not on the webhook port; /healthz on both; webhooks only on the webhook port', async () => {
    expect(app.metricsUrl).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
    expect(app.metricsUrl).not.toBe(app.url);

    const body = stripeEvent('evt_metrics_port');
    expect((await post(`${app.url}/webhooks/stripe`, body, stripeHeaders(body))).status).toBe(200);
    const accepted = series('webhook_requests_total', { endpoint: 'stripe', outcome: 'accepted' });
    expect(valueOf(await scrape(app.metricsUrl!), accepted)).toBe(1);
    const ready = await get(`${app.metricsUrl}/readyz`);
    expect(ready.status, ready.text).toBe(200);
    expect(ready.json()).toEqual({ status: 'ready' });

    for (const path of ['/metrics', '/readyz']) {
      const r = await get(`${app.url}${path}`);
      expect(r.status, path).toBe(404);
      expect(r.json()).toEqual({ error: 'not_found' });
    }
    expect((await get(`${app.url}/healthz`)).json()).toEqual({ status: 'ok' });
    expect((await get(`${app.metricsUrl}/healthz`)).json()).toEqual({ status: 'ok' });

    const elsewhere = stripeEvent('evt_metrics_port_2');
    const hook = await post(`${app.metricsUrl}/webhooks/stripe`, elsewhere, stripeHeaders(elsewhere));
    expect(hook.status).toBe(404);
    expect(hook.json()).toEqual({ error: 'not_found' });
    expect(valueOf(await scrape(app.metricsUrl!), accepted), 'the metrics port took a webhook').toBe(1);
  });

  // RFC 9112 §3.2.2: a server must accept the absolute form (`GET http://host/metrics`), which the
  // webhook port does (server.ts). The metrics port compared the raw target with the paths, so
  // it answered 404 where the same request to the webhook port (no metrics port) was served.
  it('the metrics port serves an absolute-form target, query and all, as the webhook port does', async () => {
    const metricsPort = Number(new URL(app.metricsUrl!).port);
    for (const path of ['/healthz', '/readyz', '/metrics?x=1']) {
      const { text } = await rawExchange(metricsPort, `GET http://127.0.0.1:${metricsPort}${path} HTTP/1.1\r\nhost: 127.0.0.1:${metricsPort}\r\nconnection: close\r\n\r\n`);
      expect(statusOf(text), `${path}: ${text}`).toBe(200);
    }
  });

  it('the metrics port answers malformed HTTP as the webhook port does: a status with a JSON reason, then the connection closes', async () => {
    const metricsPort = Number(new URL(app.metricsUrl!).port);
    const bad = await rawExchange(metricsPort, 'GET /metrics HTTP/1.1\r\nhost: x\r\nbad header line\r\n\r\n');
    expect(statusOf(bad.text)).toBe(400);
    expect(bad.text).toContain('{"error":"bad_request"}');
    expect(bad.closed).toBe(true);
    const big = await rawExchange(metricsPort, `GET /metrics HTTP/1.1\r\nhost: x\r\nx-big: ${'a'.repeat(70_000)}\r\n\r\n`);
    expect(statusOf(big.text)).toBe(431);
    expect(big.text).toContain('{"error":"headers_too_large"}');
  });

  it('once close() has begun, /readyz on the metrics port says not ready: the webhook port no longer takes connections', async () => {
    const webhookPort = Number(new URL(app.url).port);
    // A sender stalled mid-body keeps the webhook server's close waiting (up to its grace period).
    const stalled = connect(webhookPort, '127.0.0.1');
    await new Promise<void>((r) => stalled.once('connect', () => r()));
    stalled.on('error', () => undefined);
    stalled.write('POST /webhooks/stripe HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{"id":');
    await new Promise((r) => setTimeout(r, 50));
    expect((await get(`${app.metricsUrl}/readyz`)).status).toBe(200);
    const closing = app.close();
    try {
      await new Promise((r) => setTimeout(r, 50));
      expect(await refused(webhookPort), 'the webhook port still takes connections').toBe(true);
      const ready = await get(`${app.metricsUrl}/readyz`);
      expect(ready.status, ready.text).toBe(503);
      expect(ready.json()).toEqual({ status: 'not_ready', problems: ['shutting down: no new webhooks are taken'] });
    } finally {
      stalled.destroy();
      await closing;
    }
  });

  it('close() stops both ports', async () => {
    const metricsPort = Number(new URL(app.metricsUrl!).port);
    const webhookPort = Number(new URL(app.url).port);
    await app.close();
    expect(await refused(metricsPort)).toBe(true);
    expect(await refused(webhookPort)).toBe(true);
  });
});

describe('serve with a metrics port of its own: refusals', () => {
  let db: TestDatabase;
  let dir: string;
  beforeEach(async () => {
    db = await freshDatabase('sqlite');
    dir = mkdtempSync(join(tmpdir(), 'wi-metricsport-'));
  });
  afterEach(async () => {
    await db.cleanup();
    rmSync(dir, { recursive: true, force: true });
  });

  it('a metrics port in use fails the start with ListenError naming it, before the webhook port is taken', async () => {
    const taken = await takenPort();
    const free = await takenPort();
    await free.release();
    try {
      const config = parseConfig(configDoc(db.url, { listen: { host: '127.0.0.1', port: free.port } }), {});
      const started = startApp(config, { logger: pino({ level: 'silent' }), workers: false, metricsListen: { host: '127.0.0.1', port: taken.port } });
      const err = await started.then(() => undefined, (e: unknown) => e);
      expect(err).toBeInstanceOf(ListenError);
      expect((err as Error).message).toBe(`cannot listen on 127.0.0.1:${taken.port}: the address is already in use (another process listens there); pass another --metrics-host / --metrics-port`);
      expect(await refused(free.port), 'the webhook port was listened on').toBe(true);
    } finally {
      await taken.release();
    }
  });

  it('serve --metrics-port: the start line names both addresses; the CLI refuses a port out of range or a host alone', async () => {
    const doc = configDoc(db.url);
    const s = await spawnServer(join(dir, 'serve.yaml'), doc, {}, ['--metrics-port', '0']);
    try {
      const m = /GET {2}(http:\/\/127\.0\.0\.1:\d+)\/metrics {2}\S+\/healthz {2}\S+\/readyz {2}\(and (\S+)\/healthz\)/.exec(s.stderr());
      expect(m, s.stderr()).not.toBeNull();
      expect(m![2]).toBe(s.url);
      expect(m![1]).not.toBe(s.url);
      expect((await get(`${m![1]}/readyz`)).status).toBe(200);
      expect((await get(`${s.url}/metrics`)).status).toBe(404);
    } finally {
      s.child.kill('SIGTERM');
      await new Promise((r) => s.child.once('exit', r));
    }
    const file = join(dir, 'serve.yaml');
    for (const [args, message] of [
      [['--metrics-port', '65536'], '--metrics-port must be an integer from 0 to 65535, not "65536"'],
      [['--metrics-host', '127.0.0.1'], '--metrics-host needs --metrics-port'],
      [['--metrics-port='], '--metrics-port was given empty'],
    ] as const) {
      const r = await runCli(['serve', '--config', file, ...args], 20_000);
      expect(r.code, `${args.join(' ')}: ${r.err}`).toBe(2);
      expect(r.err).toContain(message);
    }
  });
});
