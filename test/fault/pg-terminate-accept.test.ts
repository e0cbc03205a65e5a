import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { startTestApp } from '../helpers/app.js';
import { post } from '../helpers/http.js';
import { stripeEvent, stripeHeaders } from '../helpers/events.js';
import { pgAvailable } from '../helpers/pg.js';

describe.runIf(await pgAvailable())('backends terminated mid-accept [postgres]', () => {
  it('every 2xx names a committed row; a 503 may be committed', async () => {
    const app = await startTestApp('postgres', { groupCommit: { commitTimeoutMs: 3000 } });
    const dbName = new URL(app.db.url).pathname.slice(1);
    const killer = new pg.Client({ connectionString: app.db.url });
    await killer.connect();
    let stop = false;
    let kills = 0;
    const killing = (async () => {
      while (!stop) {
        const r = await killer.query("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid() AND application_name = 'webhook-inbox'", [dbName]);
        kills += r.rowCount ?? 0;
        await new Promise((r) => setTimeout(r, 5 + Math.random() * 30));
      }
    })();
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
    stop = true;
    await killing;
    const { rows } = await killer.query('SELECT provider_event_id, inbox_id::text FROM webhook_inbox');
    const stored = new Map(rows.map((r) => [r.provider_event_id as string, r.inbox_id as string]));
    const ok = answers.filter((a) => a.status < 300);
    const bad = ok.filter((a) => stored.get(a.id) !== a.inboxId);
    const s503 = answers.filter((a) => a.status === 503);
    const s503Committed = s503.filter((a) => stored.has(a.id));
    const other = answers.filter((a) => a.status >= 300 && a.status !== 503);
    console.log({ kills, ok: ok.length, s503: s503.length, s503Committed: s503Committed.length, other: other.map((o) => o.status), maxMs: Math.max(...answers.map((a) => a.ms)) });
    // recovery
    const body = stripeEvent('evt_after');
    const after = await post(`${app.url}/webhooks/stripe`, body, stripeHeaders(body));
    const ready = await post(`${app.url}/readyz`, '', {}, 'GET');
    console.log('after', after.status, 'ready', ready.status);
    await killer.end();
    await app.stop();
    expect(bad).toEqual([]);
    expect(other).toEqual([]);
    expect(after.status).toBe(200);
  }, 120_000);
});
