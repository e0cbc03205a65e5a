import { existsSync, rmSync, writeFileSync, readdirSync } from 'node:fs';
import pino from 'pino';
import Database from 'better-sqlite3';
import { describe, expect, it } from 'vitest';
import { startApp } from '../../src/app.js';
import { parseConfig } from '../../src/config/schema.js';
import { HandlerRegistry } from '../../src/engine/handlers.js';
import { configDoc } from '../helpers/app.js';
import { post } from '../helpers/http.js';
import { stripeEvent, stripeHeaders } from '../helpers/events.js';

const DIR = process.env.WI_FULL_DIR;
describe.runIf(DIR && existsSync(DIR))('SQLite on a full disk', () => {
  it('every 2xx stored; 503 while full; readyz not ready; recovers when space frees', async () => {
    for (const f of readdirSync(DIR!)) rmSync(`${DIR}/${f}`, { force: true, recursive: true });
    const file = `${DIR}/inbox.db`;
    const handlers = new HandlerRegistry().on('payment_intent.*', async (event, ctx) => {
      await ctx.tx.query('INSERT INTO ledger (event_id) VALUES (?)', [event.providerEventId]);
    }, { version: '1', name: 'ledger' });
    const config = parseConfig(configDoc(`sqlite:${file}`, { workers: { pollMs: 50, leaseMs: 2000 }, retry: { baseMs: 10, capMs: 40, maxAttempts: 3 } }), {});
    const lines: string[] = [];
    const app = await startApp(config, { logger: pino({ level: 'info' }, { write: (s: string) => void lines.push(s) }), env: {}, shutdownGraceMs: 200, workers: true, handlers });
    await app.store.transaction((tx) => tx.query('CREATE TABLE ledger (event_id TEXT NOT NULL)'));
    writeFileSync(`${DIR}/filler`, Buffer.alloc(2200 * 1024));
    const answers: { id: string; status: number }[] = [];
    let n = 0;
    for (let round = 0; round < 40; round++) {
      const got = await Promise.all(Array.from({ length: 10 }, () => {
        const id = `evt_${n++}`;
        const body = stripeEvent(id, { type: 'payment_intent.succeeded', size: 3000 });
        return post(`${app.url}/webhooks/stripe`, body, stripeHeaders(body)).then((r) => ({ id, status: r.status }));
      }));
      answers.push(...got);
    }
    const ready = await post(`${app.url}/readyz`, '', {}, 'GET');
    const counts = answers.reduce<Record<number, number>>((a, x) => ((a[x.status] = (a[x.status] ?? 0) + 1), a), {});
    console.log(counts, 'readyz', ready.status, ready.text?.slice(0, 300));
    rmSync(`${DIR}/filler`);
    await new Promise((r) => setTimeout(r, 3000));
    const after: number[] = [];
    for (let i = 0; i < 5; i++) {
      const body = stripeEvent(`evt_after_${i}`, { type: 'payment_intent.succeeded' });
      after.push((await post(`${app.url}/webhooks/stripe`, body, stripeHeaders(body))).status);
    }
    await new Promise((r) => setTimeout(r, 3000));
    const ready2 = await post(`${app.url}/readyz`, '', {}, 'GET');
    await app.close();
    const db = new Database(file, { readonly: true });
    const stored = new Set((db.prepare('SELECT provider_event_id FROM webhook_inbox').pluck().all() as string[]));
    const statuses = db.prepare('SELECT status, count(*) n FROM webhook_inbox GROUP BY status').all();
    const dup = db.prepare('SELECT event_id, count(*) n FROM ledger GROUP BY event_id HAVING n > 1').all();
    const failed = db.prepare("SELECT last_error FROM webhook_inbox WHERE status <> 'PROCESSED' LIMIT 3").all();
    db.close();
    console.log({ after, ready2: ready2.status, statuses, dup, failed });
    console.log(lines.filter((l) => /"level":(40|50)/.test(l)).map((l) => JSON.parse(l).msg).slice(0, 10).join('\n'));
    const lost = answers.filter((a) => a.status === 200 && !stored.has(a.id));
    expect(lost).toEqual([]);
    expect(after.every((s) => s === 200)).toBe(true);
    expect(dup).toEqual([]);
  }, 90_000);
});
