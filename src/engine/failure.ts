import { SECRET_RETRY_MS } from '../config/secrets.js';

/**
 * Failure classes of a processing attempt. Technical trouble (timeouts, 5xx, connection loss,
 * deadlocks) is worth retrying; a "needs decision" failure (unknown object, amount mismatch,
 * unsupported type, schema error) will fail the same way every time, so it goes to FAILED at
 * once with its reason instead of burning the retry budget.
 */
export class RetryableError extends Error {
  override readonly name = 'RetryableError';
  /** Not before this long (a destination's `Retry-After`); the retry policy's cap still bounds it. */
  readonly retryAfterMs: number | undefined;
  constructor(readonly reason: string, message: string, options?: ErrorOptions & { retryAfterMs?: number }) {
    super(message, options);
    this.retryAfterMs = options?.retryAfterMs;
  }
}

/**
 * Nothing was attempted: the work was refused before it began, by this gateway, for a cause that
 * is not the event's. Its attempt is given back (the row's attempt_count is not raised by it) and
 * it is tried again after `retryAfterMs` (within retry.capMs), so it never counts toward
 * maxAttempts. The engine's own, never exported: handlers and executors throw RetryableError,
 * which counts, as a failure that did something must (else it could retry for ever).
 */
export class NotAttemptedError extends RetryableError {
  constructor(reason: string, message: string, options: { retryAfterMs: number }) {
    super(reason, message, options);
  }
}

/**
 * A failure of this gateway's own setup (a payload key or a destination secret not loaded), not
 * of the event nor of its destination: the event waits for the operator without spending its
 * attempts, tried again as the secrets are re-read. It must not end FAILED for a key that a fixed
 * mount brings back.
 */
export class SetupUnavailableError extends NotAttemptedError {
  constructor(reason: string, message: string) {
    super(reason, message, { retryAfterMs: SECRET_RETRY_MS });
  }
}

/**
 * What a payload key that cannot open something (`subject`: '' for a body) throws. One the config
 * names but that is not loaded (a late mount): a setup failure, waited for without spending
 * attempts. One the config does not name at all is the config's choice, not a passing state: it
 * counts, and the row is requeued once the key is back in payloadKeys.keys.
 */
export function payloadKeyUnavailable(keyId: string, configured: boolean, subject = ''): RetryableError {
  return configured
    ? new SetupUnavailableError('payload_key_unavailable', `${subject}payload key "${keyId}" is configured but not loaded`)
    : new RetryableError('payload_key_unavailable', `${subject}payload key "${keyId}" is not configured (payloadKeys.keys)`);
}

export class NeedsDecisionError extends Error {
  override readonly name = 'NeedsDecisionError';
  constructor(readonly reason: string, message: string, options?: ErrorOptions) {
    super(message, options);
  }
}

/** Failure reasons the engine itself assigns. */
export const FAILURE = {
  retriesExhausted: 'retries_exhausted',
  /**
   * The attempts ran out on an attempt that never finished: its worker crashed, hung past its
   * lease or lost it. Often the event itself takes the worker down (a handler that exhausts
   * memory), so it is kept apart from retries_exhausted: a bulk `requeue --reason technical`
   * must not send a crasher back among the others.
   */
  attemptsAbandoned: 'attempts_abandoned',
  unsupportedType: 'unsupported_type',
  schemaError: 'schema_error',
  payloadUnavailable: 'payload_unavailable',
  unsupportedEffect: 'unsupported_effect',
  /** A stored body that failed authentication with its key's value (inbox-worker.ts). */
  payloadCorrupt: 'payload_corrupt',
  /** An HTTP destination's circuit is open (destinations/circuit.ts): the delivery was not sent. */
  destinationDown: 'destination_down',
  /**
   * An HTTP destination asked to be left alone (a 429 or 503 with Retry-After; destinations/pause.ts):
   * the delivery was not sent, and its attempt is given back (NotAttemptedError).
   */
  destinationPaused: 'destination_paused',
} as const;

/** Reasons `requeue --reason technical` may send back: the ones a later attempt can fix. */
export const TECHNICAL_REASONS: readonly string[] = [FAILURE.retriesExhausted];

/** The message of an attempts_abandoned failure. */
export function abandonedMessage(attempt: number, maxAttempts: number): string {
  return `attempt ${attempt} exceeds maxAttempts ${maxAttempts}: the last attempt never finished (its worker crashed, hung past its lease or lost it)`;
}

export interface Classified {
  readonly retryable: boolean;
  readonly reason: string;
  /**
   * The failure asked for at least this long before the next attempt (RetryableError.retryAfterMs),
   * in whole ms, rounded up: it becomes a next_attempt_at, which SQLite keeps in a STRICT INTEGER
   * column and refuses as a REAL (a handler may ask for 1500.5), failing the settle. NaN: none.
   */
  readonly retryAfterMs?: number;
  /** One line, bounded, for `last_error`. */
  readonly message: string;
}

const MAX_ERROR_CHARS = 500;

/**
 * `last_error` is a diagnostic for operators, never a data dump: one line, bounded, and it
 * never includes the body (the engine never puts one in an error). Untyped errors count as
 * technical — an unexpected exception is more often a bug or an outage than a decision.
 */
export function classify(err: unknown): Classified {
  const message = redact(err);
  if (err instanceof NeedsDecisionError) return { retryable: false, reason: reasonOr(err.reason, 'needs_decision'), message };
  if (err instanceof RetryableError) return { retryable: true, reason: reasonOr(err.reason, 'error'), message, retryAfterMs: wholeMs(err.retryAfterMs) };
  return { retryable: true, reason: 'error', message };
}

/**
 * A thrower's reason, or `fallback` where it gave none (`new NeedsDecisionError(res.error?.code, …)`
 * with no code): a FAILED row with failure_reason NULL broke `effects failed` and was skipped by
 * the operator's requeues, which walk the rows by reason.
 */
function reasonOr(reason: unknown, fallback: string): string {
  return typeof reason === 'string' && reason !== '' ? reason : fallback;
}

function wholeMs(ms: number | undefined): number | undefined {
  return ms === undefined || Number.isNaN(ms) ? undefined : Math.ceil(ms);
}

export function redact(err: unknown): string {
  const e = err as { name?: unknown; message?: unknown; code?: unknown; reason?: unknown };
  const name = typeof e?.name === 'string' ? e.name : 'Error';
  const tag = typeof e?.code === 'string' ? e.code : typeof e?.reason === 'string' ? e.reason : undefined;
  const code = tag ? ` [${tag}]` : '';
  const msg = withoutEchoedData(typeof e?.message === 'string' ? e.message : printable(err), tag);
  const line = `${name}${code}: ${msg}`.replace(/\s+/g, ' ');
  return line.length > MAX_ERROR_CHARS ? `${line.slice(0, MAX_ERROR_CHARS - 1)}…` : line;
}

/**
 * An error as the engine's log lines carry it: the class, the code, a one-line message redacted
 * as for `last_error` and our stack frames, nothing else. A logger's own serializer (pino's)
 * prints every field of the error, and a driver's error holds row data: PostgreSQL's `detail`
 * (`Key (email)=(alice@example.com) already exists.`, `Failing row contains (…)`), `where`
 * (`JSON data, line 1: …`). A constraint a handler's writes break only at COMMIT (a deferred
 * one) fails the settle transaction, which is logged, not classified, so its body data went to
 * the log on every attempt. The cause is kept, redacted the same way.
 */
export function loggable(err: unknown, depth = 0): unknown {
  if (!(err instanceof Error)) return typeof err === 'string' ? err : redact(err);
  const line = redact(err);
  const e = err as Error & { code?: unknown };
  const head = `${e.name}: ${e.message}`;
  const stack = typeof e.stack === 'string' && e.stack.startsWith(head) ? line + e.stack.slice(head.length) : line;
  const safe = new Error(line, depth < 4 && e.cause !== undefined ? { cause: loggable(e.cause, depth + 1) } : undefined);
  safe.stack = stack;
  if (typeof e.code === 'string') Object.assign(safe, { code: e.code });
  return safe;
}

/**
 * Two kinds of error quote the data they refused, which in a handler is usually a body field
 * (a card number, an e-mail): PostgreSQL's data exceptions (SQLSTATE class 22:
 * `invalid input syntax for type integer: "…"`, `value "…" is out of range`, `invalid byte
 * sequence for encoding "UTF8": 0x…`), and V8's JSON.parse (`Unexpected token 'T', "The card…"
 * is not valid JSON`). The quoted part goes; the kind of error, the type and the position stay.
 * Everything between the first and last quote, as PostgreSQL does not escape quotes inside a value.
 */
function withoutEchoedData(msg: string, code: string | undefined): string {
  let m = msg;
  if (code !== undefined && /^22[0-9A-Z]{3}$/.test(code)) m = m.replace(/"[\s\S]*"/, '"…"').replace(/0x[0-9a-f]{2}(?: 0x[0-9a-f]{2})*/gi, '0x…');
  // V8 cuts a long one short with "..." on either side: `"CARD 4242 "... is not valid JSON`.
  return m.replace(/(?:\.\.\.)?"[\s\S]*"(?:\.\.\.)? is not valid JSON/, '"…" is not valid JSON');
}

/** String(v), or a placeholder for a thrown value that has no string form (a null-prototype object). */
function printable(v: unknown): string {
  try {
    return String(v);
  } catch {
    return '(a thrown value with no string form)';
  }
}
