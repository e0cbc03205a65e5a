import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pino from 'pino';
import { afterEach, expect, it } from 'vitest';
import { stringify } from 'yaml';
import { parseConfig } from '../../src/config/schema.js';
import { HandlerRegistry } from '../../src/engine/handlers.js';
import { openStore } from '../../src/store/open.js';
import type { InboxStore } from '../../src/store/port.js';
import type { InboxDetail } from '../../src/store/work-port.js';
import { startWorkers } from '../../src/workers.js';
import { configDoc } from '../helpers/app.js';
import { acceptThroughIngress, FAST_WORKERS, waitFor } from '../helpers/engine.js';
import { runCli as cli } from '../helpers/server-process.js';
import { describeEachStore, freshDatabase, type TestDatabase } from '../helpers/stores.js';

/**
 * A payload key's value changed under its id and a worker loaded it (a restart after a Secret was
 * edited in place): each event it took ended FAILED payload_corrupt, a decision no requeue class
 * took back, so once the right value was back the operator sent them back one `retry` at a time.
 */
describeEachStore('requeue --reason payload', (kind) => {
  let db: TestDatabase | undefined;
  let store: InboxStore | undefined;
  let dir: string | undefined;
  afterEach(async () => {
    await store?.close();
    await db?.cleanup();
    if (dir) rmSync(dir, { recursive: true, force: true });
    store = db = dir = undefined;
  });

  it('sends the events whose bodies did not open back, once the key is right, and they are processed', async () => {
    db = await freshDatabase(kind);
    dir = mkdtempSync(join(tmpdir(), 'wi-requeue-payload-'));
    const right = configDoc(db.url, { ...FAST_WORKERS });
    const wrong = { ...right, payloadKeys: { current: 'k1', keys: { k1: Buffer.alloc(32, 9).toString('base64') } } };
    const ids = await acceptThroughIngress(right, ['evt_p1', 'evt_p2', 'evt_p3']);
    const seen: string[] = [];
    const handlers = () => new HandlerRegistry().on('payment_intent.succeeded', (e) => void seen.push((e.payload as { id: string }).id));
    store = openStore(db.url);
    /** Runs workers on `doc` until every event is as `done` says. */
    const workUntil = async (doc: Record<string, unknown>, done: (e: InboxDetail | null) => boolean, what: string) => {
      const w = await startWorkers(parseConfig(doc, {}), { handlers: handlers(), logger: pino({ level: 'silent' }), migrate: false });
      try {
        await waitFor(async () => {
          for (const id of ids) if (!done(await store!.getEvent(id))) return false;
          return true;
        }, 20_000, what);
      } finally {
        await w.stop();
      }
    };

    await workUntil(wrong, (e) => e?.failureReason === 'payload_corrupt', 'every event FAILED payload_corrupt');

    const config = join(dir, 'right.yaml');
    writeFileSync(config, stringify(right));
    const r = await cli(['requeue', '--config', config, '--reason', 'payload']);
    expect(r.code, r.err).toBe(0);
    expect(r.out.trim()).toBe('requeued 3 FAILED event(s) with reason payload_corrupt');

    await workUntil(right, (e) => e?.status === 'PROCESSED', 'every event PROCESSED');
    expect(seen.sort()).toEqual(['evt_p1', 'evt_p2', 'evt_p3']);
  }, 60_000);
});
