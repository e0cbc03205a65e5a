import type { Readable } from 'node:stream';
import { isJsonBytes } from '../providers/form.js';
import { Pool, errors as undiciErrors } from 'undici';
import type { DestinationConfig } from '../config/engine.js';
import { Budget } from '../engine/budget.js';
import { FAILURE, NeedsDecisionError, NotAttemptedError, RetryableError } from '../engine/failure.js';
import { signStandard } from '../providers/standard-webhooks.js';
import { Circuit } from './circuit.js';
import type { DeliveryEvent, Destination } from './contract.js';
import { Pause } from './pause.js';
import { closedError, describe } from './util.js';

/** Told when a destination's circuit opens (after `failures` timeouts in a row) or closes. */
export type CircuitListener = (destination: string, open: boolean, failures: number) => void;

/** Told when a destination's pause begins (a 429 or 503 with Retry-After), with its length; not when one is extended. */
export type PauseListener = (destination: string, ms: number, status: number) => void;

/** Who is told of a destination's state (for the log and a gauge). */
export interface HttpListeners {
  readonly onCircuit?: CircuitListener;
  readonly onPause?: PauseListener;
}

export type HttpDestinationConfig = Extract<DestinationConfig, { type: 'http' }>;

/** How long an idle keep-alive socket is kept (below the usual 5 s server default). */
const KEEP_ALIVE_MS = 4_000;

/** A longer answer is not read to the end: its socket is closed instead of reused. */
const DRAIN_LIMIT = 128 * 1024;

const isSuccess = (status: number): boolean => status >= 200 && status < 300;

const TIMEOUT_CODES = new Set(['UND_ERR_CONNECT_TIMEOUT', 'UND_ERR_HEADERS_TIMEOUT', 'UND_ERR_BODY_TIMEOUT']);

/**
 * HTTP forward: POSTs the exact verified bytes the provider sent, signed the Standard Webhooks
 * way with the destination's own key, `webhook-id` = `idempotency-key` = the inbox id (stable
 * across retries, so the receiver can drop a second copy). A 2xx whose answer is complete =
 * delivered (an answer past DRAIN_LIMIT is cut there on purpose and still counts); a 2xx cut short
 * is `timeout` / `connection`, as a receiver that failed after its status line may not have kept
 * the event. Anything else, including 3xx (redirects are never followed) and 4xx, is a retryable
 * `http_<status>`.
 *
 * At most `maxConnections` requests are open at once (a batch of hundreds of events waits its
 * turn); an event's deadline starts when its request does, so waiting is not a timeout. A service
 * that stops answering (timeouts) opens the destination's circuit (circuit.ts): its deliveries
 * then fail at once (`destination_down`) instead of holding the workers' places for a timeout each.
 * A `429` or `503` with a Retry-After pauses the whole destination until then (pause.ts): its
 * deliveries fail at once without a request (`destination_paused`, NotAttemptedError: nothing was
 * sent, so the attempt is given back), instead of each getting the same answer and spending one.
 *
 * `key` gives the decoded signing key at each delivery (registry.ts: the KeyRing's, so a reloaded
 * secret signs the next delivery), or throws a RetryableError while there is none.
 */
export class HttpDestination implements Destination {
  readonly type = 'http' as const;
  readonly id: string;
  private readonly pool: Pool;
  private readonly path: string;
  private readonly authorization: string | undefined;
  private readonly timeoutMs: number;
  private readonly slots: Budget;
  private readonly circuit: Circuit | undefined;
  private readonly pause: Pause;
  private closed = false;

  constructor(config: HttpDestinationConfig, private readonly key: () => Buffer, { onCircuit, onPause }: HttpListeners = {}) {
    this.id = config.id;
    this.timeoutMs = config.timeoutMs;
    this.slots = new Budget(config.maxConnections);
    this.circuit = config.circuitBreaker === null ? undefined
      : new Circuit(config.circuitBreaker, (open, failures) => onCircuit?.(this.id, open, failures), config.timeoutMs);
    this.pause = new Pause((ms, status) => onPause?.(this.id, ms, status));
    const u = new URL(config.url);
    this.path = `${u.pathname}${u.search}`;
    // Credentials in the URL become Basic auth; they never reach an error message.
    this.authorization = u.username !== '' || u.password !== ''
      ? `Basic ${Buffer.from(`${decodeURIComponent(u.username)}:${decodeURIComponent(u.password)}`).toString('base64')}`
      : undefined;
    this.pool = new Pool(u.origin, {
      connections: config.maxConnections,
      connect: { timeout: config.timeoutMs },
      headersTimeout: config.timeoutMs,
      bodyTimeout: config.timeoutMs,
      keepAliveTimeout: KEEP_ALIVE_MS,
    });
  }

  async deliver(event: DeliveryEvent): Promise<void> {
    if (this.closed) throw closedError(this.type, this.id);
    const body = event.body;
    if (body === undefined) {
      throw new NeedsDecisionError(FAILURE.payloadUnavailable, `http destination "${this.id}": the raw payload of ${event.inboxId} is no longer stored`);
    }
    const key = this.key();
    this.paused();
    let probe = this.admit();
    // Signed once a connection slot is ours: a delivery queued behind slow ones must not arrive
    // with a timestamp the receiver already finds stale.
    await this.slots.reserve(1);
    // The destination may have asked for a pause, or its circuit opened, while this one waited
    // (behind the requests that were told so).
    try {
      this.paused();
      probe ||= this.admit();
    } catch (err) {
      this.slots.release(1);
      this.circuit?.released(probe);
      throw err;
    }
    // One deadline for the whole exchange: connect, headers and body.
    const ac = new AbortController();
    const timer = setTimeout(() => ac.abort(), this.timeoutMs);
    let status: number | undefined;
    let retryAfter: string | string[] | undefined;
    let failure: RetryableError | undefined;
    try {
      if (this.closed) throw closedError(this.type, this.id);
      const timestamp = Math.floor(Date.now() / 1000);
      const headers: Record<string, string> = {
        // Providers send JSON or a form (Twilio, Slack commands, Mollie classic); the bytes tell which.
        'content-type': isJsonBytes(body) ? 'application/json' : 'application/x-www-form-urlencoded',
        'user-agent': 'webhook-inbox',
        'idempotency-key': event.inboxId,
        'webhook-id': event.inboxId,
        'webhook-timestamp': String(timestamp),
        'webhook-signature': signStandard(key, event.inboxId, timestamp, body),
      };
      if (this.authorization !== undefined) headers.authorization = this.authorization;
      if (event.verification === 'fetch-required') headers['webhook-inbox-verification'] = 'fetch-required';
      const res = await this.pool.request({ path: this.path, method: 'POST', headers, body, signal: ac.signal });
      status = res.statusCode;
      retryAfter = res.headers['retry-after'];
      // Read (and discard) the answer so the socket goes back to the pool; never read into errors.
      await discard(res.body, DRAIN_LIMIT);
    } catch (err) {
      const timedOut = ac.signal.aborted || TIMEOUT_CODES.has((err as { code?: string }).code ?? '');
      // A non-2xx answer has failed however its body ended (unless it stalled): its status says why, below.
      if (timedOut || status === undefined || isSuccess(status)) throw (failure = this.failure(err, timedOut, status));
    } finally {
      clearTimeout(timer);
      this.slots.release(1);
      // Only a timeout held a place for nothing; a close (the gateway stopping) says nothing.
      if (failure?.reason === 'timeout') this.circuit?.timedOut(probe);
      else if (failure?.reason === 'destination_closed') this.circuit?.released(probe);
      else this.circuit?.responsive();
    }
    if (isSuccess(status)) return;
    const note = status >= 300 && status < 400 ? ' (redirects are not followed)' : '';
    const retryAfterMs = status === 429 || status === 503 ? retryAfterDelayMs(retryAfter, Date.now()) : undefined;
    // This request counts as an attempt (it was sent); the ones refused by the pause do not.
    if (retryAfterMs !== undefined) this.pause.askedToWait(retryAfterMs, status);
    const wait = retryAfterMs === undefined ? '' : ` (Retry-After: ${Math.round(retryAfterMs / 1000)} s)`;
    throw new RetryableError(`http_${status}`, `http destination "${this.id}" answered HTTP ${status}${note}${wait}`, { retryAfterMs });
  }

  /** Throws `destination_paused` while the destination asked to be left alone. */
  private paused(): void {
    const p = this.pause.left();
    if (p === undefined) return;
    throw new NotAttemptedError(FAILURE.destinationPaused, `http destination "${this.id}" is paused: it answered HTTP ${p.status} with Retry-After, so no request was sent (resumes in ${Math.ceil(p.ms / 1000)} s)`, { retryAfterMs: p.ms });
  }

  /** Whether this delivery may go (true: as the circuit's probe); throws `destination_down` if not. */
  private admit(): boolean {
    const a = this.circuit?.admit();
    if (a === undefined || a.go === 'yes') return false;
    if (a.go === 'probe') return true;
    throw new RetryableError(FAILURE.destinationDown, `http destination "${this.id}" is not answering: circuit open, no request sent (next probe in ${Math.ceil(a.waitMs / 1000)} s)`, { retryAfterMs: a.waitMs });
  }

  /** Why an exchange ended without a complete answer (`status`: the one it began with, if any). */
  private failure(err: unknown, timedOut: boolean, status: number | undefined): RetryableError {
    if (timedOut) return this.timeout(err, status);
    if (this.closed || err instanceof undiciErrors.ClientClosedError || err instanceof undiciErrors.ClientDestroyedError) {
      return closedError(this.type, this.id);
    }
    const cut = status === undefined ? '' : `answered HTTP ${status}, but the answer was cut short: `;
    return new RetryableError('connection', `http destination "${this.id}": ${cut}${describe(err)}`, { cause: err });
  }

  /**
   * A receiver whose own log shows an answer in milliseconds (a Content-Length larger than what it
   * wrote, a stream it never ended) must be told apart from one that never answered.
   */
  private timeout(err: unknown, status: number | undefined): RetryableError {
    const what = status === undefined
      ? `: no answer within ${this.timeoutMs} ms`
      : ` answered HTTP ${status}, but its answer did not end within ${this.timeoutMs} ms${isSuccess(status) ? ': not delivered' : ''}`;
    return new RetryableError('timeout', `http destination "${this.id}"${what}`, { cause: err });
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    // In-flight requests are bounded by timeoutMs; after that, cut what is left.
    const timer = setTimeout(() => void this.pool.destroy().catch(() => undefined), this.timeoutMs);
    try {
      await this.pool.close();
    } catch {
      // destroyed meanwhile
    } finally {
      clearTimeout(timer);
    }
  }
}

/**
 * A `Retry-After` value (RFC 9110 §10.2.3: delay-seconds or an HTTP-date) as ms from `nowMs`;
 * undefined when absent, repeated or malformed (the backoff alone then applies).
 */
export function retryAfterDelayMs(value: string | string[] | undefined, nowMs: number): number | undefined {
  if (typeof value !== 'string') return undefined;
  const v = value.trim();
  if (/^\d+$/.test(v)) return Number(v) * 1000;
  const at = /[a-z]/i.test(v) ? Date.parse(v) : NaN;
  return Number.isNaN(at) ? undefined : Math.max(0, at - nowMs);
}

/**
 * Reads and discards an answer body to its end, so its socket can be reused; past `limit` bytes
 * it stops and the body is destroyed (the socket is closed, not reused). Rejects if the body fails
 * before its end (reset, bad chunking, the request's abort signal): the answer is incomplete.
 * (undici's `dump` resolves in that case too, so a 2xx cut short looked delivered.)
 */
async function discard(body: Readable, limit: number): Promise<void> {
  let read = 0;
  for await (const chunk of body) {
    read += (chunk as Buffer).length;
    if (read > limit) return; // leaving the loop destroys the body
  }
}
