import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { configDoc } from '../helpers/app.js';
import { stripeEvent, stripeHeaders } from '../helpers/events.js';
import { post } from '../helpers/http.js';
import { exited, spawnServer, spawnWork, type ServerProcess } from '../helpers/server-process.js';

/**
 * A --handlers module that keeps something of its own open (a token refresh timer, a client of
 * another service): once serve or work has closed everything it opened after SIGTERM, the process
 * exits 0. Before, that handle kept it running for good after its shutdown was done (until the
 * supervisor's SIGKILL: exit 137, and the whole kill timeout on every restart).
 */
describe('serve and work exit once their shutdown is done, whatever a handlers module keeps open', () => {
  const dir = mkdtempSync(join(tmpdir(), 'wi-exit-'));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it.each(['serve', 'work'] as const)('%s', async (cmd) => {
    const handlers = join(dir, `${cmd}-handlers.mjs`);
    writeFileSync(handlers, [
      '// A token refreshed every minute for the effect executors, as many integrations do.',
      'let token = "t0";',
      'setInterval(() => { token = `t${Date.now()}`; }, 60_000);',
      "export default (inbox) => { inbox.on('payment_intent.succeeded', async () => { void token; }, { name: 'noop', version: '1' }); };",
      '',
    ].join('\n'));
    const doc = configDoc(`sqlite:${join(dir, `${cmd}.db`)}`, { workers: { pollMs: 100 } });
    const file = join(dir, `${cmd}.yaml`);
    let p: ServerProcess;
    if (cmd === 'serve') {
      p = await spawnServer(file, doc, {}, ['--handlers', handlers]);
      const body = stripeEvent('evt_exit', { type: 'payment_intent.succeeded' });
      expect((await post(`${p.url}/webhooks/stripe`, body, stripeHeaders(body))).status).toBe(200);
    } else {
      p = await spawnWork(file, doc, handlers);
    }
    const t0 = Date.now();
    p.child.kill('SIGTERM');
    const result = await Promise.race([exited(p), new Promise<string>((r) => setTimeout(() => r('still running'), 10_000))]);
    if (result === 'still running') p.child.kill('SIGKILL');
    expect(result, `${cmd} after SIGTERM (${Date.now() - t0} ms)\n${p.stderr()}`).toBe('0');
  }, 30_000);
});
