import pino from 'pino';
import { afterAll, describe, expect, it } from 'vitest';
import { startApp } from '../../src/app.js';
import { parseConfig } from '../../src/config/schema.js';
import { configDoc } from '../helpers/app.js';
import { post } from '../helpers/http.js';
import { stripeEvent, stripeHeaders } from '../helpers/events.js';
import { freshDatabase } from '../helpers/stores.js';
import { pgAvailable } from '../helpers/pg.js';
import { TcpProxy } from '../helpers/tcp-proxy.js';

const send = (url: string, id: string) => {
  const body = stripeEvent(id);
  return post(`${url}/webhooks/stripe`, body, stripeHeaders(body));
};

describe.runIf(await pgAvailable())('hung connections [postgres]', () => {
  const cleanups: (() => Promise<void>)[] = [];
  afterAll(async () => { for (const c of cleanups.reverse()) await c(); });

  it('a link frozen mid-commit: bounded 503s, readyz not ready, recovery without restart; cut-all-then-back too', async () => {
    const db = await freshDatabase('postgres');
    cleanups.push(() => db.cleanup());
    const proxy = new TcpProxy(5432);
    await proxy.start();
    cleanups.push(() => proxy.stop());
    const url = new URL(db.url);
    url.port = String(proxy.port);
    const config = parseConfig(configDoc(url.toString(), { groupCommit: { commitTimeoutMs: 1000 } }), {});
    const app = await startApp(config, { logger: pino({ level: 'silent' }), env: {}, shutdownGraceMs: 200, workers: true });
    cleanups.push(() => app.close());
    for (let i = 0; i < 10; i++) expect((await send(app.url, `evt_up_${i}`)).status).toBe(200);
    proxy.silenceAt((c) => c.includes(Buffer.from('wi_accept')) || c[0] === 0x42 /* Bind */);
    const t0 = Date.now();
    const during = await Promise.all(Array.from({ length: 40 }, (_, i) => send(app.url, `evt_mid_${i}`).then((r) => ({ s: r.status, ms: Date.now() - t0 }))));
    console.log('silenced one', during.map((d) => `${d.s}@${d.ms}`).join(' '));
    proxy.freeze();
    const t1 = Date.now();
    const frozen = await Promise.all(Array.from({ length: 40 }, (_, i) => send(app.url, `evt_frozen_${i}`).then((r) => ({ s: r.status, ms: Date.now() - t1 }))));
    console.log('frozen', frozen.map((d) => `${d.s}@${d.ms}`).join(' '));
    const rt = Date.now();
    const ready = await post(`${app.url}/readyz`, '', {}, 'GET');
    console.log('readyz', ready.status, Date.now() - rt, ready.text.slice(0, 300));
    const after: number[] = [];
    for (let i = 0; i < 10; i++) after.push((await send(app.url, `evt_after_${i}`)).status);
    console.log('after freeze', after.join(','));
    await proxy.stop();
    const down = await send(app.url, 'evt_down');
    await proxy.start(proxy.port);
    const back: number[] = [];
    for (let i = 0; i < 10; i++) back.push((await send(app.url, `evt_back_${i}`)).status);
    console.log('down', down.status, 'back', back.join(','));
    const ready2 = await post(`${app.url}/readyz`, '', {}, 'GET');
    const m = await (await fetch(`${app.url}/metrics`)).text();
    console.log('ready2', ready2.status, m.split('\n').filter((l) => /commit_fail|listener|storage|unavailable/.test(l) && !l.startsWith('#')).join('\n'));
    // Bounded, but by about twice commitTimeoutMs: a request queued behind a hung commit waits for
    // its timeout, and its own batch then goes to the next pooled connection, frozen too.
    expect(frozen.every((f) => f.s === 503 && f.ms < 2.5 * 1000)).toBe(true);
    expect(ready.status).toBe(503);
    expect(after.every((s) => s === 200)).toBe(true);
    expect(down.status).toBe(503);
    expect(back.every((s) => s === 200)).toBe(true);
    expect(ready2.status).toBe(200);
  }, 60_000);
});
