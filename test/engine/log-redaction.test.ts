import pino from 'pino';
import { afterEach, describe, expect, it } from 'vitest';
import { HandlerRegistry } from '../../src/engine/handlers.js';
import { startTestApp, type TestApp } from '../helpers/app.js';
import { FAST_WORKERS, waitFor } from '../helpers/engine.js';
import { stripeHeaders } from '../helpers/events.js';
import { post } from '../helpers/http.js';
import { pgAvailable, PG_REQUIRED } from '../helpers/pg.js';

// A handler's write that breaks a DEFERRED constraint fails only at COMMIT: the settle transaction
// fails, which the engine logs (not classified into last_error). PostgreSQL's error carries the row
// data in `detail` ("Key (email)=(…) already exists."), and pino printed every field of it.
// PostgreSQL only: SQLite's errors carry no row data (and it has no deferrable unique constraint).
describe.runIf(PG_REQUIRED || (await pgAvailable()))('engine log lines never carry the row data of a database error [postgres]', () => {
  const kind = 'postgres';
  let app: TestApp | undefined;
  afterEach(async () => {
    await app?.stop();
    app = undefined;
  });

  it('a deferred unique violation at COMMIT: logged with its code and constraint, without the body value it quoted', async () => {
    const lines: string[] = [];
    const logger = pino({ level: 'debug' }, { write: (s: string) => void lines.push(s) });
    const secretEmail = 'alice.private@example.com';
    const handlers = new HandlerRegistry().on('payment_intent.*', async (event, ctx) => {
      const email = (event.payload as { data: { object: { receipt_email: string } } }).data.object.receipt_email;
      await ctx.tx.query('INSERT INTO customers (email) VALUES ($1)', [email]);
    });
    app = await startTestApp(kind, { ...FAST_WORKERS }, {}, { workers: true, handlers, logger });
    await app.store.transaction(async (tx) => {
      await tx.query('CREATE TABLE customers (email text, CONSTRAINT customers_email UNIQUE (email) DEFERRABLE INITIALLY DEFERRED)');
      await tx.query('INSERT INTO customers VALUES ($1)', [secretEmail]);
    });
    const send = (id: string) => {
      const body = Buffer.from(JSON.stringify({ id, type: 'payment_intent.succeeded', created: 1, data: { object: { id: `pi_${id}`, receipt_email: secretEmail } } }));
      return post(`${app!.url}/webhooks/stripe`, body, stripeHeaders(body));
    };
    // Two events (one settle transaction, then each alone) and one more later (a batch of one).
    const answers = await Promise.all([send('evt_a'), send('evt_b')]);
    expect(answers.map((a) => a.status)).toEqual([200, 200]);
    // Claimed together, their settle transaction fails ('settle transaction failed'), then each alone
    // ('settling this event failed' / 'inbox batch failed'); claimed apart, only the latter. Either way
    // the failure is logged, and again after each lease expiry.
    await waitFor(() => lines.filter((l) => l.includes('23505')).length >= 2, 15_000, 'the settle failures logged');
    const failures = lines.filter((l) => l.includes('23505'));
    expect(failures.length).toBeGreaterThan(0);
    expect(failures.join('\n')).toContain('customers_email');
    for (const l of lines) expect(l).not.toContain(secretEmail);
  }, 30_000);
});
