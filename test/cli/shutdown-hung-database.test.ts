import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { configDoc } from '../helpers/app.js';
import { stripeEvent, stripeHeaders } from '../helpers/events.js';
import { post } from '../helpers/http.js';
import { pgAvailable } from '../helpers/pg.js';
import { exited, spawnServer, spawnWork, type ServerProcess } from '../helpers/server-process.js';
import { proxiedPostgres } from '../helpers/tcp-proxy.js';

/**
 * SIGTERM while PostgreSQL hangs (its processes stuck, its host's TCP still acknowledging): the
 * shutdown gives up on the database after a bounded wait and the process exits 0. Before, the
 * goodbye (Terminate, then FIN) of each idle connection waited for a close that never came, and
 * those sockets kept the process alive for good after it had said it was stopping.
 */
describe.runIf(await pgAvailable())('SIGTERM while PostgreSQL hangs [postgres]', () => {
  const cleanups: (() => Promise<void>)[] = [];
  const dir = mkdtempSync(join(tmpdir(), 'wi-hung-'));
  afterAll(async () => {
    for (const c of cleanups.reverse()) await c();
    rmSync(dir, { recursive: true, force: true });
  });

  /** SIGTERM now; the exit code (or signal), or 'still running' after `boundMs`. */
  async function stopWithin(p: ServerProcess, boundMs: number): Promise<{ result: string; ms: number }> {
    const t0 = Date.now();
    p.child.kill('SIGTERM');
    const result = await Promise.race([exited(p), new Promise<string>((r) => setTimeout(() => r('still running'), boundMs))]);
    if (result === 'still running') p.child.kill('SIGKILL');
    return { result, ms: Date.now() - t0 };
  }

  it.each(['serve', 'work'] as const)('%s: exits 0 in bounded time, having said it was stopping', async (cmd) => {
    const { proxy, url } = await proxiedPostgres(cleanups);
    const doc = configDoc(url, { groupCommit: { commitTimeoutMs: 1000 }, workers: { pollMs: 100 }, log: { level: 'warn' } });
    const file = join(dir, `${cmd}.yaml`);
    let p: ServerProcess;
    if (cmd === 'serve') {
      p = await spawnServer(file, doc);
      for (let i = 0; i < 3; i++) {
        const body = stripeEvent(`evt_hung_${i}`);
        expect((await post(`${p.url}/webhooks/stripe`, body, stripeHeaders(body))).status).toBe(200);
      }
    } else {
      const handlers = join(dir, 'handlers.mjs');
      writeFileSync(handlers, 'export default () => {};\n');
      p = await spawnWork(file, doc, handlers);
    }
    cleanups.push(async () => void p.child.kill('SIGKILL'));
    // The workers' connections and the listener's are open and idle (claims poll every 100 ms).
    await new Promise((r) => setTimeout(r, 500));
    proxy.hang();
    const { result, ms } = await stopWithin(p, 25_000);
    expect(result, `${cmd} did not exit after SIGTERM (${ms} ms)\n${p.stderr()}`).toBe('0');
    expect(p.stderr()).toMatch(/shutting down|stopping workers/);
  }, 60_000);

  it('serve: a request waiting on a commit the hung database never answers gets 503 with Retry-After when the grace ends, not a reset', async () => {
    const { proxy, url } = await proxiedPostgres(cleanups);
    // The commit timeout (30 s) outlasts the 5 s grace: the grace's end must answer the request,
    // and the exit must not wait for the commit's own timeout to free its connection.
    const doc = configDoc(url, { groupCommit: { commitTimeoutMs: 30_000 }, workers: { enabled: false }, log: { level: 'warn' } });
    const p = await spawnServer(join(dir, 'serve-waiting.yaml'), doc);
    cleanups.push(async () => void p.child.kill('SIGKILL'));
    const first = stripeEvent('evt_hung_before');
    expect((await post(`${p.url}/webhooks/stripe`, first, stripeHeaders(first))).status).toBe(200);
    proxy.hang();
    const body = stripeEvent('evt_hung_waiting');
    const answer = post(`${p.url}/webhooks/stripe`, body, stripeHeaders(body)).then((r) => r, (err: Error) => err);
    await new Promise((r) => setTimeout(r, 300)); // its commit has been sent and is waiting
    const { result, ms } = await stopWithin(p, 25_000);
    const r = await answer;
    expect(r instanceof Error ? `no answer: ${r.message}` : r.status, p.stderr()).toBe(503);
    if (!(r instanceof Error)) {
      expect(r.headers['retry-after']).toMatch(/^[1-9][0-9]*$/);
      expect(r.json().error).toBe('storage_unavailable');
    }
    expect(result, `serve did not exit after SIGTERM (${ms} ms)\n${p.stderr()}`).toBe('0');
    // The 5 s grace, then at most GOODBYE_WAIT_MS (2 s) for the connection stuck in the commit.
    expect(ms, 'exit after SIGTERM, ms').toBeLessThan(15_000);
  }, 60_000);
});
