/**
 * Reference 2 — the receiver people write by hand: Express + express.raw, the Stripe SDK's
 * constructEvent, and one INSERT … ON CONFLICT DO NOTHING per request through a pg Pool
 * (default size), answering 200 after the insert. DATABASE_URL names the database,
 * STRIPE_WEBHOOK_SECRET the endpoint secret.
 */
import type { AddressInfo } from 'node:net';
import express from 'express';
import pg from 'pg';
import Stripe from 'stripe';

const secret = process.env.STRIPE_WEBHOOK_SECRET ?? '';
const stripe = new Stripe('sk_test_bench_not_used_for_api_calls');
const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL });
pool.on('error', () => undefined);

await pool.query(`CREATE TABLE IF NOT EXISTS stripe_events (
  id text PRIMARY KEY,
  type text NOT NULL,
  payload jsonb NOT NULL,
  received_at timestamptz NOT NULL DEFAULT now())`);

const app = express();
app.post('/webhooks/:endpoint', express.raw({ type: '*/*', limit: '2mb' }), async (req, res) => {
  let event: Stripe.Event;
  try {
    event = stripe.webhooks.constructEvent(req.body as Buffer, req.headers['stripe-signature'] ?? '', secret);
  } catch (err) {
    res.status(400).send(`Webhook Error: ${(err as Error).message}`);
    return;
  }
  try {
    await pool.query('INSERT INTO stripe_events (id, type, payload) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING', [
      event.id,
      event.type,
      (req.body as Buffer).toString('utf8'),
    ]);
    res.json({ received: true });
  } catch (err) {
    res.status(500).json({ error: (err as Error).message });
  }
});

const server = app.listen(0, '127.0.0.1', () => {
  console.log(`listening on http://127.0.0.1:${(server.address() as AddressInfo).port}`);
});
// Same keep-alive as the other servers, so idle-connection churn does not differ between them.
server.keepAliveTimeout = 65_000;
process.on('SIGTERM', () => {
  server.close(() => void pool.end().then(() => process.exit(0)));
  server.closeIdleConnections();
});
