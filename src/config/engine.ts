import { ConfigError } from '../errors.js';
import { CIRCUIT_DEFAULTS, type CircuitOptions } from '../destinations/circuit.js';
import type { DestinationType } from '../destinations/contract.js';
import { natsConfigProblem, rabbitMqConfigProblem } from '../destinations/broker-config.js';
import { isUnmatchableGlob } from '../http/event-filter.js';
import { asArray, asObject, child, optBool, optInt, optString, optStringArray, reqString, type Obj } from './read.js';
import { parseSecretRef, resolveSecret, SecretUnavailableError, type SecretRef } from './secrets.js';

/** Destinations are an explicit allowlist: nothing else is ever called or published to. */
export type DestinationConfig =
  | {
    readonly id: string; readonly type: 'http'; readonly url: string; readonly secret: SecretRef; readonly timeoutMs: number; readonly maxConnections: number;
    /** null = off (`circuitBreaker: false`): every delivery waits out its own timeout. */
    readonly circuitBreaker: CircuitOptions | null;
  }
  | { readonly id: string; readonly type: 'nats'; readonly url: string; readonly subject: string; readonly stream: string | undefined; readonly timeoutMs: number }
  | { readonly id: string; readonly type: 'rabbitmq'; readonly url: string; readonly exchange: string; readonly routingKey: string; readonly queue: string | undefined; readonly timeoutMs: number };

export interface RetryPolicy {
  readonly baseMs: number;
  readonly capMs: number;
  readonly maxAttempts: number;
}

export interface RouteConfig {
  readonly events: readonly string[];
  readonly destination: string;
  readonly retry: RetryPolicy | undefined;
}

export interface WorkersConfig {
  /** Run workers inside `serve` (default true); `webhook-inbox work` runs them alone. */
  readonly enabled: boolean;
  /**
   * Events one process holds at once (per loop: inbox, effects, relay). Twice `batchSize` by
   * default, so a backlog drains with one batch claimed while another settles.
   */
  readonly concurrency: number;
  /** Rows claimed per round trip; each inbox batch settles in one transaction. */
  readonly batchSize: number;
  /**
   * Effects executing at once in one process: executors call other services (mail, payments),
   * which should not see the inbox's batch sizes. At most `concurrency`.
   */
  readonly effectsConcurrency: number;
  /**
   * Stored event body bytes the inbox worker holds at once across its batches (counted twice:
   * ciphertext and plaintext). A batch reads its bodies a quarter of this at a time and settles
   * each part before reading on; past the budget, batches wait for it. (Bodies `serve` hands
   * its workers from memory are bounded apart, 8 MiB.)
   */
  readonly maxInFlightBodyBytes: number;
  readonly leaseMs: number;
  /** Backstop poll when no wake-up arrives. */
  readonly pollMs: number;
  /**
   * After a claim that took everything due, the next claim waits at least this long, so arrivals
   * gather into fewer, larger batches (fewer claims and settle transactions per event) at the
   * cost of up to this much accept → PROCESSED latency. 0: claim as soon as a batch finishes.
   */
  readonly gatherMs: number;
  /**
   * Whether the engine's own commits (claims, settles, handler transactions, relay marks) wait
   * for the disk like accepts do. false: they are durable across a process crash but a power loss
   * or OS crash (PostgreSQL: also a server crash) can undo the last moments of processing, which
   * is then redone — an accepted event is never lost (accepts always wait), the business
   * mutation and its processed marker are undone or kept together, and what was redone carries
   * the same idempotency keys. Frees the disk (and, on SQLite, the one writer) for accepts.
   */
  readonly durableCommits: boolean;
}

export const DEFAULT_RETRY: RetryPolicy = { baseMs: 1000, capMs: 3_600_000, maxAttempts: 12 };
const ID_RE = /^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$/;
const TYPES: readonly DestinationType[] = ['http', 'nats', 'rabbitmq'];
const TEMPLATE_RE = /^[^{}]*(\{(provider|type|endpoint)\}[^{}]*)*$/;

function template(o: Obj, key: string, path: string, fallback?: string): string {
  const v = fallback === undefined ? reqString(o, key, path) : (optString(o, key, path) ?? fallback);
  if (!TEMPLATE_RE.test(v)) throw new ConfigError(child(path, key), 'placeholders are {provider}, {type} and {endpoint}');
  return v;
}

/**
 * A destination's URL: inline, or `${env:NAME}` / `${file:PATH}`, read once here, since it may
 * carry credentials (amqp://user:password@…, a broker token, Basic auth for a forward). Errors
 * name the path, never the value.
 */
function url(o: Obj, path: string, protocols: readonly string[], env: NodeJS.ProcessEnv): string {
  const p = child(path, 'url');
  let v: string;
  try {
    if (o.url === undefined) throw new ConfigError(p, 'is required and must be a non-empty string');
    v = resolveSecret(parseSecretRef(o.url, p), env);
  } catch (err) {
    if (err instanceof SecretUnavailableError) throw new ConfigError(p, err.detail);
    throw err;
  }
  let u: URL;
  try {
    u = new URL(v);
  } catch {
    throw new ConfigError(p, 'is not a valid URL');
  }
  if (!protocols.includes(u.protocol)) throw new ConfigError(p, `must use ${protocols.join(' or ')}`);
  return v;
}

/**
 * An HTTP forward's URL. Its user and password are sent as Basic auth, percent-decoded
 * (destinations/http.ts): a stray "%" could not be, and the destination would only fail at
 * start with "URI malformed", its events waiting.
 */
function forwardUrl(o: Obj, path: string, env: NodeJS.ProcessEnv): string {
  const v = url(o, path, ['http:', 'https:'], env);
  const u = new URL(v);
  try {
    decodeURIComponent(u.username);
    decodeURIComponent(u.password);
  } catch {
    throw new ConfigError(child(path, 'url'), 'its user or password has a "%" not followed by two hex digits (write a literal "%" as %25)');
  }
  return v;
}

function parseDestination(raw: unknown, path: string, env: NodeJS.ProcessEnv): DestinationConfig {
  const base = asObject(raw, path, ['id', 'type', 'url', 'secret', 'timeoutMs', 'maxConnections', 'circuitBreaker', 'subject', 'stream', 'exchange', 'routingKey', 'queue']);
  const id = reqString(base, 'id', path);
  if (!ID_RE.test(id)) throw new ConfigError(child(path, 'id'), 'must be 1-64 characters of A-Z a-z 0-9 _ . -');
  const type = reqString(base, 'type', path);
  if (!(TYPES as readonly string[]).includes(type)) throw new ConfigError(child(path, 'type'), `must be one of: ${TYPES.join(', ')}`);
  const allowed: Record<DestinationType, string[]> = {
    http: ['id', 'type', 'url', 'secret', 'timeoutMs', 'maxConnections', 'circuitBreaker'],
    nats: ['id', 'type', 'url', 'subject', 'stream', 'timeoutMs'],
    rabbitmq: ['id', 'type', 'url', 'exchange', 'routingKey', 'queue', 'timeoutMs'],
  };
  const o = asObject(raw, path, allowed[type as DestinationType]);
  const timeoutMs = optInt(o, 'timeoutMs', path, 1, 600_000) ?? (type === 'http' ? 10_000 : 5_000);
  switch (type as DestinationType) {
    case 'http':
      return {
        id, type: 'http', url: forwardUrl(o, path, env), secret: parseSecretRef(o.secret, child(path, 'secret')), timeoutMs,
        // Requests one process has open to the user's service: a drained backlog must not arrive as hundreds at once.
        maxConnections: optInt(o, 'maxConnections', path, 1, 1024) ?? 32,
        circuitBreaker: circuitBreaker(o.circuitBreaker, child(path, 'circuitBreaker')),
      };
    case 'nats': {
      const subject = template(o, 'subject', path, 'webhooks.{provider}.{type}');
      const stream = optString(o, 'stream', path);
      const problem = natsConfigProblem(subject, stream);
      if (problem) throw new ConfigError(child(path, problem.key), problem.message);
      return { id, type: 'nats', url: url(o, path, ['nats:', 'tls:'], env), subject, stream, timeoutMs };
    }
    case 'rabbitmq': {
      // "" is the default exchange (the README's example writes it out).
      const exchange = o.exchange === '' ? '' : optString(o, 'exchange', path) ?? '';
      const routingKey = template(o, 'routingKey', path, 'webhooks.{provider}.{type}');
      const queue = optString(o, 'queue', path);
      const problem = rabbitMqConfigProblem(exchange, routingKey, queue);
      if (problem) throw new ConfigError(child(path, problem.key), problem.message);
      return { id, type: 'rabbitmq', url: url(o, path, ['amqp:', 'amqps:'], env), exchange, routingKey, queue, timeoutMs };
    }
  }
}

/** `false` = off; absent = the defaults; an object overrides them. */
function circuitBreaker(v: unknown, path: string): CircuitOptions | null {
  if (v === false) return null;
  if (v !== undefined && v !== true && (v === null || typeof v !== 'object' || Array.isArray(v))) {
    throw new ConfigError(path, 'must be false (off), true (the defaults) or an object with failures, cooldownMs');
  }
  const o = asObject(typeof v === 'object' ? v : {}, path, ['failures', 'cooldownMs']);
  return {
    failures: optInt(o, 'failures', path, 1, 1000) ?? CIRCUIT_DEFAULTS.failures,
    cooldownMs: optInt(o, 'cooldownMs', path, 100, 3_600_000) ?? CIRCUIT_DEFAULTS.cooldownMs,
  };
}

export function parseDestinations(v: unknown, env: NodeJS.ProcessEnv): DestinationConfig[] {
  if (v === undefined) return [];
  const seen = new Set<string>();
  return asArray(v, 'destinations').map((d, i) => {
    const p = child('destinations', i);
    const dest = parseDestination(d, p, env);
    if (seen.has(dest.id)) throw new ConfigError(child(p, 'id'), `duplicate destination id "${dest.id}"`);
    seen.add(dest.id);
    return dest;
  });
}

/**
 * A `retry` block. It overrides only the fields it names: the others come from `around`, the
 * policy it overrides (a route's: its endpoint's; an endpoint's: the top-level `retry`, whose own
 * are the built-in defaults), named by `aroundPath` in errors.
 */
export function parseRetry(v: unknown, path: string, around: RetryPolicy = DEFAULT_RETRY, aroundPath = 'the default'): RetryPolicy | undefined {
  if (v === undefined) return undefined;
  const o = asObject(v, path, ['baseMs', 'capMs', 'maxAttempts']);
  const baseMs = optInt(o, 'baseMs', path, 1, 86_400_000) ?? around.baseMs;
  const capMs = optInt(o, 'capMs', path, 1, 7 * 86_400_000) ?? around.capMs;
  if (capMs < baseMs) {
    if (o.capMs === undefined) throw new ConfigError(child(path, 'baseMs'), `must be ≤ capMs (${capMs}, from ${aroundPath})`);
    throw new ConfigError(child(path, 'capMs'), `must be ≥ baseMs (${baseMs}${o.baseMs === undefined ? `, from ${aroundPath}` : ''})`);
  }
  return { baseMs, capMs, maxAttempts: optInt(o, 'maxAttempts', path, 1, 1000) ?? around.maxAttempts };
}

/**
 * An `events` list of type globs. A glob with surrounding whitespace or a control character (a
 * quoting slip) matches no provider's event type, so every event would be ignored or never routed.
 */
export function eventGlobs(o: Obj, path: string): string[] | undefined {
  const events = optStringArray(o, 'events', path);
  events?.forEach((g, i) => {
    if (isUnmatchableGlob(g)) throw new ConfigError(child(child(path, 'events'), i), 'has surrounding whitespace or a control character, so it would match no event type');
    // Matched literally (http/event-filter.ts), and no built-in provider's event type holds one of them.
    if (/[?[\]{}\\]/.test(g)) {
      throw new ConfigError(child(child(path, 'events'), i), 'only "*" is a wildcard (any characters): "?", "[…]", "{a,b}" and "\\" would be matched as themselves, so it would match no event type; list each type, or use "*"');
    }
  });
  return events;
}

export function parseRoutes(v: unknown, path: string, destinations: readonly DestinationConfig[], endpointRetry: RetryPolicy = DEFAULT_RETRY, endpointRetryPath?: string): RouteConfig[] {
  if (v === undefined) return [];
  return asArray(v, path).map((r, i) => {
    const p = child(path, i);
    const o = asObject(r, p, ['events', 'destination', 'retry']);
    const destination = reqString(o, 'destination', p);
    if (!destinations.some((d) => d.id === destination)) {
      throw new ConfigError(child(p, 'destination'), `"${destination}" is not one of destinations[].id`);
    }
    const events = eventGlobs(o, p) ?? ['*'];
    if (events.length === 0) throw new ConfigError(child(p, 'events'), 'is empty, so the route would never receive an event; omit it to route every type');
    return { events, destination, retry: parseRetry(o.retry, child(p, 'retry'), endpointRetry, endpointRetryPath) };
  });
}

export function parseWorkers(v: unknown): WorkersConfig {
  const p = 'workers';
  const o = asObject(v ?? {}, p, ['enabled', 'concurrency', 'batchSize', 'effectsConcurrency', 'maxInFlightBodyBytes', 'leaseMs', 'pollMs', 'gatherMs', 'durableCommits']);
  const concurrency = optInt(o, 'concurrency', p, 1, 1024) ?? 512;
  const effectsConcurrency = optInt(o, 'effectsConcurrency', p, 1, 1024) ?? Math.min(128, concurrency);
  if (effectsConcurrency > concurrency) throw new ConfigError(child(p, 'effectsConcurrency'), `must be ≤ concurrency (${concurrency})`);
  return {
    enabled: optBool(o, 'enabled', p) ?? true,
    // Two batches of 256 in flight. bench/RESULTS.md: on a CPU-starved box (2026-11-30) SQLite
    // e2e p99 in `serve` was 3.9–4.5 s at 128 / 64 and 275–300 ms at 512 / 256; on a quiet one
    // both meet 1 s and 512 / 256 drains 9–30 % faster. Body bytes held are bounded apart
    // (maxInFlightBodyBytes), HTTP forwards by each destination's maxConnections.
    concurrency,
    batchSize: optInt(o, 'batchSize', p, 1, 1000) ?? 256,
    // 128: what effects had in flight before `concurrency` went to 512 for the inbox loop's sake.
    effectsConcurrency,
    maxInFlightBodyBytes: optInt(o, 'maxInFlightBodyBytes', p, 64 * 1024, 16 * 1024 ** 3) ?? 64 * 1024 * 1024,
    leaseMs: optInt(o, 'leaseMs', p, 1000, 3_600_000) ?? 30_000,
    pollMs: optInt(o, 'pollMs', p, 10, 600_000) ?? 1000,
    gatherMs: optInt(o, 'gatherMs', p, 0, 10_000) ?? 30,
    // false by default: bench/RESULTS.md (2026-11-30) — SQLite accept p99 with workers 317 → 66 ms.
    durableCommits: optBool(o, 'durableCommits', p) ?? false,
  };
}
