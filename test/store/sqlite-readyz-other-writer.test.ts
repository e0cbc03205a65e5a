import Database from 'better-sqlite3';
import { afterEach, describe, expect, it } from 'vitest';
import { startTestApp, type TestApp } from '../helpers/app.js';
import { stripeEvent, stripeHeaders } from '../helpers/events.js';
import { post } from '../helpers/http.js';

/**
 * `serve` and `work` as two processes on one SQLite file (README): while the other process holds
 * the write lock (a handler's transaction, up to half of txTimeoutMs), this one's accepts wait for
 * it, up to busyTimeoutMs. Its /readyz must still answer at once: the process is healthy, and a
 * readiness probe with a 1 s timeout (Kubernetes' default) would take it out of its load balancer.
 */
describe('SQLite: /readyz while another process holds the write lock', () => {
  let app: TestApp | undefined;
  afterEach(async () => {
    await app?.stop();
    app = undefined;
  });

  it('answers ready at once while an accept waits for the lock; the accept is answered 200 once it is released', async () => {
    app = await startTestApp('sqlite');
    // Another process's transaction (a work process's handler): a connection of its own.
    const other = new Database(app.db.url.slice('sqlite:'.length));
    let release: NodeJS.Timeout | undefined;
    try {
      other.exec('BEGIN IMMEDIATE');
      // Released after 4 s, within the accept's busy timeout (6 s by default).
      release = setTimeout(() => other.exec('ROLLBACK'), 4000);
      const body = stripeEvent('evt_waits');
      const accepted = post(`${app.url}/webhooks/stripe`, body, stripeHeaders(body));
      await new Promise((r) => setTimeout(r, 300)); // the accept's commit now waits for the lock
      const t0 = performance.now();
      const ready = await post(`${app.url}/readyz`, '', {}, 'GET');
      const ms = performance.now() - t0;
      expect(ready.status, ready.text).toBe(200);
      // Before: the ping waited behind the accept, which SQLite's busy handler held inside the
      // writer thread until the lock was released (~3.7 s here). Now: a few ms.
      expect(ms).toBeLessThan(2000);
      const answer = await accepted;
      expect(answer.status).toBe(200);
      expect(answer.json().duplicate).toBe(false);
      expect(performance.now() - t0).toBeGreaterThan(3000); // it did wait for the other process
    } finally {
      clearTimeout(release);
      if (other.inTransaction) other.exec('ROLLBACK');
      other.close();
    }
  });
});
