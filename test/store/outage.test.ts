import { rmSync } from 'node:fs';
import { captureLog } from '../helpers/log.js';
import Database from 'better-sqlite3';
import pg from 'pg';
import { afterAll, describe, expect, it } from 'vitest';
import pino from 'pino';
import { startApp } from '../../src/app.js';
import { parseConfig } from '../../src/config/schema.js';
import { openStore } from '../../src/store/open.js';
import { configDoc, startTestApp } from '../helpers/app.js';
import { post } from '../helpers/http.js';
import { stripeEvent, stripeHeaders } from '../helpers/events.js';
import { record } from '../helpers/records.js';
import * as SQL from '../../src/store/postgres/sql.js';
import { freshDatabase } from '../helpers/stores.js';
import { pgAvailable } from '../helpers/pg.js';
import { proxiedPostgres, TcpProxy } from '../helpers/tcp-proxy.js';
import { waitFor } from '../helpers/engine.js';
import { scrape, valueOf } from '../helpers/metric-samples.js';
import { PostgresStore } from '../../src/store/postgres/store.js';

const send = (url: string, id: string) => {
  const body = stripeEvent(id);
  return post(`${url}/webhooks/stripe`, body, stripeHeaders(body));
};

describe('storage unavailable [sqlite]', () => {
  it('answers 503 with Retry-After while the database is locked, acknowledges nothing, and recovers', async () => {
    const app = await startTestApp('sqlite', {}, {}, { urlSuffix: '?busyTimeoutMs=200' });
    try {
      expect((await send(app.url, 'evt_before')).status).toBe(200);
      // Another process holds the write lock: our commit cannot happen.
      const blocker = new Database(app.db.url.slice('sqlite:'.length));
      blocker.exec('BEGIN IMMEDIATE');
      const r = await send(app.url, 'evt_during');
      expect(r.status).toBe(503);
      expect(r.json().error).toBe('storage_unavailable');
      expect(r.headers['retry-after']).toBe('5');
      expect((await post(`${app.url}/webhooks/stripe`, '', {}, 'GET')).status).toBe(405);
      blocker.exec('ROLLBACK');
      blocker.close();
      const again = await send(app.url, 'evt_during');
      expect(again.status).toBe(200);
      expect(again.json().duplicate).toBe(false); // nothing was stored by the failed attempt
      expect((await app.store.countRows()).inbox).toBe(2);
    } finally {
      await app.stop();
    }
  });

  // SQLite goes on committing to a database or WAL file deleted under it: a restart would not find those events.
  it.each([['database file', ''], ['WAL file', '-wal']])('answers 503 once the %s is deleted under it, and /readyz says not ready', async (_what, suffix) => {
    const app = await startTestApp('sqlite');
    try {
      expect((await send(app.url, 'evt_before')).status).toBe(200);
      rmSync(`${app.db.url.slice('sqlite:'.length)}${suffix}`);
      const r = await send(app.url, 'evt_after_delete');
      expect(r.status).toBe(503);
      expect(r.headers['retry-after']).toBe('5');
      expect((await post(`${app.url}/readyz`, '', {}, 'GET')).status).toBe(503);
    } finally {
      await app.stop();
    }
  });
});

describe.runIf(await pgAvailable())('storage unavailable [postgres]', () => {
  const cleanups: (() => Promise<void>)[] = [];
  afterAll(async () => { for (const c of cleanups.reverse()) await c(); });
  /** A fresh, migrated PostgreSQL store (and its database), both cleaned up after the suite. */
  async function migratedStore(opts?: Parameters<typeof openStore>[1]) {
    const db = await freshDatabase('postgres');
    cleanups.push(() => db.cleanup());
    const store = openStore(db.url, opts);
    cleanups.push(() => store.close());
    await store.migrate();
    return { db, store };
  }

  it('answers 503 while PostgreSQL is unreachable, /readyz says not ready, and accepts again when it is back', async () => {
    const { db, proxy, url } = await proxiedPostgres(cleanups);
    const config = parseConfig(configDoc(url, { groupCommit: { commitTimeoutMs: 3000 } }), {});
    const app = await startApp(config, { logger: pino({ level: 'silent' }), env: {}, shutdownGraceMs: 200 });
    cleanups.push(() => app.close());

    expect((await send(app.url, 'evt_up')).status).toBe(200);
    await proxy.stop();
    const down = await send(app.url, 'evt_down');
    expect(down.status).toBe(503);
    expect(down.json().error).toBe('storage_unavailable');
    expect(down.headers['retry-after']).toBe('5');
    expect((await post(`${app.url}/readyz`, '', {}, 'GET')).status).toBe(503);
    expect((await post(`${app.url}/healthz`, '', {}, 'GET')).status).toBe(200);

    await proxy.start();
    const back = await send(app.url, 'evt_down');
    expect(back.status).toBe(200);
    expect(back.json().duplicate).toBe(false);
    expect((await post(`${app.url}/readyz`, '', {}, 'GET')).status).toBe(200);
    const direct = openStore(db.url);
    expect((await direct.countRows()).inbox).toBe(2);
    await direct.close();
  });

  it('starts while PostgreSQL is unreachable (migrations already applied): logs that its warm-up failed, answers 503, and accepts once it is reachable', async () => {
    const db = await freshDatabase('postgres');
    cleanups.push(() => db.cleanup());
    const migrated = openStore(db.url);
    await migrated.migrate();
    await migrated.close();
    const proxy = new TcpProxy(5432);
    const port = await proxy.start();
    await proxy.stop(); // its port is now closed
    cleanups.push(() => proxy.stop());
    const url = new URL(db.url);
    url.port = String(port);
    const lines: string[] = [];
    const config = parseConfig(configDoc(url.toString(), { groupCommit: { commitTimeoutMs: 3000 } }), {});
    const app = await startApp(config, { logger: captureLog(lines), env: {}, migrate: false, shutdownGraceMs: 200 });
    cleanups.push(() => app.close());

    const warmLog = lines.map((l) => JSON.parse(l) as { msg?: string; level?: number }).find((l) => l.msg?.startsWith('store warm-up failed'));
    expect(warmLog?.level).toBe(40); // warn: the server runs; its first batches open what warm-up could not
    const down = await send(app.url, 'evt_cold');
    expect(down.status).toBe(503);
    expect(down.json().error).toBe('storage_unavailable');

    await proxy.start(port);
    const up = await send(app.url, 'evt_cold');
    expect(up.status).toBe(200);
    expect(up.json().duplicate).toBe(false);
  });

  it('a notice whose connection is lost mid-transaction fails as storage_unavailable, and the server does not crash (no unhandled client error)', async () => {
    const { db, store } = await migratedStore();
    const uncaught: unknown[] = [];
    const onUncaught = (err: unknown) => void uncaught.push(err);
    process.on('uncaughtException', onUncaught);
    const holder = new pg.Client({ connectionString: db.url });
    await holder.connect();
    try {
      // Hold the notice key's lock so the notice's transaction waits on it, its client checked out.
      await holder.query('BEGIN');
      await holder.query(SQL.LOCK_NOTICE_KEY, ['stripe', 'ep', 'ck1']);
      // Its outcome is taken at once: the rejection may come while the terminate below is awaited.
      const notice = store.acceptBatch([record('evt_notice', undefined, { coalesceKey: 'ck1' })]).then(() => 'accepted', (err: unknown) => err);
      const waiting = `SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND application_name = 'webhook-inbox' AND wait_event_type = 'Lock'`;
      for (let i = 0; i < 100 && (await holder.query(waiting)).rowCount === 0; i++) await new Promise((r) => setTimeout(r, 20));
      expect((await holder.query(`SELECT pg_terminate_backend(pid) FROM (${waiting}) w`)).rowCount).toBe(1);
      expect(await notice).toMatchObject({ name: 'StorageUnavailableError' });
      await holder.query('ROLLBACK');
      await new Promise((r) => setTimeout(r, 100));
      expect(uncaught).toEqual([]);
      const again = record('evt_notice_2', undefined, { coalesceKey: 'ck1' });
      expect(await store.acceptBatch([again])).toEqual([{ inboxId: again.inboxId, duplicate: false }]);
    } finally {
      process.off('uncaughtException', onUncaught);
      await holder.end();
    }
  });

  /**
   * A store whose only use is its new-work listener, connected through a proxy, and another
   * process's store to accept events whose NOTIFYs it should hear.
   */
  async function listenerBehindProxy() {
    const { db, store: notifying } = await migratedStore();
    const proxy = new TcpProxy(5432);
    await proxy.start();
    cleanups.push(() => proxy.stop());
    const url = new URL(db.url);
    url.port = String(proxy.port);
    const listening = new PostgresStore(url.toString(), { listenLivenessMs: 500 });
    cleanups.push(() => listening.close());
    const seen = { wakes: 0, lost: [] as Error[] };
    const subscribe = () => {
      const off = listening.onNewWork(() => void seen.wakes++, (reason) => void seen.lost.push(reason));
      cleanups.push(async () => off());
    };
    let n = 0;
    /** Accepts events until the listener is woken (its LISTEN may still be on its way). */
    const hearsAccepts = (what: string) => {
      const before = seen.wakes;
      return waitFor(async () => {
        await notifying.acceptBatch([record(`evt_listen_${n++}`)]);
        await new Promise((r) => setTimeout(r, 100));
        return seen.wakes > before;
      }, 15_000, what);
    };
    return { proxy, seen, subscribe, hearsAccepts };
  }

  it('the new-work listener notices its connection gone silent (no FIN, no RST) within its liveness bound, reconnects, and hears NOTIFYs again', async () => {
    const { proxy, seen, subscribe, hearsAccepts } = await listenerBehindProxy();
    subscribe();
    await hearsAccepts('the listener to hear a NOTIFY');
    proxy.freeze(); // the listener's connection: open, silent both ways
    const frozenAt = performance.now();
    // Within 2 × 500 ms it notices and reconnects (through the proxy: new connections pass), which
    // wakes it once, as NOTIFYs sent meanwhile are lost; TCP keepalive alone would take ~2 h.
    await hearsAccepts('the listener to be woken after its connection went silent');
    // 2 × 500 ms, the reconnect and one 100 ms accept-and-wait round, with room for a loaded CI box.
    expect(performance.now() - frozenAt, 'noticed the silent connection late').toBeLessThan(3000);
    await hearsAccepts('the reconnected listener to hear a NOTIFY');
    expect(seen.lost.length).toBeGreaterThan(0);
    expect(seen.lost[0]!.message).toMatch(/^liveness check failed/);
  });

  it('the new-work listener gives up on a LISTEN the server never answers and listens on a new connection', async () => {
    const { proxy, seen, subscribe, hearsAccepts } = await listenerBehindProxy();
    // The simple-protocol Query message carrying the LISTEN: its connection goes silent there.
    proxy.silenceAt((chunk) => chunk[0] === 0x51 && chunk.includes('LISTEN'));
    subscribe();
    await hearsAccepts('the listener to listen on a new connection');
    await hearsAccepts('the listener to hear a NOTIFY');
    expect(seen.lost).toEqual([]); // it never listened on the first: nothing was lost
  });

  it('workers whose new-work listener loses its connection count it (webhook_listener_lost_total) and log a warning', async () => {
    const lines: string[] = [];
    const app = await startTestApp('postgres', {}, {}, { workers: true, logger: captureLog(lines) });
    cleanups.push(() => app.stop());
    const admin = new pg.Client({ connectionString: app.db.url });
    await admin.connect();
    cleanups.push(() => admin.end());
    // The listener connects when the workers start: end it from the server side once it listens
    // (a connection lost before its LISTEN was answered is only a failed attempt, not reported).
    const terminate = `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database()
      AND application_name = 'webhook-inbox-listen' AND state = 'idle' AND query LIKE 'LISTEN %'`;
    await waitFor(async () => (await admin.query(terminate)).rowCount === 1, 10_000, 'the listener connection');
    await waitFor(async () => valueOf(await scrape(app.url), 'webhook_listener_lost_total') === 1, 10_000, 'the loss to be counted');
    const warning = lines.map((l) => JSON.parse(l) as { msg?: string; level?: number; err?: { message?: string } })
      .find((l) => l.msg?.startsWith('new-work listener lost'));
    expect(warning?.level).toBe(40);
    expect(warning?.err?.message).toMatch(/terminating connection/);
  });

  it('migrate waits for another process\'s migration however long it takes: the query timeout (commitTimeoutMs, for accepts) does not apply to migrations', async () => {
    const db = await freshDatabase('postgres');
    cleanups.push(() => db.cleanup());
    const other = new pg.Client({ connectionString: db.url });
    await other.connect();
    try {
      // Another server mid-migration, for longer than this one's query timeout.
      await other.query('BEGIN');
      await other.query("SELECT pg_advisory_xact_lock(hashtext('webhook-inbox:migrations'))");
      const store = openStore(db.url, { queryTimeoutMs: 200 });
      cleanups.push(() => store.close());
      const migrating = store.migrate();
      await new Promise((r) => setTimeout(r, 600));
      await other.query('COMMIT');
      expect((await migrating).length).toBeGreaterThan(0);
      await expect(store.ping()).resolves.toBeUndefined();
    } finally {
      await other.end();
    }
  });

  it('a notice that times out (its key locked past the query timeout) leaves no open transaction behind: the next accept on that connection commits', async () => {
    const { db, store } = await migratedStore({ queryTimeoutMs: 300 });
    const holder = new pg.Client({ connectionString: db.url });
    await holder.connect();
    try {
      await holder.query('BEGIN');
      await holder.query(SQL.LOCK_NOTICE_KEY, ['stripe', 'ep', 'ck1']);
      await expect(store.acceptBatch([record('evt_notice', undefined, { coalesceKey: 'ck1' })])).rejects.toMatchObject({ name: 'StorageUnavailableError' });
      // The lock is freed while the timed-out statement still waits for it on the server.
      const ev = record('evt_after_notice');
      const accepting = store.acceptBatch([ev]);
      await new Promise((r) => setTimeout(r, 50));
      await holder.query('COMMIT');
      const answered = await accepting.then((r) => r, () => null);
      // A success must mean a committed row (what another connection sees); a failure is a 503.
      const seen = (await holder.query('SELECT count(*)::int AS n FROM webhook_inbox WHERE provider_event_id = $1', ['evt_after_notice'])).rows[0].n;
      if (answered) expect(seen).toBe(1);
      const again = record('evt_after_notice_2');
      expect(await store.acceptBatch([again])).toEqual([{ inboxId: again.inboxId, duplicate: false }]);
      expect((await holder.query('SELECT count(*)::int AS n FROM webhook_inbox WHERE provider_event_id = $1', ['evt_after_notice_2'])).rows[0].n).toBe(1);
    } finally {
      await holder.end();
    }
  });

  it('a transaction whose caller fails while its BEGIN is still under way releases that connection: the engine\'s pool does not run dry', async () => {
    const { db, store } = await migratedStore({ queryTimeoutMs: 2000 });
    // More than the work pool's 4 connections: each failure must give its connection back.
    for (let i = 0; i < 6; i++) {
      await expect(store.transaction(async (tx) => {
        await Promise.all([tx.query('SELECT 1'), Promise.reject(new Error('handler failed'))]);
      })).rejects.toThrow('handler failed');
    }
    await expect(store.claimInbox(1, 'o', 1000, Date.now())).resolves.toEqual([]);
    const admin = new pg.Client({ connectionString: db.url });
    await admin.connect();
    const open = await admin.query("SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = current_database() AND state = 'idle in transaction'");
    await admin.end();
    expect(open.rows[0].n).toBe(0);
  });
});
