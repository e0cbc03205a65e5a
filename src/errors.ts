/**
 * Every answer the ingress gives to a bad or unservable request has a typed reason code.
 * The reason is returned to the sender (`{"error": reason}`), logged, and mapped to one
 * metrics outcome, so operators and providers see the same vocabulary.
 */

/** The outcomes counted by `webhook_requests_total{outcome}`. */
export type Outcome =
  | 'accepted'
  | 'duplicate'
  | 'invalid_signature'
  | 'stale'
  | 'oversized'
  | 'unsupported'
  | 'malformed'
  | 'rate_limited'
  | 'unavailable'
  | 'rejected'
  | 'handshake';

export const OUTCOMES: readonly Outcome[] = [
  'accepted', 'duplicate', 'invalid_signature', 'stale', 'oversized',
  'unsupported', 'malformed', 'rate_limited', 'unavailable', 'rejected', 'handshake',
];

interface ReasonSpec {
  readonly status: number;
  readonly outcome: Outcome;
  readonly retryAfter?: number;
  /** Headers every answer with this reason carries (what the status code's RFC asks for). */
  readonly headers?: Readonly<Record<string, string>>;
}

export const REASONS = {
  method_not_allowed: { status: 405, outcome: 'rejected', headers: { allow: 'POST' } },
  unknown_endpoint: { status: 404, outcome: 'rejected' },
  rate_limited: { status: 429, outcome: 'rate_limited', retryAfter: 1 },
  too_many_headers: { status: 431, outcome: 'malformed' },
  unsupported_media_type: { status: 415, outcome: 'malformed' },
  // RFC 9110 §15.5.16: name the codings that would have been accepted (none: the bytes as sent).
  unsupported_content_encoding: { status: 415, outcome: 'malformed', headers: { 'accept-encoding': 'identity' } },
  unsupported_transfer_encoding: { status: 501, outcome: 'malformed' },
  payload_too_large: { status: 413, outcome: 'oversized' },
  bad_content_length: { status: 400, outcome: 'malformed' },
  request_aborted: { status: 400, outcome: 'malformed' },
  expectation_failed: { status: 417, outcome: 'malformed' },
  body_too_slow: { status: 408, outcome: 'malformed' },
  request_timeout: { status: 408, outcome: 'malformed' },
  bad_request: { status: 400, outcome: 'malformed' },
  // RFC 9112 §3.2: an HTTP/1.1 request without exactly one Host, answered and then closed.
  bad_host: { status: 400, outcome: 'malformed' },
  // RFC 9110 §15.6.6: a request line naming another major version (HTTP/2.0 over HTTP/1 framing), answered and then closed.
  http_version_not_supported: { status: 505, outcome: 'malformed' },
  headers_too_large: { status: 431, outcome: 'malformed' },
  missing_signature: { status: 401, outcome: 'invalid_signature' },
  malformed_signature: { status: 401, outcome: 'invalid_signature' },
  ambiguous_signature: { status: 400, outcome: 'malformed' },
  ambiguous_header: { status: 400, outcome: 'malformed' },
  invalid_signature: { status: 401, outcome: 'invalid_signature' },
  stale_timestamp: { status: 401, outcome: 'stale' },
  malformed_payload: { status: 400, outcome: 'malformed' },
  missing_event_id: { status: 400, outcome: 'malformed' },
  missing_event_type: { status: 400, outcome: 'malformed' },
  invalid_event_id: { status: 400, outcome: 'malformed' },
  invalid_envelope: { status: 400, outcome: 'malformed' },
  secrets_unavailable: { status: 503, outcome: 'unavailable', retryAfter: 10 },
  verification_unavailable: { status: 503, outcome: 'unavailable', retryAfter: 30 },
  storage_unavailable: { status: 503, outcome: 'unavailable', retryAfter: 5 },
  overloaded: { status: 503, outcome: 'unavailable', retryAfter: 1 },
} as const satisfies Record<string, ReasonSpec>;

export type Reason = keyof typeof REASONS;

/** A rejection of one request. `detail` is a short, safe explanation (never secrets or body bytes). */
export class IngressError extends Error {
  readonly reason: Reason;
  readonly status: number;
  readonly outcome: Outcome;
  readonly retryAfter: number | undefined;
  readonly headers: Readonly<Record<string, string>> | undefined;
  constructor(reason: Reason, readonly detail?: string, retryAfterSeconds?: number) {
    super(detail ? `${reason}: ${detail}` : reason);
    const spec: ReasonSpec = REASONS[reason];
    this.reason = reason;
    this.status = spec.status;
    this.outcome = spec.outcome;
    this.retryAfter = retryAfterSeconds ?? spec.retryAfter;
    this.headers = spec.headers;
  }
}

/** A configuration problem; `path` names the offending key, e.g. `endpoints[0].secrets[1].value`. */
export class ConfigError extends Error {
  constructor(readonly path: string, message: string) {
    super(`${path}: ${message}`);
    this.name = 'ConfigError';
  }
}

/** Why a listen address cannot be taken, by the error's code: the operator's to fix, not a bug. */
const LISTEN_FAILURES: Readonly<Record<string, string>> = {
  EADDRINUSE: 'the address is already in use (another process listens there)',
  EACCES: 'permission denied (ports below 1024 need privileges)',
  EADDRNOTAVAIL: 'no interface of this machine has that address',
  // The host is a name that does not resolve (a typo), or the resolver cannot answer now.
  ENOTFOUND: 'the host name does not resolve to an address',
  EAI_AGAIN: 'the host name could not be resolved (DNS lookup failed; try again or use an IP address)',
};

/** The server could not take its listen address (in use, not ours, not here): one line, exit 1. */
export class ListenError extends Error {
  private constructor(host: string, port: number, why: string, cause: unknown, hint: string) {
    super(`cannot listen on ${host}:${port}: ${why}; ${hint}`, { cause });
    this.name = 'ListenError';
  }

  /** `err` as a ListenError when it is one of the LISTEN_FAILURES, else `err` itself. */
  static from(err: unknown, host: string, port: number, hint = 'change listen in the config or pass --host / --port'): unknown {
    const code = (err as NodeJS.ErrnoException | undefined)?.code;
    return code !== undefined && Object.hasOwn(LISTEN_FAILURES, code) ? new ListenError(host, port, LISTEN_FAILURES[code]!, err, hint) : err;
  }
}

/**
 * A migration the database refused (no privilege to create tables, a table of that name already
 * there): names the step that failed and the database's reason; one line, exit 1. What the
 * database applied of it: PostgreSQL runs every pending migration in one transaction (nothing);
 * SQLite one transaction each (the ones before it).
 */
export class MigrationError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'MigrationError';
  }
}

/**
 * A handler or effect executor that cannot work as registered (a pattern or option that matches
 * nothing, a name taken, a registration after start): thrown by `on()` / `effect()` or at start.
 */
export class HandlerError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'HandlerError';
  }
}

/** The database's schema is older than this build needs (or was never migrated): run `migrate`. */
export class SchemaOutdatedError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'SchemaOutdatedError';
  }
}

/** The store could not durably commit (or cannot say whether it did). Always answered with 503. */
export class StorageUnavailableError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'StorageUnavailableError';
  }
}
