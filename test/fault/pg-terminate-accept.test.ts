import { describe, expect, it } from 'vitest';
import { startTestApp } from '../helpers/app.js';
import { post } from '../helpers/http.js';
import { stripeEvent, stripeHeaders } from '../helpers/events.js';
import { pgAvailable, terminateBackendsWhile } from '../helpers/pg.js';

describe.runIf(await pgAvailable())('backends terminated mid-accept [postgres]', () => {
  it('every 2xx names a committed row; a 503 may be committed', async () => {
    const app = await startTestApp('postgres', { groupCommit: { commitTimeoutMs: 3000 } });
    const killing = await terminateBackendsWhile(app.db.url, 'webhook-inbox', 30);
    const killer = killing.client;
    const answers: { id: string; status: number; inboxId?: string; ms: number }[] = [];
    let n = 0;
    const client = async () => {
      while (n < 3000) {
        const id = `evt_${n++}`;
        const body = stripeEvent(id);
        const t = Date.now();
        const r = await post(`${app.url}/webhooks/stripe`, body, stripeHeaders(body));
        answers.push({ id, status: r.status, inboxId: r.status < 300 ? r.json().inbox_id : undefined, ms: Date.now() - t });
      }
    };
    await Promise.all(Array.from({ length: 32 }, client));
    const kills = await killing.stop();
    const { rows } = await killer.query('SELECT provider_event_id, inbox_id::text FROM webhook_inbox');
    const stored = new Map(rows.map((r) => [r.provider_event_id as string, r.inbox_id as string]));
    const ok = answers.filter((a) => a.status < 300);
    const bad = ok.filter((a) => stored.get(a.id) !== a.inboxId);
    const s503 = answers.filter((a) => a.status === 503);
    const s503Committed = s503.filter((a) => stored.has(a.id));
    const other = answers.filter((a) => a.status >= 300 && a.status !== 503);
    // Recovery, without a restart.
    const body = stripeEvent('evt_after');
    const after = await post(`${app.url}/webhooks/stripe`, body, stripeHeaders(body));
    await killer.end();
    await app.stop();
    expect(kills, 'the faults happened').toBeGreaterThan(0);
    expect(s503.length, 'some accepts met a terminated backend').toBeGreaterThan(0);
    expect(s503Committed.length, 'a 503 for a committed row is allowed (its retry answers duplicate)').toBeLessThanOrEqual(s503.length);
    expect(bad).toEqual([]);
    expect(other).toEqual([]);
    expect(after.status).toBe(200);
  }, 120_000);
});
