import type { IncomingMessage } from 'node:http';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestApp, STRIPE_SECRET, type TestApp } from '../helpers/app.js';
import { stripeEvent, stripeHeaders } from '../helpers/events.js';
import { rawConnection } from '../helpers/http.js';

/** V8's collector, for this test only (the flag is set back at once: nothing else sees `gc`). */
function collector(): () => void {
  setFlagsFromString('--expose-gc');
  const gc = runInNewContext('gc') as () => void;
  setFlagsFromString('--no-expose-gc');
  return gc;
}

/**
 * An answered request is garbage once its answer is written, even while its keep-alive connection
 * stays open and idle. Senders keep connections open for minutes between deliveries, and a request
 * holds its body: a body kept per idle connection would escape the in-flight body budget (up to
 * `maxBodyBytes` per connection). server.ts kept each connection's last request until its next one.
 */
describe('idle keep-alive connections', () => {
  let app: TestApp;
  let port: number;
  beforeAll(async () => {
    app = await startTestApp('sqlite', { endpoints: [{ id: 'stripe', provider: 'stripe', secrets: [{ version: 'v1', value: STRIPE_SECRET }] }] });
    port = Number(new URL(app.url).port);
  });
  afterAll(async () => { await app?.stop(); });

  it('do not keep their last request (nor its body) alive', async () => {
    const requests: WeakRef<IncomingMessage>[] = [];
    const track = (req: IncomingMessage) => requests.push(new WeakRef(req));
    app.server.on('request', track);
    const connections = [];
    try {
      // Small bodies and one large enough for the parse-and-seal thread, each on its own connection.
      for (const [i, size] of [2_000, 9_000, 40_000, 300_000].entries()) {
        const body = stripeEvent(`evt_idle_${i}`, { size });
        const c = await rawConnection(port);
        c.sock.write(`POST /webhooks/stripe HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n`
          + `stripe-signature: ${stripeHeaders(body)['stripe-signature']}\r\ncontent-length: ${body.length}\r\n\r\n`);
        c.sock.write(body);
        connections.push(c);
      }
      const until = Date.now() + 10_000;
      while (connections.some((c) => !/\r\n\r\n\{"inbox_id"[^}]*\}/.test(c.text())) && Date.now() < until) await new Promise((r) => setTimeout(r, 10));
      for (const c of connections) {
        expect(c.text()).toMatch(/^HTTP\/1\.1 200 /);
        expect(c.closed()).toBe(false);
      }
      expect(requests).toHaveLength(4);

      // The connections stay open. A WeakRef keeps its target until the current job ends: collect
      // from later turns of the event loop, in three passes (one may only free what held the next).
      const gc = collector();
      for (let pass = 0; pass < 3; pass++) {
        await new Promise((r) => setTimeout(r, 20));
        gc();
      }
      expect(requests.filter((r) => r.deref() !== undefined)).toHaveLength(0);
      expect(connections.every((c) => !c.closed())).toBe(true);
    } finally {
      app.server.off('request', track);
      for (const c of connections) c.sock.destroy();
    }
  });
});
