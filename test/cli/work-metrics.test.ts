import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pino from 'pino';
import { stringify } from 'yaml';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { startApp } from '../../src/app.js';
import { parseConfig } from '../../src/config/schema.js';
import { configDoc } from '../helpers/app.js';
import { waitFor } from '../helpers/engine.js';
import { stripeEvent, stripeHeaders } from '../helpers/events.js';
import { EXPOSITION_CONTENT_TYPE, parseExposition } from '../helpers/exposition.js';
import { post } from '../helpers/http.js';
import { scrape, series, valueOf } from '../helpers/metric-samples.js';
import { assertBuilt, CLI, runCli } from '../helpers/server-process.js';
import { describeEachStore, freshDatabase, type TestDatabase } from '../helpers/stores.js';

/**
 * A separate `webhook-inbox work` process holds the engine's metrics (attempts, queue gauges,
 * processing latency): no `serve` process has them. With --metrics-port it serves them, with
 * /healthz and /readyz, so a scraper sees the workers that do the processing.
 */

/** Starts `work` with `args`; resolves with the URL its start line names (or '' when it names none). */
async function startWork(configFile: string, args: string[]): Promise<{ child: ReturnType<typeof spawn>; url: string; stderr: () => string }> {
  assertBuilt();
  const child = spawn(process.execPath, [CLI, 'work', '--config', configFile, ...args], { stdio: ['ignore', 'ignore', 'pipe'] });
  let err = '';
  child.stderr!.on('data', (d: Buffer) => {
    err += d.toString();
  });
  for (let i = 0; i < 300 && !err.includes('workers running') && child.exitCode === null; i++) await new Promise((r) => setTimeout(r, 50));
  expect(err, 'workers did not start').toContain('workers running');
  const m = /\/readyz on (http:\/\/\S+)/.exec(err);
  return { child, url: m?.[1] ?? '', stderr: () => err };
}

async function stop(child: ReturnType<typeof spawn>): Promise<number | null> {
  if (child.exitCode !== null) return child.exitCode;
  child.kill('SIGTERM');
  const [code] = await once(child, 'exit');
  return code as number | null;
}

describeEachStore('work --metrics-port: the workers\' own metrics, /healthz and /readyz', (kind) => {
  let db: TestDatabase;
  let dir: string;
  let doc: Record<string, unknown>;
  let configFile: string;
  beforeEach(async () => {
    db = await freshDatabase(kind);
    dir = mkdtempSync(join(tmpdir(), 'wi-workmetrics-'));
    doc = configDoc(db.url, { log: { level: 'warn' }, workers: { pollMs: 50 } });
    configFile = join(dir, 'work.yaml');
    writeFileSync(configFile, stringify(doc));
    writeFileSync(join(dir, 'handlers.mjs'), "export default (inbox) => { inbox.on('payment_intent.succeeded', async () => {}); };\n");
  });
  afterEach(async () => {
    await db.cleanup();
    rmSync(dir, { recursive: true, force: true });
  });

  it('counts the events it processes and the queue it sees; the ingress process\'s /metrics has none of it', async () => {
    const w = await startWork(configFile, ['--handlers', join(dir, 'handlers.mjs'), '--metrics-port', '0']);
    const app = await startApp(parseConfig(doc, {}), { logger: pino({ level: 'silent' }), workers: false });
    try {
      expect(w.url).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
      const success = series('webhook_worker_attempts_total', { result: 'success', reason: '' });
      expect(valueOf(await scrape(w.url), success)).toBe(0);
      for (const id of ['evt_wm_1', 'evt_wm_2', 'evt_wm_3']) {
        const body = stripeEvent(id);
        expect((await post(`${app.url}/webhooks/stripe`, body, stripeHeaders(body))).status).toBe(200);
      }
      await waitFor(async () => valueOf(await scrape(w.url), success) === 3, 20_000, 'three successful attempts in the work process\'s metrics');
      const samples = await scrape(w.url);
      expect(valueOf(samples, series('webhook_inbox_rows', { status: 'PENDING' }))).toBe(0);
      expect(samples.has(series('webhook_event_loop_delay_seconds', { stat: 'max' }))).toBe(true);
      // Its own registry (the engine's metrics and the event-loop gauge) in the exact text format.
      const text = await post(`${w.url}/metrics`, '', {}, 'GET');
      expect(text.headers['content-type']).toBe(EXPOSITION_CONTENT_TYPE);
      expect(parseExposition(text.text).get('webhook_processing_latency_seconds')?.type).toBe('histogram');
      // The same counter in the ingress process stays empty: these events were not processed there.
      expect(valueOf(await scrape(app.url), success)).toBe(0);

      expect((await post(`${w.url}/healthz`, '', {}, 'GET')).json()).toEqual({ status: 'ok' });
      const ready = await post(`${w.url}/readyz`, '', {}, 'GET');
      expect(ready.status, ready.text).toBe(200);
      const posted = await post(`${w.url}/metrics`, 'x', {});
      expect(posted.status).toBe(405);
      expect(posted.headers.allow).toBe('GET, HEAD');
      // It takes no webhooks.
      const body = stripeEvent('evt_wm_elsewhere');
      const hook = await post(`${w.url}/webhooks/stripe`, body, stripeHeaders(body));
      expect(hook.status).toBe(404);
      expect(hook.json()).toEqual({ error: 'not_found' });
    } finally {
      await app.close();
      expect(await stop(w.child), w.stderr()).toBe(0);
    }
  });

  it('/readyz names what is missing: a payload key whose ${env:} reference does not resolve (503)', async () => {
    const file = join(dir, 'missing.yaml');
    // The workers open payloads with it; it is retried every 10 s, not a reason to exit.
    writeFileSync(file, stringify({ ...doc, payloadKeys: { current: 'k1', keys: { k1: '${env:WI_TEST_WORK_MISSING_SECRET}' } } }));
    const w = await startWork(file, ['--metrics-port', '0']);
    try {
      const r = await post(`${w.url}/readyz`, '', {}, 'GET');
      expect(r.status, r.text).toBe(503);
      expect(r.headers['retry-after']).toBe('5');
      expect(JSON.stringify(r.json().problems)).toContain('WI_TEST_WORK_MISSING_SECRET');
    } finally {
      expect(await stop(w.child), w.stderr()).toBe(0);
    }
  });
});

describe('work --metrics-port: refusals', () => {
  let dir: string;
  let file: string;
  let db: TestDatabase;
  beforeEach(async () => {
    db = await freshDatabase('sqlite');
    dir = mkdtempSync(join(tmpdir(), 'wi-workmetrics-'));
    file = join(dir, 'work.yaml');
    writeFileSync(file, stringify(configDoc(db.url)));
  });
  afterEach(async () => {
    await db.cleanup();
    rmSync(dir, { recursive: true, force: true });
  });

  it('without it nothing is served, as before: the start line names no address', async () => {
    const w = await startWork(file, []);
    try {
      expect(w.url).toBe('');
      expect(w.stderr()).not.toContain('http://');
    } finally {
      expect(await stop(w.child)).toBe(0);
    }
  });

  it('a port already in use: exit 1, one line naming the address and the options to change', async () => {
    const taken = createServer();
    await new Promise<void>((r) => taken.listen(0, '127.0.0.1', r));
    try {
      const port = (taken.address() as AddressInfo).port;
      const r = await runCli(['work', '--config', file, '--metrics-port', String(port)], 20_000);
      expect(r.code, r.err).toBe(1);
      expect(r.err).toContain(`webhook-inbox work: cannot listen on 127.0.0.1:${port}: the address is already in use (another process listens there); pass another --metrics-host / --metrics-port`);
      expect(r.err, 'a stack trace').not.toMatch(/\n\s+at /);
    } finally {
      taken.close();
    }
  });

  it.each([
    [['--metrics-port', '70000'], '--metrics-port must be an integer from 0 to 65535'],
    [['--metrics-port=', '--handlers', 'x.mjs'], '--metrics-port was given empty'],
    [['--metrics-host', '127.0.0.1'], '--metrics-host needs --metrics-port'],
    [['--metrics-port', '0', '--metrics-host='], '--metrics-host was given empty'],
  ])('%j → usage error (exit 2): %s', async (args, message) => {
    const r = await runCli(['work', '--config', file, ...args], 20_000);
    expect(r.code, r.err).toBe(2);
    expect(r.err).toContain(message);
  });
});
