import pino from 'pino';
import { afterEach, expect, it } from 'vitest';
import { ClockSkewWatch } from '../../src/engine/clock-skew.js';
import { Gauge } from '../../src/metrics/registry.js';
import { openStore } from '../../src/store/open.js';
import type { InboxStore } from '../../src/store/port.js';
import { startTestApp, type TestApp } from '../helpers/app.js';
import { FAST_WORKERS, scrapeMetrics, waitFor } from '../helpers/engine.js';
import { describeEachStore, freshDatabase, type TestDatabase } from '../helpers/stores.js';

describeEachStore('clock skew between a process and the database', (kind) => {
  let db: TestDatabase | undefined;
  let store: InboxStore | undefined;
  let app: TestApp | undefined;
  afterEach(async () => {
    await app?.stop();
    await store?.close();
    await db?.cleanup();
    app = store = db = undefined;
  });

  function logged() {
    const lines: { level: number; msg: string; skew_seconds?: number }[] = [];
    const log = pino({ level: 'info' }, { write: (s: string) => void lines.push(JSON.parse(s)) });
    return { lines, log };
  }

  it('a process clock 30 s ahead of the database is measured, shown as a gauge and warned about once; in step again is said once', async () => {
    db = await freshDatabase(kind);
    store = openStore(db.url);
    await store.migrate();
    let offsetMs = 30_000;
    const gauge = new Gauge('webhook_clock_skew_seconds', 'test');
    const { lines, log } = logged();
    const watch = new ClockSkewWatch(store, 10_000, gauge, log, () => Date.now() + offsetMs);

    const first = await watch.check();
    await watch.check();
    if (kind === 'sqlite') {
      // One host, one clock: nothing to compare, nothing set.
      expect(first).toBeUndefined();
      expect(gauge.get()).toBeUndefined();
      expect(lines).toEqual([]);
      return;
    }
    expect(first).toBeGreaterThan(29_000);
    expect(first).toBeLessThan(31_000);
    expect(gauge.get()).toBeCloseTo(30, 0);
    const warnings = lines.filter((l) => l.level === 40);
    expect(warnings).toHaveLength(1); // not once per check
    expect(warnings[0]!.msg).toContain("this process's clock is 30 s ahead of the database's");

    offsetMs = -30_000;
    expect(await watch.check()).toBeLessThan(-29_000);
    expect(lines.filter((l) => l.level === 40)).toHaveLength(1); // still off (the other way): no second warning

    offsetMs = 0;
    expect(Math.abs((await watch.check())!)).toBeLessThan(1000);
    await watch.check(); // still in step: nothing more to say
    expect(lines.filter((l) => l.level === 30).map((l) => l.msg)).toEqual(["this process's clock is in step with the database's again"]);
    expect(lines.filter((l) => l.level === 40)).toHaveLength(1);
  });

  it('the workers publish the gauge: near 0 on PostgreSQL with one clock, absent on SQLite', async () => {
    app = await startTestApp(kind, { ...FAST_WORKERS }, {}, { workers: true });
    if (kind === 'sqlite') {
      expect((await scrapeMetrics(app.url))('webhook_clock_skew_seconds')).toBeNaN();
      return;
    }
    const { skew } = await waitFor(async () => {
      const v = (await scrapeMetrics(app!.url))('webhook_clock_skew_seconds');
      return Number.isNaN(v) ? null : { skew: v };
    }, 10_000, 'webhook_clock_skew_seconds');
    expect(Math.abs(skew)).toBeLessThan(1);
  });
});
