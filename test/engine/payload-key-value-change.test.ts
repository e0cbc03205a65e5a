import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pino from 'pino';
import { afterEach, beforeEach, expect, it } from 'vitest';
import { startApp, type RunningApp } from '../../src/app.js';
import { parseConfig } from '../../src/config/schema.js';
import { PayloadCipher } from '../../src/crypto/payload-cipher.js';
import { RetryableError } from '../../src/engine/failure.js';
import { HandlerRegistry } from '../../src/engine/handlers.js';
import { configDoc } from '../helpers/app.js';
import { FAST_WORKERS, waitFor } from '../helpers/engine.js';
import { stripeEvent, stripeHeaders } from '../helpers/events.js';
import { post } from '../helpers/http.js';
import { describeEachStore, freshDatabase, type TestDatabase } from '../helpers/stores.js';

const OLD = Buffer.alloc(32, 0x11).toString('base64');
const NEW = Buffer.alloc(32, 0x22).toString('base64');

/**
 * A payload key's value is what opens every payload and effect stored under its id. Rotating by
 * rewriting the key's secret file in place (a Kubernetes Secret edited, instead of a new key under
 * a new id) was picked up by the running process within 10 s: from then on every payload stored
 * under that id failed authentication, and each event waiting for a retry ended FAILED
 * payload_corrupt at its next attempt (needs decision: no retries), while the new accepts were
 * sealed under a value the other processes did not have. A running process keeps the value it
 * loaded, and says so (/readyz).
 */
describeEachStore('a payload key rewritten in place under the same id', (kind) => {
  let db: TestDatabase;
  let dir: string;
  let app: RunningApp | undefined;

  beforeEach(async () => {
    db = await freshDatabase(kind);
    dir = mkdtempSync(join(tmpdir(), 'wi-key-change-'));
  });
  afterEach(async () => {
    await app?.close();
    app = undefined;
    await db.cleanup();
    rmSync(dir, { recursive: true, force: true });
  });

  it('the running process keeps the value it loaded: the waiting event is processed with its exact bytes, and /readyz names the key', async () => {
    const keyFile = join(dir, 'payload-key');
    writeFileSync(keyFile, `${OLD}\n`);
    let hold = true;
    const seen = new Map<string, Buffer>();
    const handlers = new HandlerRegistry().on('payment_intent.succeeded', (event) => {
      if (hold) throw new RetryableError('downstream_down', 'the downstream is down');
      seen.set(event.providerEventId, Buffer.from(event.raw));
    });
    const doc = configDoc(db.url, { ...FAST_WORKERS, retry: { baseMs: 10, capMs: 40, maxAttempts: 1000 }, payloadKeys: { current: 'k1', keys: { k1: `\${file:${keyFile}}` } } });
    app = await startApp(parseConfig(doc, {}), { logger: pino({ level: 'silent' }), handlers, workers: true, secretCheckMs: 0 });

    const before = stripeEvent('evt_before_change');
    const r1 = await post(`${app.url}/webhooks/stripe`, before, stripeHeaders(before));
    expect(r1.status).toBe(200);
    const id1 = r1.json().inbox_id as string;
    await waitFor(async () => ((await app!.store.getEvent(id1))?.attemptCount ?? 0) >= 2, 10_000, 'a retry');

    // The key's file is rewritten with another value, and the process re-reads its secrets.
    writeFileSync(keyFile, `${NEW}\n`);
    await app.reloadSecrets();

    const after = stripeEvent('evt_after_change');
    const r2 = await post(`${app.url}/webhooks/stripe`, after, stripeHeaders(after));
    expect(r2.status).toBe(200);
    const id2 = r2.json().inbox_id as string;

    hold = false;
    for (const id of [id1, id2]) {
      await waitFor(async () => {
        const e = await app!.store.getEvent(id);
        return e && e.status !== 'PENDING' && e.status !== 'PROCESSING' ? e : undefined;
      }, 10_000, 'settled');
      const e = (await app.store.getEvent(id))!;
      expect(e.status, `${e.failureReason}: ${e.lastError}`).toBe('PROCESSED');
    }
    expect(seen.get('evt_before_change')!.equals(before)).toBe(true);
    expect(seen.get('evt_after_change')!.equals(after)).toBe(true);
    // What was accepted after the change is stored under the value every other process holds.
    const row = (await app.store.getInbox(id2))!;
    const stored = (await app.store.getPayload(row.rawPayloadRef!))!;
    expect(new PayloadCipher(new Map([['k1', Buffer.from(OLD, 'base64')]]), 'k1').open(stored, row).equals(after)).toBe(true);
    expect(app.keyring.problems.join('\n')).toMatch(/^payloadKeys\.keys\.k1: its value changed/m);
    const readyz = await fetch(`${app.url}/readyz`);
    expect(readyz.status).toBe(503);
    expect(await readyz.text()).toContain('payloadKeys.keys.k1: its value changed');

    // The old value back in the file: nothing to report any more.
    writeFileSync(keyFile, `${OLD}\n`);
    await app.reloadSecrets();
    expect(app.keyring.problems).toEqual([]);
  });
});
