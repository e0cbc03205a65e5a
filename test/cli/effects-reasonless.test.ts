import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, expect, it } from 'vitest';
import { stringify } from 'yaml';
import { HandlerRegistry } from '../../src/engine/handlers.js';
import { NeedsDecisionError } from '../../src/engine/failure.js';
import { configDoc, startTestApp, type TestApp } from '../helpers/app.js';
import { FAST_WORKERS, waitFor } from '../helpers/engine.js';
import { stripeEvent, stripeHeaders } from '../helpers/events.js';
import { post } from '../helpers/http.js';
import { runCli as cli } from '../helpers/server-process.js';
import { describeEachStore } from '../helpers/stores.js';

/**
 * An executor mapping a provider's refusal to a decision, `new NeedsDecisionError(res.error?.code,
 * res.error?.message)`, where the code is sometimes absent (a JS module, or an `as string`). The
 * effect ended FAILED with failure_reason NULL: `effects failed` crashed on it (no listing at all
 * for the operator), `effects retry --all` skipped it on SQLite (its chunks walk
 * (failure_reason, rowid) > …, never true for NULL), and so did a handler's event.
 */
describeEachStore('a NeedsDecisionError without a reason', (kind) => {
  let app: TestApp | undefined;
  let dir: string | undefined;
  afterEach(async () => {
    await app?.stop();
    app = undefined;
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it('ends FAILED with a reason an operator can list and retry (effect and event alike)', async () => {
    const refusal: { error?: { code?: string; message: string } } = { error: { message: 'card declined' } };
    const handlers = new HandlerRegistry()
      .on('payment_intent.succeeded', (e, ctx) => {
        if (e.providerEventId === 'evt_decide') throw new NeedsDecisionError(refusal.error?.code as string, 'no order for this payment');
        ctx.effect('charge-fee', { pi: e.objectId });
      })
      .effect('charge-fee', () => { throw new NeedsDecisionError(refusal.error?.code as string, refusal.error!.message); });
    app = await startTestApp(kind, { ...FAST_WORKERS }, {}, { workers: true, handlers });
    const ids: string[] = [];
    for (const id of ['evt_fee', 'evt_decide']) {
      const body = stripeEvent(id);
      ids.push((await post(`${app.url}/webhooks/stripe`, body, stripeHeaders(body))).json().inbox_id as string);
    }
    const [effect] = await waitFor(async () => {
      const es = await app!.store.listEffects(ids[0]!);
      return es[0]?.status === 'FAILED' ? es : null;
    }, 10_000, 'effect FAILED');
    const event = await waitFor(async () => {
      const e = await app!.store.getEvent(ids[1]!);
      return e?.status === 'FAILED' ? e : null;
    }, 10_000, 'event FAILED');
    expect({ effect: effect!.failureReason, event: event.failureReason }).toEqual({ effect: 'needs_decision', event: 'needs_decision' });

    dir = mkdtempSync(join(tmpdir(), 'wi-effects-reasonless-'));
    const config = join(dir, 'cli.yaml');
    writeFileSync(config, stringify(configDoc(app.db.url)));
    const listed = await cli(['effects', 'failed', '--config', config]);
    expect(listed.code, listed.err).toBe(0);
    expect(listed.out).toContain(effect!.effectId);
    expect(listed.out).toContain('card declined');
    const retried = await cli(['effects', 'retry', '--config', config, '--all']);
    expect(retried.out).toContain('requeued 1 FAILED effect(s)');
  });
});
