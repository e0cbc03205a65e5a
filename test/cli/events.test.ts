import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pino from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { stringify } from 'yaml';
import { startApp } from '../../src/app.js';
import { parseConfig } from '../../src/config/schema.js';
import { uuidv7 } from '../../src/crypto/ids.js';
import { NeedsDecisionError } from '../../src/engine/failure.js';
import { HandlerRegistry } from '../../src/engine/handlers.js';
import { openStore } from '../../src/store/open.js';
import type { InboxStore } from '../../src/store/port.js';
import { configDoc, startTestApp, STRIPE_SECRET } from '../helpers/app.js';
import { FAST_WORKERS, waitFor } from '../helpers/engine.js';
import { stripeEvent, stripeHeaders } from '../helpers/events.js';
import { post } from '../helpers/http.js';
import { CLI, runCli } from '../helpers/server-process.js';
import { describeEachStore, type TestDatabase } from '../helpers/stores.js';

const cli = runCli;

describe('operator commands: --help', () => {
  it.each(['work', 'events', 'retry', 'requeue', 'outbox', 'effects'])('%s --help prints usage and exits 0', async (cmd) => {
    const r = await cli([cmd, '--help']);
    expect(r.code).toBe(0);
    expect(r.out).toContain(`Usage: webhook-inbox ${cmd}`);
    expect(r.out).toContain('--config');
  });

  it('the top-level help lists the operator commands', async () => {
    const r = await cli(['--help']);
    expect(r.code).toBe(0);
    for (const cmd of ['work', 'events', 'retry', 'requeue', 'outbox', 'effects', 'keys']) expect(r.out).toMatch(new RegExp(`^  ${cmd} +\\S`, 'm'));
  });
});

const ENDPOINTS = ['stripe', 'stripe-eu'].map((id) => ({ id, provider: 'stripe', secrets: [{ version: 'v1', value: STRIPE_SECRET }] }));

/** endpoint, event id, type — and how the engine ends it (see the handlers below). */
const PLAN: [endpoint: string, eventId: string, type: string][] = [
  ['stripe', 'evt_tech_1', 'payment_intent.succeeded'], // technical error every attempt → FAILED retries_exhausted
  ['stripe', 'evt_tech_2', 'payment_intent.succeeded'], // idem
  ['stripe', 'evt_decide', 'charge.refunded'], // needs decision → FAILED amount_mismatch at once
  ['stripe', 'evt_ok', 'customer.created'], // PROCESSED, with a DONE effect
  ['stripe-eu', 'evt_eu_tech', 'payment_intent.succeeded'], // FAILED retries_exhausted
  ['stripe-eu', 'evt_eu_ok', 'customer.created'], // PROCESSED
];
const PENDING_EVENT = 'evt_pending'; // accepted while no worker runs: stays PENDING

function handlers(ledgerUp: boolean): HandlerRegistry {
  return new HandlerRegistry()
    .on('payment_intent.succeeded', () => {
      if (!ledgerUp) throw new Error('ledger service timed out');
    })
    .on('charge.refunded', () => {
      throw new NeedsDecisionError('amount_mismatch', 'refund 2000 exceeds captured 1500');
    })
    .on('customer.created', (event, ctx) => ctx.effect('welcome', { customer: event.providerEventId }))
    .effect('welcome', () => undefined);
}

async function send(baseUrl: string, endpoint: string, eventId: string, type: string): Promise<string> {
  const body = stripeEvent(eventId, { type });
  const r = await post(`${baseUrl}/webhooks/${endpoint}`, body, stripeHeaders(body));
  expect(r.status).toBe(200);
  return r.json().inbox_id;
}

/**
 * FAILED, PROCESSED and PENDING rows made for real (the engine in-process, a handler that
 * throws), then the operator CLI against that database. The tests run in order: the read-only
 * ones first, then retry, requeue, and a worker run that picks the requeued events up.
 */
describeEachStore('operator CLI on a real inbox: events, retry, requeue', (kind) => {
  let db: TestDatabase | undefined;
  let dir: string;
  let config: string;
  let store: InboxStore;
  /** event id → inbox id */
  const ids = new Map<string, string>();
  const id = (eventId: string) => ids.get(eventId)!;
  const status = async (eventId: string) => (await store.getEvent(id(eventId)))?.status;

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'wi-events-cli-'));
    const app = await startTestApp(kind, { ...FAST_WORKERS, endpoints: ENDPOINTS }, {}, { workers: true, handlers: handlers(false) });
    db = app.db;
    try {
      for (const [endpoint, eventId, type] of PLAN) ids.set(eventId, await send(app.url, endpoint, eventId, type));
      await waitFor(async () => {
        for (const [, eventId] of PLAN) {
          const e = await app.store.getEvent(id(eventId));
          if (e?.status !== 'PROCESSED' && e?.status !== 'FAILED') return false;
        }
        return (await app.store.listEffects(id('evt_ok')))[0]?.status === 'DONE';
      }, 15_000, 'every event terminal');
    } finally {
      await app.close(); // the database stays for the CLI; afterAll drops it
    }
    const doc = configDoc(db.url, { endpoints: ENDPOINTS });
    const ingress = await startApp(parseConfig(doc, {}), { logger: pino({ level: 'silent' }), workers: false });
    try {
      ids.set(PENDING_EVENT, await send(ingress.url, 'stripe', PENDING_EVENT, 'customer.created'));
    } finally {
      await ingress.close();
    }
    config = join(dir, 'cli.yaml');
    writeFileSync(config, stringify(doc));
    store = openStore(db.url);
  });

  afterAll(async () => {
    await store?.close();
    await db?.cleanup();
    rmSync(dir, { recursive: true, force: true });
  });

  /** Inbox ids in the order the CLI printed them (`events list --json …`). */
  async function listJson(...filters: string[]): Promise<string[]> {
    const r = await cli(['events', 'list', '--config', config, '--json', ...filters]);
    expect(r.code, r.err).toBe(0);
    return r.out.trim() === '' ? [] : r.out.trim().split('\n').map((l) => JSON.parse(l).inbox_id as string);
  }
  const newestFirst = (eventIds: string[]) => eventIds.map(id).sort().reverse();
  const allNewestFirst = () => newestFirst([...ids.keys()]);

  it('the engine left the rows the CLI is tested on', async () => {
    expect(await store.getEvent(id('evt_tech_1'))).toMatchObject({ status: 'FAILED', failureReason: 'retries_exhausted', attemptCount: 3 });
    expect(await store.getEvent(id('evt_decide'))).toMatchObject({ status: 'FAILED', failureReason: 'amount_mismatch', attemptCount: 1 });
    expect(await status('evt_ok')).toBe('PROCESSED');
    expect(await status(PENDING_EVENT)).toBe('PENDING');
  });

  it('events list: a table of every event, newest first, with the next-page hint only when there is a next page', async () => {
    const r = await cli(['events', 'list', '--config', config]);
    expect(r.code, r.err).toBe(0);
    const [header, ...rows] = r.out.trimEnd().split('\n');
    expect(header!.split(/\s+/)).toEqual(['inbox_id', 'status', 'attempts', 'endpoint', 'type', 'received_at', 'failure']);
    expect(rows.map((l) => l.split(/\s+/)[0])).toEqual(allNewestFirst());
    const row = (eventId: string) => rows.find((l) => l.startsWith(id(eventId)))!.split(/\s+/);
    expect(row('evt_tech_1')).toEqual([id('evt_tech_1'), 'FAILED', '3', 'stripe', 'payment_intent.succeeded', expect.stringMatching(/^\d{4}-\d\d-\d\dT[\d:.]+Z$/), 'retries_exhausted']);
    expect(row('evt_eu_ok').slice(0, 5)).toEqual([id('evt_eu_ok'), 'PROCESSED', '1', 'stripe-eu', 'customer.created']);
    expect(row(PENDING_EVENT).slice(0, 3)).toEqual([id(PENDING_EVENT), 'PENDING', '0']);
    expect(r.err).toBe(`${ids.size} event(s); no more\n`);
    // A full page with more behind it gets the hint; a full page that is the last one does not.
    const first = await cli(['events', 'list', '--config', config, '--limit', String(ids.size - 1)]);
    expect(first.err).toBe(`${ids.size - 1} event(s); next page: --before ${allNewestFirst().at(-2)}\n`);
    const exact = await cli(['events', 'list', '--config', config, '--limit', String(ids.size)]);
    expect(exact.err).toBe(`${ids.size} event(s); no more\n`);
    const rest = await cli(['events', 'list', '--config', config, '--before', allNewestFirst().at(-1)!]);
    expect(rest.err).toBe('0 event(s); no more\n');
  });

  it('events list --json: one JSON object per line with the row diagnostics, never the payload', async () => {
    const r = await cli(['events', 'list', '--config', config, '--json']);
    expect(r.code, r.err).toBe(0);
    const lines = r.out.trim().split('\n').map((l) => JSON.parse(l));
    expect(lines.map((l) => l.inbox_id)).toEqual(allNewestFirst());
    expect(lines.find((l) => l.inbox_id === id('evt_decide'))).toMatchObject({
      status: 'FAILED', provider: 'stripe', endpoint_id: 'stripe', provider_event_id: 'evt_decide', event_type: 'charge.refunded',
      attempt_count: 1, failure_reason: 'amount_mismatch', last_error: expect.stringContaining('refund 2000 exceeds captured 1500'),
      payload_sha256: expect.stringMatching(/^[0-9a-f]{64}$/), payload_stored: true, matched_secret_version: 'v1',
    });
    // A time that is not there is null, as effects --json's failed_at and the other absent fields are: it was the
    // table's "-", which a script's `select(.processed_at != null)` or `fromdate` took for a time.
    const decided = lines.find((l) => l.inbox_id === id('evt_decide'));
    expect([decided.processed_at, decided.next_attempt_at]).toEqual([null, null]);
    expect(lines.find((l) => l.inbox_id === id('evt_ok'))).toMatchObject({ status: 'PROCESSED', failure_reason: null, processed_at: expect.stringMatching(/Z$/) });
    expect(r.out).not.toContain('"pad"'); // the stored body stays in the database
  });

  it('events list --json into a reader that stops early (| head -1): no stack trace, its own exit code', async () => {
    const child = spawn(process.execPath, [CLI, 'events', 'list', '--config', config, '--json'], { stdio: ['ignore', 'pipe', 'pipe'] });
    child.stdout.destroy(); // the reader is gone before the first line is written
    let err = '';
    child.stderr.on('data', (d: Buffer) => {
      err += d.toString();
    });
    const code = await new Promise<number | null>((resolve) => child.once('close', resolve));
    expect(err).not.toContain('EPIPE');
    expect(code, err).toBe(0);
  });

  it('events list filters: --status, --endpoint, --type, --reason, combined', async () => {
    const cases: [filters: string[], expected: string[]][] = [
      [['--status', 'failed'], newestFirst(['evt_tech_1', 'evt_tech_2', 'evt_decide', 'evt_eu_tech'])],
      [['--status', 'PENDING'], [id(PENDING_EVENT)]],
      [['--endpoint', 'stripe-eu'], newestFirst(['evt_eu_tech', 'evt_eu_ok'])],
      [['--type', 'charge.refunded'], [id('evt_decide')]],
      [['--reason', 'amount_mismatch'], [id('evt_decide')]],
      [['--reason', 'retries_exhausted'], newestFirst(['evt_tech_1', 'evt_tech_2', 'evt_eu_tech'])],
      [['--endpoint', 'stripe', '--status', 'failed', '--type', 'payment_intent.succeeded'], newestFirst(['evt_tech_1', 'evt_tech_2'])],
      [['--endpoint', 'nowhere'], []],
    ];
    // Read-only: the invocations run side by side.
    const got = await Promise.all(cases.map(([filters]) => listJson(...filters)));
    cases.forEach(([filters, expected], i) => expect(got[i], filters.join(' ')).toEqual(expected));
  });

  it('events list --limit and --before page through everything once', async () => {
    expect(await listJson('--limit', '2')).toEqual(allNewestFirst().slice(0, 2));
    const seen: string[] = [];
    let page = await listJson('--limit', '3');
    while (page.length > 0) {
      expect(page.length).toBeLessThanOrEqual(3);
      seen.push(...page);
      page = await listJson('--limit', '3', '--before', page.at(-1)!);
    }
    expect(seen).toEqual(allNewestFirst());
    // The table's hint is the next page's --before.
    const table = await cli(['events', 'list', '--config', config, '--limit', '3']);
    const hint = /--before (\S+)/.exec(table.err)![1]!;
    expect(await listJson('--before', hint)).toEqual(allNewestFirst().slice(3));
    expect(await listJson('--before', hint.toUpperCase())).toEqual(allNewestFirst().slice(3));
    // A cursor that is not an inbox id would page nowhere (PostgreSQL) or everywhere (SQLite text order): refused.
    const badCursor = await cli(['events', 'list', '--config', config, '--before', 'zzz']);
    expect(badCursor.code, badCursor.out).toBe(2);
    expect(badCursor.err).toContain('--before must be an inbox id');
    const badStatus = await cli(['events', 'list', '--config', config, '--status', 'bogus']);
    expect(badStatus.code).toBe(2);
    expect(badStatus.err).toContain('--status must be one of: pending, processing, processed, failed');
    // A failure reason is kept on FAILED rows only: with another status the list was always empty, exit 0.
    const reasonNotFailed = await cli(['events', 'list', '--config', config, '--status', 'pending', '--reason', 'retries_exhausted']);
    expect(reasonNotFailed.code, reasonNotFailed.out).toBe(2);
    expect(reasonNotFailed.err).toContain('--reason lists FAILED events; it cannot be combined with --status pending');
    for (const r of await Promise.all(['0', '1001', 'x'].map((bad) => cli(['events', 'list', '--config', config, '--limit', bad])))) {
      expect(r.code).toBe(2);
      expect(r.err).toContain('--limit must be an integer from 1 to 1000');
    }
  });

  it('events show: the event as JSON with its effects; a missing or malformed id exits 1 and says so', async () => {
    const r = await cli(['events', 'show', '--config', config, id('evt_ok')]);
    expect(r.code, r.err).toBe(0);
    expect(JSON.parse(r.out)).toMatchObject({
      inbox_id: id('evt_ok'), status: 'PROCESSED', endpoint_id: 'stripe', event_type: 'customer.created', attempt_count: 1,
      handler_version: 'customer.created@1',
      effects: [{ name: 'welcome', idempotency_key: `${id('evt_ok')}:welcome`, status: 'DONE', attempt_count: 1, failure_reason: null, last_error: null }],
    });
    // Ids are matched case-insensitively on both stores (PostgreSQL uuid; SQLite stores lowercase text).
    expect(JSON.parse((await cli(['events', 'show', '--config', config, id('evt_ok').toUpperCase()])).out).inbox_id).toBe(id('evt_ok'));
    const failed = JSON.parse((await cli(['events', 'show', '--config', config, id('evt_tech_1')])).out);
    expect(failed).toMatchObject({ status: 'FAILED', failure_reason: 'retries_exhausted', last_error: 'Error: ledger service timed out', effects: [] });

    const missing = uuidv7();
    const m = await cli(['events', 'show', '--config', config, missing]);
    expect(m.code).toBe(1);
    expect(m.err.trim()).toBe(`webhook-inbox events show: no event ${missing}`);
    const malformed = await cli(['events', 'show', '--config', config, 'not-an-id']);
    expect(malformed.code).toBe(1);
    expect(malformed.err.trim()).toBe('webhook-inbox events show: no event not-an-id');
    const noId = await cli(['events', 'show', '--config', config]);
    expect(noId.code).toBe(2);
    expect(noId.err).toContain('events show needs an INBOX_ID');
  });

  it('retry: a FAILED event goes back to PENDING, due now, with attempt_count 0', async () => {
    const t0 = Date.now();
    const r = await cli(['retry', '--config', config, id('evt_tech_1')]);
    expect(r.code, r.err).toBe(0);
    expect(r.out.trim()).toBe(`requeued ${id('evt_tech_1')}: PENDING, due now`);
    const e = await store.getEvent(id('evt_tech_1'));
    expect(e).toMatchObject({ status: 'PENDING', attemptCount: 0, failureReason: null, lastError: 'Error: ledger service timed out' });
    expect(e!.nextAttemptAtMs).toBeGreaterThanOrEqual(t0);
    expect(e!.nextAttemptAtMs).toBeLessThanOrEqual(Date.now());
  });

  it('retry refuses an event that is not FAILED, naming its status, and a missing one', async () => {
    for (const [eventId, st] of [['evt_ok', 'PROCESSED'], [PENDING_EVENT, 'PENDING'], ['evt_tech_1', 'PENDING']] as const) {
      const before = await store.getEvent(id(eventId));
      const r = await cli(['retry', '--config', config, id(eventId)]);
      expect(r.code).toBe(1);
      expect(r.err).toContain(`event ${id(eventId)} is ${st}, only FAILED events can be retried`);
      expect(await store.getEvent(id(eventId))).toEqual(before);
    }
    const missing = uuidv7();
    const r = await cli(['retry', '--config', config, missing]);
    expect(r.code).toBe(1);
    expect(r.err).toContain(`no event ${missing}`);
    const malformed = await cli(['retry', '--config', config, 'not-an-id']);
    expect(malformed.code).toBe(1);
    expect(malformed.err).toContain('no event not-an-id');
    expect((await cli(['retry', '--config', config])).code).toBe(2);
  });

  it('requeue --reason technical: only FAILED rows whose retries were exhausted, and prints the count', async () => {
    const exhausted = newestFirst(['evt_tech_2', 'evt_eu_tech']); // evt_tech_1 was retried above
    expect(await listJson('--reason', 'retries_exhausted')).toEqual(exhausted);
    const r = await cli(['requeue', '--config', config, '--reason', 'technical']);
    expect(r.code, r.err).toBe(0);
    expect(r.out.trim()).toBe('requeued 2 FAILED event(s) with reason retries_exhausted');
    for (const eventId of ['evt_tech_2', 'evt_eu_tech']) {
      expect(await store.getEvent(id(eventId)), eventId).toMatchObject({ status: 'PENDING', attemptCount: 0, failureReason: null });
    }
    // A needs-decision failure is not "technical": it waits for a person (and `retry`).
    expect(await store.getEvent(id('evt_decide'))).toMatchObject({ status: 'FAILED', failureReason: 'amount_mismatch' });
    expect(await status('evt_ok')).toBe('PROCESSED');
    expect(await listJson('--status', 'failed')).toEqual([id('evt_decide')]);
    expect((await cli(['requeue', '--config', config, '--reason', 'technical'])).out.trim()).toBe('requeued 0 FAILED event(s) with reason retries_exhausted');
  });

  it('requeue with an unknown or missing class exits 2 and names the allowed classes', async () => {
    const r = await cli(['requeue', '--config', config, '--reason', 'bogus']);
    expect(r.code).toBe(2);
    expect(r.err).toContain('--reason must be one of: technical');
    for (const inherited of ['__proto__', 'constructor', 'toString']) {
      const p = await cli(['requeue', '--config', config, '--reason', inherited]);
      expect([p.code, p.err.includes('--reason must be one of: technical')], inherited).toEqual([2, true]);
    }
    const none = await cli(['requeue', '--config', config]);
    expect(none.code).toBe(2);
    expect(none.err).toContain('--reason is required');
  });

  it('the next worker run processes what was requeued; the needs-decision event stays FAILED', async () => {
    const app = await startApp(parseConfig(configDoc(db!.url, { ...FAST_WORKERS, endpoints: ENDPOINTS }), {}), {
      logger: pino({ level: 'silent' }), workers: true, handlers: handlers(true), shutdownGraceMs: 500,
    });
    try {
      const requeued = ['evt_tech_1', 'evt_tech_2', 'evt_eu_tech', PENDING_EVENT];
      await waitFor(async () => {
        for (const eventId of requeued) if ((await status(eventId)) !== 'PROCESSED') return false;
        return true;
      }, 15_000, 'the requeued events PROCESSED');
      for (const eventId of ['evt_tech_1', 'evt_tech_2', 'evt_eu_tech']) {
        expect(await store.getEvent(id(eventId)), eventId).toMatchObject({ status: 'PROCESSED', attemptCount: 1, failureReason: null });
      }
      expect(await store.getEvent(id('evt_decide'))).toMatchObject({ status: 'FAILED', failureReason: 'amount_mismatch', attemptCount: 1 });
    } finally {
      await app.close();
    }
  });
});
