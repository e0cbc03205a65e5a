import { isIP } from 'node:net';
import { ConfigError } from '../errors.js';
import { IN_MEMORY_COPIES } from '../http/body.js';
import type { ProviderAdapter } from '../providers/contract.js';
import { PROVIDERS } from '../providers/registry.js';
import { parseSqliteUrl } from '../store/sqlite/url.js';
import { asArray, asObject, child, optInt, optNumber, optEnum, optString, reqString, type Obj } from './read.js';
import { parseSecretRef, type SecretRef } from './secrets.js';
import { DEFAULT_RETRY, eventGlobs, parseDestinations, parseRetry, parseRoutes, parseWorkers, type DestinationConfig, type RetryPolicy, type RouteConfig, type WorkersConfig } from './engine.js';

export interface SecretVersionConfig {
  readonly version: string;
  readonly ref: SecretRef;
  readonly retireAtMs: number | undefined;
}

export interface EndpointConfig {
  readonly id: string;
  readonly provider: string;
  readonly adapter: ProviderAdapter;
  /** The adapter's `options` as configured: a thread that parses for this endpoint builds the same adapter from them. */
  readonly adapterOptions?: Record<string, unknown>;
  readonly secrets: readonly SecretVersionConfig[];
  /** Allowed event-type globs; undefined = all. */
  readonly events: readonly string[] | undefined;
  /** Freshness window in seconds (both directions); null when the provider signs no timestamp. */
  readonly toleranceSeconds: number | null;
  readonly maxBodyBytes: number;
  readonly rateLimit: { readonly perSecond: number; readonly burst: number } | undefined;
  /** Where processed events go; every matching route receives the event (fan-out). */
  readonly routes: readonly RouteConfig[];
  /** The endpoint's retry policy (a route's own `retry` overrides it for that route's failures). */
  readonly retry: RetryPolicy;
}

export interface Config {
  readonly listen: { readonly host: string; readonly port: number };
  readonly database: string;
  readonly payloadKeys: { readonly current: string; readonly keys: ReadonlyMap<string, SecretRef> };
  readonly limits: {
    readonly maxHeaders: number;
    readonly maxHeaderBytes: number;
    readonly headersTimeoutMs: number;
    readonly requestTimeoutMs: number;
    readonly keepAliveTimeoutMs: number;
    /** Body bytes held in memory across all in-flight requests; past it → 503 overloaded. */
    readonly maxInFlightBodyBytes: number;
    /**
     * After a body's first second, the pace it must keep (bytes/s) or be cut off with 408
     * body_too_slow, freeing its share of maxInFlightBodyBytes; 0 = no pace rule.
     */
    readonly minBodyBytesPerSecond: number;
    /**
     * Verified bodies of at least this many bytes are parsed and sealed on a helper thread, so a
     * 1 MiB JSON.parse does not stall every other request on the event loop; 0 = never;
     * undefined = the default for the process (http/offload.ts offloadThreshold).
     */
    readonly offloadBodyBytes: number | undefined;
    /**
     * With the helper thread on (offloadBodyBytes): once this many webhook requests have been in
     * progress for BUSY_HOLD_MS (250), every verified body is parsed and sealed there, not only a
     * large one, so a saturated event loop keeps only HTTP and verification; 0 = never; undefined
     * = the store's default (PostgreSQL 16, SQLite 0: http/offload.ts offloadWhenInFlight).
     */
    readonly offloadWhenInFlight: number | undefined;
    /**
     * Verified bodies of at least this many bytes are stored brotli-compressed (then sealed), if
     * that makes them smaller; 0 = never. Opening a payload always gives back the exact raw bytes.
     */
    readonly compressBodyBytes: number;
  };
  /**
   * maxInFlight: batches committing at once; undefined = the store's default (SQLite 1, its one
   * writer; PostgreSQL 4, the accept pool's size; each store's groupCommitDefaults says why).
   * maxWaitMs: linger before a small batch; undefined = the store's default (SQLite 1, PostgreSQL 0).
   * maxBatchBytes: stored payload bytes per transaction. 10 KiB events never reach it; 1 MiB ones
   * commit a few at a time, where one statement of tens of MiB held several copies of itself in
   * the pg driver's buffers and committed slower (bench/RESULTS.md, 1 MiB flood, 2026-12-01).
   */
  readonly groupCommit: { readonly maxBatch: number; readonly maxBatchBytes: number; readonly maxWaitMs: number | undefined; readonly maxInFlight: number | undefined; readonly commitTimeoutMs: number };
  readonly log: { readonly level: 'debug' | 'info' | 'warn' | 'error' | 'silent' };
  readonly endpoints: readonly EndpointConfig[];
  readonly destinations: readonly DestinationConfig[];
  readonly workers: WorkersConfig;
  /** Default retry policy (endpoints and effects); endpoints and routes may override it. */
  readonly retry: RetryPolicy;
  /**
   * processedPayloadDays: the raw payload of a PROCESSED event is deleted once it was received this
   * many days ago (`serve` prunes hourly; the inbox row stays, so a late retry is still a
   * duplicate); failedPayloadDays: the same for a FAILED event (which then can no longer be
   * retried); undefined = those payloads are kept.
   */
  readonly retention: { readonly processedPayloadDays: number | undefined; readonly failedPayloadDays: number | undefined };
}

export const DEFAULT_MAX_BODY_BYTES = 1024 * 1024;
const ID_RE = /^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$/;

const INSTANT_RE = /^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(\.\d{1,9})?(Z|[+-]\d{2}:\d{2})$/i;

/**
 * An exact instant, or null: RFC 3339 with its offset (a local time would depend on the server's
 * zone), and fields that exist (Date.parse rolls 2026-02-30 over to March 2, and takes "1" or
 * "Dec 31 2026").
 */
function parseInstant(s: string): number | null {
  const m = INSTANT_RE.exec(s);
  if (!m) return null;
  const [y, mo, d, h, mi, sec] = m.slice(1, 7).map(Number) as [number, number, number, number, number, number];
  const day = new Date(Date.UTC(y, mo - 1, d));
  if (day.getUTCMonth() !== mo - 1 || day.getUTCDate() !== d || h > 23 || mi > 59 || sec > 59) return null;
  const ms = Date.parse(s);
  return Number.isNaN(ms) ? null : ms;
}
const TOP_KEYS = ['listen', 'database', 'payloadKeys', 'endpoints', 'limits', 'groupCommit', 'log', 'destinations', 'workers', 'retry', 'retention'] as const;
const ENDPOINT_KEYS = ['id', 'provider', 'secrets', 'events', 'toleranceSeconds', 'maxBodyBytes', 'rateLimit', 'options', 'routes', 'retry'] as const;

function parseEndpoint(raw: unknown, path: string, destinations: readonly DestinationConfig[], defaultRetry: RetryPolicy, env: NodeJS.ProcessEnv): EndpointConfig {
  const o = asObject(raw, path, ENDPOINT_KEYS);
  const id = reqString(o, 'id', path);
  if (!ID_RE.test(id)) throw new ConfigError(child(path, 'id'), 'must be 1-64 characters of A-Z a-z 0-9 _ . - (it becomes the URL path)');
  const provider = reqString(o, 'provider', path);
  const factory = Object.hasOwn(PROVIDERS, provider) ? PROVIDERS[provider] : undefined;
  if (!factory) throw new ConfigError(child(path, 'provider'), `unknown provider "${provider}" (known: ${Object.keys(PROVIDERS).join(', ')})`);
  // Checked as an object before its keys are read: `options:` left empty in YAML is null.
  const options = o.options === undefined ? undefined : asObject(o.options, child(path, 'options'), o.options !== null && typeof o.options === 'object' ? Object.keys(o.options) : []);
  const adapter = factory(options, child(path, 'options'), env);

  const secretsPath = child(path, 'secrets');
  if (adapter.unsigned && o.secrets !== undefined) throw new ConfigError(secretsPath, `provider "${provider}" as configured sends unsigned requests: there is nothing to verify with a secret`);
  const secretList = adapter.unsigned ? [] : asArray(o.secrets, secretsPath);
  if (secretList.length === 0 && !adapter.unsigned) throw new ConfigError(secretsPath, 'needs at least one secret version');
  const versions = new Set<string>();
  const secrets = secretList.map((s, i) => {
    const p = child(secretsPath, i);
    const so = asObject(s, p, ['version', 'value', 'retireAt']);
    const version = reqString(so, 'version', p);
    if (versions.has(version)) throw new ConfigError(child(p, 'version'), `duplicate version "${version}"`);
    versions.add(version);
    const retireAt = optString(so, 'retireAt', p);
    const retireAtMs = retireAt === undefined ? undefined : parseInstant(retireAt);
    if (retireAtMs === null) throw new ConfigError(child(p, 'retireAt'), 'must be an RFC 3339 date-time with Z or an offset, e.g. 2026-12-31T00:00:00Z');
    return { version, ref: parseSecretRef(so.value, child(p, 'value')), retireAtMs };
  });

  const events = eventGlobs(o, path);
  if (events !== undefined && events.length === 0) throw new ConfigError(child(path, 'events'), 'is empty, so every event would be ignored; omit it to accept every type');
  let toleranceSeconds = adapter.defaultToleranceSeconds;
  const tol = optInt(o, 'toleranceSeconds', path, 1, maxToleranceSeconds(adapter));
  if (tol !== undefined) {
    if (toleranceSeconds === null) throw new ConfigError(child(path, 'toleranceSeconds'), `provider "${provider}" signs no timestamp, so there is nothing to check`);
    // An adapter option of the same name (generic-hmac) would be silently overridden: one place only.
    if (o.options !== null && typeof o.options === 'object' && 'toleranceSeconds' in o.options) {
      throw new ConfigError(child(path, 'toleranceSeconds'), 'also set as options.toleranceSeconds: set it in one place');
    }
    toleranceSeconds = tol;
  }
  const maxBodyBytes = optInt(o, 'maxBodyBytes', path, 1, 64 * 1024 * 1024) ?? adapter.defaultMaxBodyBytes ?? DEFAULT_MAX_BODY_BYTES;
  let rateLimit: EndpointConfig['rateLimit'] = adapter.defaultRateLimit;
  if (o.rateLimit !== undefined) {
    const rp = child(path, 'rateLimit');
    const r = asObject(o.rateLimit, rp, ['perSecond', 'burst']);
    const perSecond = optNumber(r, 'perSecond', rp, 0.001, 1e7);
    if (perSecond === undefined) throw new ConfigError(child(rp, 'perSecond'), 'is required');
    rateLimit = { perSecond, burst: optInt(r, 'burst', rp, 1, 1e8) ?? Math.max(1, Math.ceil(perSecond)) };
  }
  // Each overrides only the fields it names (parseRetry): the endpoint's the top-level retry, a route's the endpoint's.
  const defaultRetryPath = defaultRetry === DEFAULT_RETRY ? 'the default' : 'retry';
  const retry = parseRetry(o.retry, child(path, 'retry'), defaultRetry, defaultRetryPath) ?? defaultRetry;
  const routes = parseRoutes(o.routes, child(path, 'routes'), destinations, retry, o.retry === undefined ? defaultRetryPath : child(path, 'retry'));
  return { id, provider, adapter, adapterOptions: options, secrets, events, toleranceSeconds, maxBodyBytes, rateLimit, routes, retry };
}

/** 256 KiB: only the rare large body (most provider events are a few KiB) pays the ~0.7 ms per 256 KiB of compressing. */
const DEFAULT_COMPRESS_BODY_BYTES = 256 * 1024;

/**
 * The widest freshness window an endpoint of this adapter may configure: a day, or the adapter's
 * own default where that is longer (PayPal's retries keep their first signed time for 3 days), so
 * the default can also be written out. A build constant, the same whatever a config says
 * (http/transmission-pruner.ts relies on that).
 */
export function maxToleranceSeconds(adapter: Pick<ProviderAdapter, 'defaultToleranceSeconds'>): number {
  return Math.max(86_400, adapter.defaultToleranceSeconds ?? 0);
}

/** Validates a parsed config document. `env` supplies DATABASE_URL (which overrides `database`). */
export function parseConfig(doc: unknown, env: NodeJS.ProcessEnv = process.env): Config {
  const o = asObject(doc, '', TOP_KEYS);

  const lp = 'listen';
  const l = asObject(o.listen ?? {}, lp, ['host', 'port']);
  const listen = { host: optString(l, 'host', lp) ?? '127.0.0.1', port: optInt(l, 'port', lp, 0, 65535) ?? 8080 };
  // Blank is not a host: Node would resolve " " or fail at serve; --host refuses it likewise.
  if (listen.host.trim() === '') throw new ConfigError(child(lp, 'host'), 'must name a host or address, not be blank');
  // A port, scheme, path, brackets or a space make it no host: serve would only fail with "does not resolve".
  if (isIP(listen.host) === 0 && !/^[A-Za-z0-9_.-]+$/.test(listen.host)) {
    throw new ConfigError(child(lp, 'host'), 'must be a host name or IP address alone, e.g. 127.0.0.1, 0.0.0.0, ::1 or localhost (no scheme, port, path, brackets or spaces; the port is listen.port)');
  }

  // Set but empty is a reference that resolved to nothing (compose's `DATABASE_URL: ${PG_URL}` with
  // PG_URL unset): falling back to `database` would take the events into another database.
  if (env.DATABASE_URL === '') {
    throw new ConfigError('DATABASE_URL', 'is set but empty: give it the database URL, or unset it to use the config\'s database');
  }
  if (typeof o.database === 'string' && o.database.includes('${') && !env.DATABASE_URL) {
    throw new ConfigError('database', 'contains "${": a reference is not read here; to keep the URL (and its password) out of the config, set DATABASE_URL, which overrides database');
  }
  const database = env.DATABASE_URL || reqString(o, 'database', '');
  const dbPath = env.DATABASE_URL ? 'DATABASE_URL' : 'database';
  // A CRLF env file leaves "\r" at the end: SQLite would open a new, empty "inbox.db\r" beside the real one.
  if (/[\u0000-\u001f\u007f]/.test(database) || database.trim() !== database) {
    throw new ConfigError(dbPath, 'has a control character or white space at an end (a CRLF line ending, a quoted space?): it would be part of the file name or URL');
  }
  if (!/^(sqlite:|postgres(ql)?:\/\/)/.test(database)) throw new ConfigError(dbPath, 'must start with sqlite:, postgres:// or postgresql://');
  // Checked here so a bad one is a config error, not a stack trace at the first connection (never echoed: it may hold a password).
  if (database.startsWith('sqlite:') && database.slice('sqlite:'.length).split('?')[0]!.trim() === '') {
    throw new ConfigError(dbPath, 'needs a file path after sqlite:, e.g. sqlite:./data/webhook-inbox.db');
  }
  if (database.startsWith('sqlite:')) {
    try {
      parseSqliteUrl(database); // its parameters: names and values
    } catch (err) {
      throw new ConfigError(dbPath, (err as Error).message);
    }
  }
  if (!database.startsWith('sqlite:') && !URL.canParse(database)) throw new ConfigError(dbPath, 'is not a valid postgres:// URL');

  const kp = 'payloadKeys';
  const k = asObject(o.payloadKeys, kp, ['current', 'keys']);
  const current = reqString(k, 'current', kp);
  const keysObj = asObject(k.keys, child(kp, 'keys'), Object.keys((k.keys ?? {}) as Obj));
  const keys = new Map<string, SecretRef>();
  for (const [id, v] of Object.entries(keysObj)) {
    // An id longer than any id is more likely a key written where its id goes: not printed in paths (problems reach /readyz).
    const withheld = id.length > 32 ? `(a ${id.length}-character key id)` : undefined;
    // Stored with every payload and effect it seals, and compared with the config's when one is
    // opened: the stores must keep it exactly (as an event id, providers/storable.ts). A lone
    // surrogate is stored as U+FFFD, a key no row could then be opened with; PostgreSQL text
    // refuses a NUL, so every accept failed (503).
    if (!id.isWellFormed() || id.includes('\0')) {
      throw new ConfigError(child(child(kp, 'keys'), withheld ?? JSON.stringify(id)), 'a key id is stored with every payload it seals: it may not hold a lone surrogate or a NUL character');
    }
    keys.set(id, parseSecretRef(v, child(child(kp, 'keys'), withheld ?? id)));
  }
  if (!keys.has(current)) {
    // Not echoed when it could be a key pasted into the wrong place (a 32-byte key is 44 characters of base64).
    const named = current.length <= 32 ? `"${current}"` : `(a ${current.length}-character value)`;
    throw new ConfigError(child(kp, 'current'), `${named} is not one of payloadKeys.keys`);
  }

  const limp = 'limits';
  const lim = asObject(o.limits ?? {}, limp, ['maxHeaders', 'maxHeaderBytes', 'headersTimeoutMs', 'requestTimeoutMs', 'keepAliveTimeoutMs', 'maxInFlightBodyBytes', 'minBodyBytesPerSecond', 'offloadBodyBytes', 'offloadWhenInFlight', 'compressBodyBytes']);
  const limits = {
    maxHeaders: optInt(lim, 'maxHeaders', limp, 8, 1000) ?? 100,
    maxHeaderBytes: optInt(lim, 'maxHeaderBytes', limp, 1024, 1024 * 1024) ?? 16 * 1024,
    headersTimeoutMs: optInt(lim, 'headersTimeoutMs', limp, 100, 600_000) ?? 10_000,
    requestTimeoutMs: optInt(lim, 'requestTimeoutMs', limp, 100, 600_000) ?? 30_000,
    keepAliveTimeoutMs: optInt(lim, 'keepAliveTimeoutMs', limp, 100, 600_000) ?? 65_000,
    maxInFlightBodyBytes: optInt(lim, 'maxInFlightBodyBytes', limp, 1024, 16 * 1024 ** 3) ?? 64 * 1024 * 1024,
    minBodyBytesPerSecond: optInt(lim, 'minBodyBytesPerSecond', limp, 0, 1024 ** 3) ?? 64 * 1024,
    offloadBodyBytes: optInt(lim, 'offloadBodyBytes', limp, 0, 64 * 1024 * 1024),
    offloadWhenInFlight: optInt(lim, 'offloadWhenInFlight', limp, 0, 1_000_000),
    compressBodyBytes: optInt(lim, 'compressBodyBytes', limp, 0, 1024 ** 3) ?? DEFAULT_COMPRESS_BODY_BYTES,
  };
  // Node refuses to create a server whose headers timeout is longer than its request timeout.
  if (limits.headersTimeoutMs > limits.requestTimeoutMs) {
    // Named by the key written: only requestTimeoutMs, below headersTimeoutMs's default, is the one to change.
    if (lim.headersTimeoutMs === undefined) throw new ConfigError(child(limp, 'requestTimeoutMs'), `must be ≥ limits.headersTimeoutMs (${limits.headersTimeoutMs}, its default)`);
    throw new ConfigError(child(limp, 'headersTimeoutMs'), `must be ≤ limits.requestTimeoutMs (${limits.headersTimeoutMs} > ${limits.requestTimeoutMs}${lim.requestTimeoutMs === undefined ? ', its default' : ''})`);
  }

  const gp = 'groupCommit';
  const g = asObject(o.groupCommit ?? {}, gp, ['maxBatch', 'maxBatchBytes', 'maxWaitMs', 'maxInFlight', 'commitTimeoutMs']);
  const groupCommit = {
    maxBatch: optInt(g, 'maxBatch', gp, 1, 1000) ?? 256,
    maxBatchBytes: optInt(g, 'maxBatchBytes', gp, 64 * 1024, 1024 ** 3) ?? 4 * 1024 * 1024,
    maxWaitMs: optInt(g, 'maxWaitMs', gp, 0, 50),
    maxInFlight: optInt(g, 'maxInFlight', gp, 1, 16),
    commitTimeoutMs: optInt(g, 'commitTimeoutMs', gp, 100, 120_000) ?? 10_000,
  };

  // Fractions allowed (0.5 = 12 hours); 0 = as soon as processed (at the next hourly run).
  const ret = asObject(o.retention ?? {}, 'retention', ['processedPayloadDays', 'failedPayloadDays']);
  const retention = {
    processedPayloadDays: optNumber(ret, 'processedPayloadDays', 'retention', 0, 36_500),
    failedPayloadDays: optNumber(ret, 'failedPayloadDays', 'retention', 0, 36_500),
  };

  const log = { level: optEnum(asObject(o.log ?? {}, 'log', ['level']), 'level', 'log', ['debug', 'info', 'warn', 'error', 'silent'] as const) ?? 'info' };

  const destinations = parseDestinations(o.destinations, env);
  const workers = parseWorkers(o.workers);
  const defaultRetry = parseRetry(o.retry, 'retry') ?? DEFAULT_RETRY;

  const endpointList = asArray(o.endpoints, 'endpoints');
  if (endpointList.length === 0) throw new ConfigError('endpoints', 'needs at least one endpoint');
  const seen = new Set<string>();
  const endpoints = endpointList.map((e, i) => {
    const ep = parseEndpoint(e, child('endpoints', i), destinations, defaultRetry, env);
    if (seen.has(ep.id)) throw new ConfigError(child(child('endpoints', i), 'id'), `duplicate endpoint id "${ep.id}"`);
    seen.add(ep.id);
    // A body the budget can never hold would get 503 on every retry, for ever.
    const holdable = Math.floor(limits.maxInFlightBodyBytes / IN_MEMORY_COPIES);
    if (ep.maxBodyBytes > holdable) {
      throw new ConfigError(child(child('endpoints', i), 'maxBodyBytes'), `${ep.maxBodyBytes}${(e as Obj).maxBodyBytes === undefined ? ` (the ${ep.provider} default)` : ''} is more than a body can ever hold in memory: limits.maxInFlightBodyBytes (${limits.maxInFlightBodyBytes}) counts each body ${IN_MEMORY_COPIES} times (raw and sealed), so at most ${holdable}`);
    }
    return ep;
  });

  const config: Config = { listen, database, payloadKeys: { current, keys }, limits, groupCommit, log, endpoints, destinations, workers, retry: defaultRetry, retention };
  parsedWith.set(config, env);
  return config;
}

/** The env each config was parsed with (not a field: logging a config must never print the environment). */
const parsedWith = new WeakMap<Config, NodeJS.ProcessEnv>();

/**
 * The env parseConfig read this config's `${env:}` references from: startApp and startWorkers
 * read its secrets from the same one unless given their own `env`. Undefined for a config not
 * made by parseConfig (built in code, or a copy).
 */
export function configEnv(config: Config): NodeJS.ProcessEnv | undefined {
  return parsedWith.get(config);
}
