import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { createServer as createHttpsServer } from 'node:https';
import type { AddressInfo, Socket } from 'node:net';
import { Webhook } from 'standardwebhooks';
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import type { DestinationConfig } from '../../src/config/engine.js';
import { parseSecretRef, SecretUnavailableError } from '../../src/config/secrets.js';
import type { DeliveryEvent, Destination } from '../../src/destinations/contract.js';
import { CIRCUIT_DEFAULTS } from '../../src/destinations/circuit.js';
import { closeAll, createDestination, type DestinationHooks } from '../../src/destinations/registry.js';
import { retryAfterDelayMs } from '../../src/destinations/http.js';
import { NeedsDecisionError, RetryableError } from '../../src/engine/failure.js';
import { ConfigError } from '../../src/errors.js';
import { thrownBy } from '../helpers/adapter.js';
import { closedPort, failureOf } from '../helpers/destinations.js';
import { makeCert } from '../helpers/paypal.js';

const SECRET = 'whsec_' + Buffer.alloc(32, 7).toString('base64');
const BODY = Buffer.from('{"id":"evt_1",  "type":"invoice.paid", "note":"caf\u00e9 \u2603"}\n');

interface Received {
  readonly path: string;
  readonly headers: IncomingMessage['headers'];
  readonly body: Buffer;
  readonly socket: Socket;
}

type Handler = (req: IncomingMessage, res: ServerResponse, body: Buffer) => void;

let server: Server;
let base: string;
const received: Received[] = [];
let handler: Handler = (_req, res) => res.end('ok');
const sockets = new Set<Socket>();

beforeAll(async () => {
  server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const body = Buffer.concat(chunks);
      received.push({ path: req.url ?? '', headers: req.headers, body, socket: req.socket });
      handler(req, res, body);
    });
  });
  server.on('connection', (s) => {
    sockets.add(s);
    s.on('close', () => sockets.delete(s));
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});

afterAll(async () => {
  for (const s of sockets) s.destroy();
  await new Promise<void>((r) => server.close(() => r()));
});

const open: Destination[] = [];
afterEach(async () => {
  await closeAll(open.splice(0));
  received.length = 0;
  handler = (_req, res) => res.end('ok');
  // Sockets a test left hanging (the never-answering server) must not outlive it.
  for (const s of sockets) s.destroy();
});

function destination(over: Partial<Extract<DestinationConfig, { type: 'http' }>> = {}, env: NodeJS.ProcessEnv = {}, hooks: DestinationHooks = {}): Destination {
  const d = createDestination({ id: 'fwd', type: 'http', url: `${base}/hooks/in?x=1`, secret: parseSecretRef(SECRET, 'destinations[0].secret'), timeoutMs: 2000, maxConnections: 32, circuitBreaker: CIRCUIT_DEFAULTS, ...over }, env, hooks);
  open.push(d);
  return d;
}

function event(inboxId = '0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b', body: Buffer | undefined = BODY): DeliveryEvent {
  return { inboxId, provider: 'stripe', endpointId: 'stripe-main', providerEventId: 'evt_1', eventType: 'invoice.paid', receivedAtMs: Date.now(), body };
}

describe('http destination', () => {
  it('POSTs the exact bytes with a Standard Webhooks signature the official library verifies', async () => {
    const d = destination({ secret: parseSecretRef('${env:FWD_SECRET}', 'destinations[0].secret') }, { FWD_SECRET: SECRET });
    const e = event();
    await d.deliver(e);

    expect(received).toHaveLength(1);
    const r = received[0]!;
    expect(r.path).toBe('/hooks/in?x=1');
    expect(r.body.equals(BODY)).toBe(true);
    expect(r.headers['content-type']).toBe('application/json');
    expect(r.headers['user-agent']).toBe('webhook-inbox');
    expect(r.headers['idempotency-key']).toBe(e.inboxId);
    expect(r.headers['webhook-id']).toBe(e.inboxId);
    const ts = Number(r.headers['webhook-timestamp']);
    expect(Math.abs(ts - Date.now() / 1000)).toBeLessThan(5);

    const wh = new Webhook(SECRET);
    const h = { 'webhook-id': String(r.headers['webhook-id']), 'webhook-timestamp': String(r.headers['webhook-timestamp']), 'webhook-signature': String(r.headers['webhook-signature']) };
    expect(() => wh.verify(r.body, h)).not.toThrow();
    // Any other key, or any other byte, fails verification.
    expect(() => new Webhook('whsec_' + Buffer.alloc(32, 8).toString('base64')).verify(r.body, h)).toThrow();
    expect(() => wh.verify(Buffer.concat([r.body, Buffer.from(' ')]), h)).toThrow();
  });

  it('a form-encoded provider body (Twilio, Slack commands, Mollie classic) is forwarded as a form, byte for byte', async () => {
    const form = Buffer.from('MessageSid=SM123&MessageStatus=delivered&Body=caf%C3%A9+%E2%98%95');
    await destination().deliver(event('id-form', form));
    expect(received[0]!.headers['content-type']).toBe('application/x-www-form-urlencoded');
    expect(received[0]!.body.equals(form)).toBe(true);
    expect(received[0]!.headers['webhook-inbox-verification']).toBeUndefined();
  });

  it('an unsigned notice (Mollie classic) is forwarded with Webhook-Inbox-Verification: fetch-required', async () => {
    await destination().deliver({ ...event('id-notice', Buffer.from('id=tr_abc123')), verification: 'fetch-required' });
    expect(received[0]!.headers['webhook-inbox-verification']).toBe('fetch-required');
  });

  it('keeps the connection alive between deliveries and keeps the idempotency key stable per event', async () => {
    const d = destination();
    // (undici frees the pooled socket a tick after the answer completes: without the pause, a
    // delivery started in the same tick opens a second socket.)
    await d.deliver(event('id-a'));
    await new Promise((r) => setImmediate(r));
    await d.deliver(event('id-a'));
    await new Promise((r) => setImmediate(r));
    await d.deliver(event('id-b'));
    expect(received.map((r) => r.headers['idempotency-key'])).toEqual(['id-a', 'id-a', 'id-b']);
    expect(new Set(received.map((r) => r.socket)).size).toBe(1);
  });

  it('opens at most maxConnections requests at once; the others wait their turn, and waiting does not count against timeoutMs', async () => {
    let open = 0;
    let most = 0;
    handler = (_req, res) => {
      most = Math.max(most, ++open);
      setTimeout(() => {
        open--;
        res.end('ok');
      }, 100);
    };
    // 30 requests of ~100 ms through 3 connections take ~1 s, past the 1 s deadline of the last ones had their wait counted.
    const d = destination({ maxConnections: 3, timeoutMs: 1000 });
    const results = await Promise.allSettled(Array.from({ length: 30 }, (_, i) => d.deliver(event(`id-${i}`))));
    expect(results.filter((r) => r.status === 'rejected')).toEqual([]);
    expect(received).toHaveLength(30);
    expect(most).toBe(3);
    expect(new Set(received.map((r) => r.socket)).size).toBeLessThanOrEqual(3);
  });

  it('a delivery waiting for a connection is signed when it gets one: its timestamp is fresh on arrival', async () => {
    const ages: number[] = [];
    handler = (req, res) => {
      ages.push(Date.now() / 1000 - Number(req.headers['webhook-timestamp']));
      setTimeout(() => res.end('ok'), 1100);
    };
    const d = destination({ maxConnections: 1, timeoutMs: 3000 });
    await Promise.all(Array.from({ length: 3 }, (_, i) => d.deliver(event(`queued-${i}`))));
    // The third waited ~2.2 s for the one connection; signed before waiting, it would arrive 2+ s old.
    expect(ages).toHaveLength(3);
    expect(Math.max(...ages)).toBeLessThan(1.5);
  });

  it('sends Basic auth from credentials in the URL', async () => {
    const d = destination({ url: `http://user:p%40ss@${base.slice('http://'.length)}/auth` });
    await d.deliver(event());
    expect(received[0]!.headers.authorization).toBe(`Basic ${Buffer.from('user:p@ss').toString('base64')}`);
  });

  it('5xx and 4xx are retryable http_<status>, and the error never carries a body', async () => {
    const d = destination();
    handler = (_req, res, body) => {
      res.statusCode = 500;
      res.end(body); // echo: the answer must not leak into the error either
    };
    const e500 = await failureOf(d.deliver(event()));
    expect(e500).toBeInstanceOf(RetryableError);
    expect(e500.reason).toBe('http_500');
    expect(e500.message).not.toContain('evt_1');

    handler = (_req, res) => {
      res.statusCode = 404;
      res.end('nope');
    };
    const e404 = await failureOf(d.deliver(event()));
    expect(e404.reason).toBe('http_404');
  });

  it('does not follow a redirect: a 3xx is a failure and its Location is never requested', async () => {
    const d = destination();
    handler = (req, res) => {
      if (req.url === '/elsewhere') {
        res.end('should not be reached');
        return;
      }
      res.writeHead(302, { location: `${base}/elsewhere` });
      res.end();
    };
    const err = await failureOf(d.deliver(event()));
    expect(err).toBeInstanceOf(RetryableError);
    expect(err.reason).toBe('http_302');
    await new Promise((r) => setTimeout(r, 100));
    expect(received.map((r) => r.path)).toEqual(['/hooks/in?x=1']);
  });

  it('a server that never answers is a timeout within about timeoutMs', async () => {
    const d = destination({ timeoutMs: 400 });
    handler = () => undefined;
    const t0 = Date.now();
    const err = await failureOf(d.deliver(event()));
    const elapsed = Date.now() - t0;
    expect(err.reason).toBe('timeout');
    expect(err.message).toBe('http destination "fwd": no answer within 400 ms');
    expect(elapsed).toBeGreaterThanOrEqual(350);
    expect(elapsed).toBeLessThan(1500);
  });

  describe('circuit breaker', () => {
    const reasons = (results: PromiseSettledResult<void>[]) => results.map((r) => (r.status === 'fulfilled' ? 'delivered' : (r.reason as RetryableError).reason));
    const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

    it('a service that stops answering opens it: the deliveries waiting for a connection then fail at once without a request, and so do new ones until the cooldown', async () => {
      const changes: [string, boolean, number][] = [];
      const d = destination({ timeoutMs: 300, maxConnections: 2, circuitBreaker: { failures: 1, cooldownMs: 60_000 } }, {}, { onCircuit: (...c) => changes.push(c) });
      handler = () => undefined; // never answers
      // Two requests open, four waiting behind them: the first timeout opens the circuit, the other
      // open request (sent before) still times out, and the four waiting never go.
      const results = await Promise.allSettled(Array.from({ length: 6 }, (_, i) => d.deliver(event(`dead-${i}`))));
      expect(reasons(results)).toEqual(['timeout', 'timeout', 'destination_down', 'destination_down', 'destination_down', 'destination_down']);
      expect(received).toHaveLength(2);
      expect(changes).toEqual([['fwd', true, 1]]);
      const later = await failureOf(d.deliver(event('later')));
      expect(later.reason).toBe('destination_down');
      expect(later.message).toMatch(/^http destination "fwd" is not answering: circuit open, no request sent \(next probe in (59|60) s\)$/);
      // Its retry is not due before the probe may go (the retry policy's cap still bounds it).
      expect((later as RetryableError).retryAfterMs).toBeGreaterThan(59_000);
      // Whole ms: it becomes a retry's next_attempt_at, a SQLite STRICT INTEGER column.
      expect(Number.isInteger((later as RetryableError).retryAfterMs)).toBe(true);
      expect(received).toHaveLength(2);
    });

    it('after the cooldown one delivery goes as a probe while the others still fail at once; its answer closes the circuit', async () => {
      const changes: [string, boolean, number][] = [];
      const d = destination({ timeoutMs: 300, circuitBreaker: { failures: 1, cooldownMs: 500 } }, {}, { onCircuit: (...c) => changes.push(c) });
      handler = () => undefined;
      expect((await failureOf(d.deliver(event('first')))).reason).toBe('timeout');
      // A probe that gets no answer opens it for another cooldown.
      await sleep(550);
      expect(reasons(await Promise.allSettled([d.deliver(event('probe-1')), d.deliver(event('beside-1'))]))).toEqual(['timeout', 'destination_down']);
      expect(received.map((r) => r.headers['webhook-id'])).toEqual(['first', 'probe-1']);
      expect((await failureOf(d.deliver(event('in-cooldown')))).reason).toBe('destination_down');
      await sleep(550);
      handler = (_req, res) => setTimeout(() => res.end('ok'), 100);
      expect(reasons(await Promise.allSettled([d.deliver(event('probe-2')), d.deliver(event('beside-2'))]))).toEqual(['delivered', 'destination_down']);
      expect(changes).toEqual([['fwd', true, 1], ['fwd', false, 0]]);
      // Closed: deliveries go again, side by side.
      expect(reasons(await Promise.allSettled([d.deliver(event('after-1')), d.deliver(event('after-2'))]))).toEqual(['delivered', 'delivered']);
      expect(received.map((r) => r.headers['webhook-id'])).toEqual(['first', 'probe-1', 'probe-2', 'after-1', 'after-2']);
    });

    it('a probe that times out after a late answer closed the circuit does not open it again silently: one timeout is not "failures" in a row', async () => {
      // timeoutMs longer than cooldownMs (a slow receiver, the default cooldown): a request sent
      // before the circuit opened can still answer while the probe is out, and closes it.
      const changes: [string, boolean, number][] = [];
      const d = destination({ timeoutMs: 3000, maxConnections: 4, circuitBreaker: { failures: 2, cooldownMs: 100 } }, {}, { onCircuit: (...c) => changes.push(c) });
      let lateAnswer: ServerResponse | undefined;
      let probeArrived!: () => void;
      const probed = new Promise<void>((r) => (probeArrived = r));
      handler = (req, res) => {
        const id = req.headers['webhook-id'];
        if (id === 'late') lateAnswer = res; // answered by the test, below
        else if (id === 'after') res.end('ok');
        else if (id === 'probe') probeArrived(); // never answered
        // 'first-…': never answered
      };
      const first = Promise.all([failureOf(d.deliver(event('first-1'))), failureOf(d.deliver(event('first-2')))]);
      await sleep(1500);
      const late = d.deliver(event('late'));
      expect((await first).map((f) => f.reason)).toEqual(['timeout', 'timeout']); // two in a row open the circuit
      await sleep(200); // the cooldown
      const probe = failureOf(d.deliver(event('probe')));
      await probed;
      lateAnswer!.end('ok');
      await late; // an answer: the circuit closes
      expect(changes).toEqual([['fwd', true, 2], ['fwd', false, 0]]);
      expect((await probe).reason).toBe('timeout');
      // Closed, as the log and the gauge say: one timeout is not two in a row, and the next delivery goes.
      await d.deliver(event('after'));
      expect(changes).toEqual([['fwd', true, 2], ['fwd', false, 0]]);
      expect(received.map((r) => r.headers['webhook-id']).sort()).toEqual(['after', 'first-1', 'first-2', 'late', 'probe']);
    });

    it('the cooldown is timed by a monotonic clock: a wall clock stepped back while the circuit is open does not keep it open that much longer', async () => {
      // A wall clock the test can step (it runs on from where it is set); the monotonic one stays.
      vi.useFakeTimers({ toFake: ['Date'], shouldAdvanceTime: true });
      try {
        const d = destination({ timeoutMs: 300, circuitBreaker: { failures: 1, cooldownMs: 500 } });
        handler = () => undefined;
        expect((await failureOf(d.deliver(event('first')))).reason).toBe('timeout');
        // chrony (or an operator) sets the host's clock back 10 minutes while the circuit is open.
        vi.setSystemTime(Date.now() - 10 * 60_000);
        await sleep(550);
        handler = (_req, res) => res.end('ok');
        // The cooldown is over: the probe goes, and its answer closes the circuit.
        await d.deliver(event('probe'));
        expect(received.map((r) => r.headers['webhook-id'])).toEqual(['first', 'probe']);
      } finally {
        vi.useRealTimers();
      }
    });

    it('any answer, even a 500, resets the count: only timeouts in a row open the circuit', async () => {
      const d = destination({ timeoutMs: 300, circuitBreaker: { failures: 2, cooldownMs: 60_000 } });
      const answers = [() => undefined, (res: ServerResponse) => { res.statusCode = 500; res.end(); }, () => undefined, (res: ServerResponse) => res.end('ok')];
      let n = 0;
      handler = (_req, res) => answers[n++]!(res);
      const seen: string[] = [];
      for (let i = 0; i < 4; i++) seen.push(await d.deliver(event(`mixed-${i}`)).then(() => 'delivered', (e: RetryableError) => e.reason));
      expect(seen).toEqual(['timeout', 'http_500', 'timeout', 'delivered']);
      expect(received).toHaveLength(4);
    });

    it('a refused connection fails fast and holds no place: it does not open the circuit, so the service is delivered to as soon as it is back', async () => {
      const port = await closedPort();
      const d = destination({ url: `http://127.0.0.1:${port}/hooks`, circuitBreaker: { failures: 1, cooldownMs: 60_000 } });
      const results = await Promise.allSettled(Array.from({ length: 3 }, (_, i) => d.deliver(event(`refused-${i}`))));
      expect(reasons(results)).toEqual(['connection', 'connection', 'connection']);
      const back = createServer((req, res) => req.resume().on('end', () => res.end('ok')));
      await new Promise<void>((r) => back.listen(port, '127.0.0.1', r));
      try {
        await d.deliver(event('back'));
      } finally {
        back.closeAllConnections();
        await new Promise<void>((r) => back.close(() => r()));
      }
    });

    it('circuitBreaker: false keeps it off: every delivery waits out its own timeout', async () => {
      const d = destination({ timeoutMs: 300, maxConnections: 2, circuitBreaker: null });
      handler = () => undefined;
      const results = await Promise.allSettled(Array.from({ length: 4 }, (_, i) => d.deliver(event(`off-${i}`))));
      expect(reasons(results)).toEqual(['timeout', 'timeout', 'timeout', 'timeout']);
      expect(received).toHaveLength(4);
    });
  });

  describe('a 429 or 503 with Retry-After pauses the destination', () => {
    const reasons = (results: PromiseSettledResult<void>[]) => results.map((r) => (r.status === 'fulfilled' ? 'delivered' : (r.reason as RetryableError).reason));
    const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
    const answer = (status: number, headers: Record<string, string> = {}): Handler => (_req, res) => res.writeHead(status, headers).end();

    it('after a 429 with Retry-After: 2, deliveries send nothing and fail destination_paused with the time left, until the window is over', async () => {
      const d = destination();
      handler = answer(429, { 'retry-after': '2' });
      expect((await failureOf(d.deliver(event('limited')))).reason).toBe('http_429');
      handler = answer(200);
      const refused = await Promise.all(Array.from({ length: 3 }, (_, i) => failureOf(d.deliver(event(`during-${i}`)))));
      for (const r of refused) {
        expect(r).toBeInstanceOf(RetryableError);
        expect(r.reason).toBe('destination_paused');
        const left = (r as RetryableError).retryAfterMs!;
        expect(left).toBeGreaterThan(0);
        expect(left).toBeLessThanOrEqual(2000);
        // Whole ms: it becomes a retry's next_attempt_at, a SQLite STRICT INTEGER column.
        expect(Number.isInteger(left)).toBe(true);
        expect(r.message).toMatch(/^http destination "fwd" is paused: it answered HTTP 429 with Retry-After, so no request was sent \(resumes in [12] s\)$/);
      }
      expect(received.map((r) => r.headers['webhook-id'])).toEqual(['limited']);
      // Once the time it gave is over, the next delivery goes.
      await sleep((refused.at(-1) as RetryableError).retryAfterMs! + 20);
      await d.deliver(event('after'));
      expect(received.map((r) => r.headers['webhook-id'])).toEqual(['limited', 'after']);
    });

    it('deliveries already waiting for a connection when the 429 comes send nothing either', async () => {
      const d = destination({ maxConnections: 1 });
      handler = (_req, res) => setTimeout(() => res.writeHead(429, { 'retry-after': '60' }).end(), 100);
      const results = await Promise.allSettled(Array.from({ length: 4 }, (_, i) => d.deliver(event(`queued-${i}`))));
      expect(reasons(results)).toEqual(['http_429', 'destination_paused', 'destination_paused', 'destination_paused']);
      expect(received).toHaveLength(1);
    });

    it('an HTTP-date Retry-After pauses, and a 503 with Retry-After does too', async () => {
      const dated = destination();
      handler = answer(429, { 'retry-after': new Date(Date.now() + 5000).toUTCString() });
      await failureOf(dated.deliver(event('dated')));
      const a = await failureOf(dated.deliver(event('dated-next')));
      expect(a.reason).toBe('destination_paused');
      expect((a as RetryableError).retryAfterMs).toBeGreaterThan(0);
      expect((a as RetryableError).retryAfterMs).toBeLessThanOrEqual(5000);

      const unavailable = destination({ id: 'down-for-maintenance' });
      handler = answer(503, { 'retry-after': '30' });
      expect((await failureOf(unavailable.deliver(event('maint')))).reason).toBe('http_503');
      const b = await failureOf(unavailable.deliver(event('maint-next')));
      expect(b.reason).toBe('destination_paused');
      expect(b.message).toContain('"down-for-maintenance" is paused: it answered HTTP 503 with Retry-After');
      expect(received.map((r) => r.headers['webhook-id'])).toEqual(['dated', 'maint']);
    });

    it('no pause without a usable Retry-After, nor for another status: a 429 without one or with a malformed one, a 500 with one', async () => {
      const d = destination();
      const answers = [answer(429), answer(429, { 'retry-after': 'soon' }), answer(500, { 'retry-after': '60' }), answer(200)];
      let n = 0;
      handler = (req, res, body) => answers[n++]!(req, res, body);
      const seen: string[] = [];
      for (let i = 0; i < 4; i++) seen.push(await d.deliver(event(`plain-${i}`)).then(() => 'delivered', (e: RetryableError) => e.reason));
      expect(seen).toEqual(['http_429', 'http_429', 'http_500', 'delivered']);
      expect(received).toHaveLength(4);
    });

    it('a longer Retry-After extends the pause, a shorter one does not shorten it, and none pauses past 1 h', async () => {
      const d = destination({ maxConnections: 4 });
      // Three requests out at once, answered in this order: 1 s, 60 s, then 1 s again.
      const wait: Record<string, [number, string]> = { first: [0, '1'], longer: [100, '60'], shorter: [200, '1'] };
      handler = (req, res) => {
        const [ms, after] = wait[String(req.headers['webhook-id'])]!;
        setTimeout(() => res.writeHead(429, { 'retry-after': after }).end(), ms);
      };
      await Promise.allSettled(Object.keys(wait).map((id) => d.deliver(event(id))));
      const left = (await failureOf(d.deliver(event('next')))) as RetryableError;
      expect(left.reason).toBe('destination_paused');
      expect(left.retryAfterMs).toBeGreaterThan(55_000);

      const capped = destination({ id: 'capped' });
      handler = answer(429, { 'retry-after': '86400' });
      await failureOf(capped.deliver(event('a-day')));
      const c = (await failureOf(capped.deliver(event('a-day-next')))) as RetryableError;
      expect(c.reason).toBe('destination_paused');
      expect(c.retryAfterMs).toBeGreaterThan(3_500_000);
      expect(c.retryAfterMs).toBeLessThanOrEqual(3_600_000);
    });

    it('tells its listener once per pause, not per refused delivery', async () => {
      const pauses: [string, number, number][] = [];
      const d = destination({}, {}, { onPause: (...p) => pauses.push(p) });
      handler = answer(429, { 'retry-after': '30' });
      await failureOf(d.deliver(event('limited')));
      for (let i = 0; i < 3; i++) await failureOf(d.deliver(event(`refused-${i}`)));
      expect(pauses).toHaveLength(1);
      expect(pauses[0]![0]).toBe('fwd');
      expect(pauses[0]![2]).toBe(429);
      expect(pauses[0]![1]).toBeGreaterThan(29_000);
      expect(pauses[0]![1]).toBeLessThanOrEqual(30_000);
    });
  });

  it('the deadline covers the answer body too, and the error says the receiver had answered', async () => {
    const d = destination({ timeoutMs: 400 });
    handler = (_req, res) => {
      res.writeHead(200, { 'content-length': '100' });
      res.write('partial'); // and never the rest
    };
    const t0 = Date.now();
    const err = await failureOf(d.deliver(event()));
    expect(err.reason).toBe('timeout');
    expect(Date.now() - t0).toBeLessThan(1500);
    // The receiver's own log shows a 200 within milliseconds (a wrong Content-Length, a stream
    // never ended): the operator must read why that 200 is retried, not "no answer".
    expect(err.message).toBe('http destination "fwd" answered HTTP 200, but its answer did not end within 400 ms: not delivered');
  });

  it('a 2xx whose answer is cut short (the connection reset mid-body) is not delivered: a connection failure, retried', async () => {
    // A receiver that sent its status line and then failed may not have kept the event; the same
    // answer stalled is already a timeout. Fixed length and chunked alike.
    const d = destination();
    for (const headers of [{ 'content-length': '100' }, {}]) {
      handler = (_req, res) => {
        res.writeHead(200, headers);
        res.write('partial');
        setTimeout(() => res.socket?.destroy(), 50);
      };
      const err = await failureOf(d.deliver(event()));
      expect(err).toBeInstanceOf(RetryableError);
      expect(err.reason).toBe('connection');
      expect(err.message).toContain('answered HTTP 200');
    }
    // A non-2xx cut short keeps its status as the reason.
    handler = (_req, res) => {
      res.writeHead(503, { 'content-length': '100' });
      res.write('partial');
      setTimeout(() => res.socket?.destroy(), 50);
    };
    expect((await failureOf(d.deliver(event()))).reason).toBe('http_503');
  });

  it('a 2xx with an answer past 128 KiB is delivered: the rest is not read, and the next delivery gets a fresh connection', async () => {
    const d = destination();
    handler = (_req, res) => res.end(Buffer.alloc(2 * 1024 * 1024, 0x61));
    await d.deliver(event('id-big'));
    handler = (_req, res) => res.end('ok');
    await d.deliver(event('id-next'));
    expect(received.map((r) => r.headers['idempotency-key'])).toEqual(['id-big', 'id-next']);
    expect(new Set(received.map((r) => r.socket)).size).toBe(2);
  });

  it('TLS is verified: a receiver whose certificate is not trusted gets no request, a connection failure that names why', async () => {
    const tls = makeCert({ cn: 'localhost', extraArgs: ['-addext', 'subjectAltName=DNS:localhost'] });
    let requests = 0;
    const untrusted = createHttpsServer({ key: tls.privateKeyPem, cert: tls.certPem }, (req, res) => {
      requests++;
      req.resume().on('end', () => res.end('ok'));
    });
    await new Promise<void>((r) => untrusted.listen(0, '127.0.0.1', r));
    try {
      const d = destination({ url: `https://localhost:${(untrusted.address() as AddressInfo).port}/hooks` });
      const err = await failureOf(d.deliver(event()));
      expect(err.reason).toBe('connection');
      expect(err.message).toContain('self-signed certificate');
      expect(requests).toBe(0);
    } finally {
      untrusted.closeAllConnections();
      await new Promise<void>((r) => untrusted.close(() => r()));
    }
  });

  it('a closed port is a connection failure', async () => {
    const d = destination({ url: `http://127.0.0.1:${await closedPort()}/x` });
    const err = await failureOf(d.deliver(event()));
    expect(err).toBeInstanceOf(RetryableError);
    expect(err.reason).toBe('connection');
  });

  it('an event whose payload is gone needs a decision', async () => {
    const d = destination();
    const err = await failureOf(d.deliver({ ...event('id-x'), body: undefined }));
    expect(err).toBeInstanceOf(NeedsDecisionError);
    expect(err.reason).toBe('payload_unavailable');
  });

  it('after close, deliveries fail as retryable without a request', async () => {
    const d = destination();
    await d.close();
    const err = await failureOf(d.deliver(event()));
    expect(err.reason).toBe('destination_closed');
    expect(received).toHaveLength(0);
  });

  it('secret problems name the config path, never the value', () => {
    const missing = thrownBy(() => destination({ secret: parseSecretRef('${env:NOPE}', 'destinations[0].secret') }, {}), SecretUnavailableError);
    expect(missing).toBeInstanceOf(SecretUnavailableError);
    expect(missing.message).toContain('destinations[0].secret');

    const bad = 'whsec_not*base64*at*all-SUPERSECRET';
    const err = thrownBy(() => destination({ secret: parseSecretRef(bad, 'destinations[0].secret') }), ConfigError);
    expect(err).toBeInstanceOf(ConfigError);
    expect(err.message).toContain('destinations[0].secret');
    expect(err.message).not.toContain('SUPERSECRET');

    // Too short to sign with (Standard Webhooks: at least 24 random bytes), refused the same way.
    const short = `whsec_${Buffer.from('SUPERSECRET-16by').toString('base64')}`;
    const weak = thrownBy(() => destination({ secret: parseSecretRef(short, 'destinations[0].secret') }), ConfigError);
    expect(weak.message).toMatch(/^destinations\[0\]\.secret: is 16 bytes: a signing secret is at least 24 random bytes/);
    expect(weak.message).not.toContain(short.slice('whsec_'.length));
  });
});

describe('Retry-After', () => {
  it('reads delay-seconds and an HTTP-date; anything else (absent, repeated, malformed) is no floor', () => {
    const now = Date.parse('2026-12-03T04:00:00Z');
    expect(retryAfterDelayMs('120', now)).toBe(120_000);
    expect(retryAfterDelayMs(' 0 ', now)).toBe(0);
    expect(retryAfterDelayMs('Thu, 03 Dec 2026 05:00:00 GMT', now)).toBe(3_600_000);
    expect(retryAfterDelayMs('Thu, 03 Dec 2026 03:00:00 GMT', now)).toBe(0); // already past
    for (const bad of [undefined, ['60', '60'], '', '-5', '1.5', '60s', 'soon', '2026-12-03']) expect(retryAfterDelayMs(bad, now), String(bad)).toBeUndefined();
  });
});
