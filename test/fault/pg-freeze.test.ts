import pino from 'pino';
import { afterAll, describe, expect, it } from 'vitest';
import { startApp } from '../../src/app.js';
import { parseConfig } from '../../src/config/schema.js';
import { configDoc } from '../helpers/app.js';
import { post } from '../helpers/http.js';
import { stripeEvent, stripeHeaders } from '../helpers/events.js';
import { pgAvailable } from '../helpers/pg.js';
import { proxiedPostgres } from '../helpers/tcp-proxy.js';

const send = (url: string, id: string) => {
  const body = stripeEvent(id);
  return post(`${url}/webhooks/stripe`, body, stripeHeaders(body));
};

describe.runIf(await pgAvailable())('hung connections [postgres]', () => {
  const cleanups: (() => Promise<void>)[] = [];
  afterAll(async () => { for (const c of cleanups.reverse()) await c(); });

  it('a link frozen mid-commit: bounded 503s, readyz not ready, recovery without restart; cut-all-then-back too', async () => {
    const { proxy, url } = await proxiedPostgres(cleanups);
    const config = parseConfig(configDoc(url, { groupCommit: { commitTimeoutMs: 1000 } }), {});
    const app = await startApp(config, { logger: pino({ level: 'silent' }), env: {}, shutdownGraceMs: 200, workers: true });
    cleanups.push(() => app.close());
    for (let i = 0; i < 10; i++) expect((await send(app.url, `evt_up_${i}`)).status).toBe(200);
    proxy.silenceAt((c) => c.includes(Buffer.from('wi_accept')) || c[0] === 0x42 /* Bind */);
    const t0 = Date.now();
    const during = await Promise.all(Array.from({ length: 40 }, (_, i) => send(app.url, `evt_mid_${i}`).then((r) => ({ s: r.status, ms: Date.now() - t0 }))));
    proxy.freeze();
    const t1 = Date.now();
    const frozen = await Promise.all(Array.from({ length: 40 }, (_, i) => send(app.url, `evt_frozen_${i}`).then((r) => ({ s: r.status, ms: Date.now() - t1 }))));
    const ready = await post(`${app.url}/readyz`, '', {}, 'GET');
    const after: number[] = [];
    for (let i = 0; i < 10; i++) after.push((await send(app.url, `evt_after_${i}`)).status);
    await proxy.stop();
    const down = await send(app.url, 'evt_down');
    await proxy.start(proxy.port);
    const back: number[] = [];
    for (let i = 0; i < 10; i++) back.push((await send(app.url, `evt_back_${i}`)).status);
    const ready2 = await post(`${app.url}/readyz`, '', {}, 'GET');
    const failures = /^webhook_commit_failures_total (\d+)$/m.exec(await (await fetch(`${app.url}/metrics`)).text());
    // Bounded by commitTimeoutMs plus OVERLAP_AFTER_MS: a request queued behind a hung commit
    // starts on another pooled connection after 250 ms, frozen too, and times out there (measured
    // 1.26 s here; it was ~2.0 s, twice commitTimeoutMs, before the overlap rule; the bound leaves
    // room for a loaded machine). With one connection silenced the rest took 263 ms, not 1 s.
    expect(frozen.filter((f) => f.s !== 503 || f.ms >= 5 * 1000)).toEqual([]);
    // One connection silenced: each request is answered (200, or 503 for the batch on it), none hangs.
    expect(during.filter((d) => (d.s !== 200 && d.s !== 503) || d.ms >= 5 * 1000)).toEqual([]);
    expect(Number(failures?.[1]), 'the hung commits were counted').toBeGreaterThan(0);
    expect(ready.status).toBe(503);
    expect(after.every((s) => s === 200)).toBe(true);
    expect(down.status).toBe(503);
    expect(back.every((s) => s === 200)).toBe(true);
    expect(ready2.status).toBe(200);
  }, 60_000);

  it('at a low rate, accepts behind a commit stuck on one silent connection commit on another within ~250 ms, not at its deadline', async () => {
    const { proxy, url } = await proxiedPostgres(cleanups);
    const config = parseConfig(configDoc(url, { groupCommit: { commitTimeoutMs: 5000 } }), {});
    const app = await startApp(config, { logger: pino({ level: 'silent' }), env: {}, shutdownGraceMs: 200, workers: false });
    cleanups.push(() => app.close());
    expect((await send(app.url, 'evt_warm')).status).toBe(200);
    proxy.silenceAt((c) => c.includes(Buffer.from('wi_accept')) || c[0] === 0x42 /* Bind */);
    const t0 = Date.now();
    const stuck = send(app.url, 'evt_stuck').then((r) => ({ s: r.status, ms: Date.now() - t0 }));
    await new Promise((r) => setTimeout(r, 50));
    // One request at a time, as a quiet endpoint gets them: never a quarter of a batch waiting.
    const next: { s: number; ms: number }[] = [];
    for (let i = 0; i < 5; i++) {
      const t = Date.now();
      const r = await send(app.url, `evt_next_${i}`);
      next.push({ s: r.status, ms: Date.now() - t });
    }
    expect(next.map((n) => n.s)).toEqual([200, 200, 200, 200, 200]);
    // Measured ~260 ms for the first (behind the stuck commit), a few ms for the rest; before,
    // the first waited for the stuck commit's 5 s deadline.
    expect(next[0]!.ms).toBeLessThan(2500);
    expect(await stuck).toMatchObject({ s: 503 });
  }, 30_000);
});
