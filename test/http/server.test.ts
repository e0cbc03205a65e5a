import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseConfig } from '../../src/config/schema.js';
import type { Ingress } from '../../src/http/ingress.js';
import { createHttpServer } from '../../src/http/server.js';
import { configDoc } from '../helpers/app.js';
import { post } from '../helpers/http.js';

/** The HTTP front alone: its operational endpoints when what they read fails. */
describe('operational endpoints whose check fails', () => {
  let url: string;
  let close: () => Promise<void>;
  const reported: string[] = [];
  beforeAll(async () => {
    const config = parseConfig(configDoc('sqlite::memory:'));
    const failing = () => Promise.reject(new Error('gauges unreachable'));
    // No webhook is sent here: the ingress is never called.
    const failed = (path: string, err: unknown) => void reported.push(`${path}: ${(err as Error).message}`);
    const server = createHttpServer(config, {} as Ingress, { metrics: failing, notReady: failing, failed });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    close = () => new Promise((r) => server.close(() => r()));
  });
  afterAll(async () => close?.());

  it('/metrics and /readyz answer 503 with Retry-After; the process keeps serving', async () => {
    const m = await post(`${url}/metrics`, '', {}, 'GET');
    expect(m.status).toBe(503);
    expect(m.json()).toEqual({ error: 'metrics_unavailable' });
    expect(m.headers['retry-after']).toBe('5');
    const r = await post(`${url}/readyz`, '', {}, 'GET');
    expect(r.status).toBe(503);
    expect(r.json()).toEqual({ status: 'not_ready', problems: ['readiness check failed'] });
    expect(r.headers['retry-after']).toBe('5');
    expect((await post(`${url}/healthz`, '', {}, 'GET')).status).toBe(200);
    expect(reported).toEqual(['/metrics: gauges unreachable', '/readyz: gauges unreachable']);
  });
});
