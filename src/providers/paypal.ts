import { DAY } from './contract.js';
import { X509Certificate, createPrivateKey, randomUUID, sign as rsaSign, verify as rsaVerify, type KeyObject } from 'node:crypto';
import type { Dispatcher } from 'undici';
import { crc32 } from 'node:zlib';
import { decodeBase64, isRetired, type TrustedKey } from '../crypto/hmac.js';
import { asObject, child } from '../config/read.js';
import { ConfigError, IngressError } from '../errors.js';
import type { AdapterFactory, ProviderAdapter, RequestView, SignatureMetadata } from './contract.js';
import { jsonEnvelope } from './json.js';
import { withDeadline } from '../deadline.js';
import { CommandError } from '../cli/usage-error.js';

/**
 * PayPal (REST webhooks): `PAYPAL-TRANSMISSION-SIG` = base64 RSA-SHA256 (PKCS#1 v1.5) over
 * `${PAYPAL-TRANSMISSION-ID}|${PAYPAL-TRANSMISSION-TIME}|${webhookId}|${crc32(raw body), unsigned decimal}`,
 * made with the private key of the X.509 certificate at `PAYPAL-CERT-URL` (`PAYPAL-AUTH-ALGO: SHA256withRSA`).
 *
 * Why the quirks:
 * - There is no shared secret. The endpoint's "secrets" are the webhook ids it trusts (rotation = a
 *   new webhook id); the id is signed, so a delivery meant for another webhook does not verify.
 * - The request names its own key (the cert URL). It is trusted only when it is an https URL on an
 *   allowlisted PayPal API host (exact host, default port, no userinfo, query or fragment) at
 *   `/v1/notifications/certs/CERT-<8 hex>-<8 hex>-<8 hex>` (the only form PayPal has used) — checked
 *   from headers alone, before any network I/O, so made-up names cost no download. The certificate is
 *   downloaded over TLS (Node's CA store, no redirects, bounded time and size) and cached per URL;
 *   a URL whose certificate has verified a delivery is never kept waiting by URLs that have not.
 *   No chain check: the URL serves the leaf alone (PayPal's Java SDK demands the signing CN of every
 *   certificate in it) and Node ships no intermediates to build a chain with, so TLS to PayPal's
 *   host is the trust anchor (PayPal's Node and Python SDKs check even less); on top,
 *   the leaf must be in date and name PayPal's signing service (`CN=messageverificationcerts….paypal.com`,
 *   the rule of PayPal's Java SDK), with an RSA key of ≥ 2048 bits.
 * - The body is covered only through CRC-32, which is not collision resistant: anyone who sees one
 *   delivery can make other bytes with the same CRC. So one transmission id verifies one body only
 *   (the ingress binds it to the bytes' SHA-256 in the database, webhook_transmission, via
 *   SignatureMetadata.transmissionId); a replay of the same bytes is fine (a duplicate by event id).
 * - Unreachable certificate (network, non-2xx, too large, timeout, not PEM) → `503
 *   verification_unavailable`: PayPal retries, nothing is accepted unverified.
 * - An automatic retry repeats the first transmission: same PAYPAL-TRANSMISSION-ID, same signed
 *   PAYPAL-TRANSMISSION-TIME (an event's transmission record keeps one id and the first attempt's
 *   time through days of retries, and the id is a v1 UUID minted at that time). So the freshness
 *   window spans PayPal's retries (25 over 3 days) plus a day: a narrower one refuses every retry
 *   once it is past, and PayPal gives the event up after 3 days.
 * Key = body `id` (WH-…), the same on automatic retries and on "Resend".
 */

/** Fetches PEM bytes for an already allowlisted certificate URL. Rejects on any failure. */
export type CertFetcher = (url: URL) => Promise<Buffer>;

/** Signs like PayPal (tests, send-sample): a private key and the cert URL that serves its certificate. */
export interface PaypalSigner {
  readonly privateKey: KeyObject | string;
  readonly certUrl: string;
}

/** PayPal's REST API hosts that serve webhook signing certificates (live and sandbox; api-m is the newer name). */
export const DEFAULT_CERT_HOSTS: readonly string[] = ['api.paypal.com', 'api-m.paypal.com', 'api.sandbox.paypal.com', 'api-m.sandbox.paypal.com'];
const CERT_PATH_RE = /^\/v1\/notifications\/certs\/[^/]+$/;
/** PayPal's certificate ids, 2014 to now: CERT-360caa42-35c2ed1e-21e9a5d6, CERT-360caa42-fca2a594-a5cafa77, … */
const CERT_ID_RE = /^\/v1\/notifications\/certs\/CERT-[0-9A-Fa-f]{8}-[0-9A-Fa-f]{8}-[0-9A-Fa-f]{8}$/;
const CERT_HOST_RE = /^(?:[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?\.)+paypal\.com$/;
/** The Java SDK's rule (SSLUtil.validateCertificateChain): CN starts with messageverificationcerts, ends with .paypal.com. */
const SIGNING_CN_RE = /^messageverificationcerts(?:\.[a-z0-9-]+)*\.paypal\.com$/i;
export const AUTH_ALGO = 'SHA256withRSA';

export const MAX_CERT_BYTES = 64 * 1024;
export const CERT_FETCH_TIMEOUT_MS = 8_000;
/** A fetched certificate is reused for a day (a CERT-… id names one certificate). */
export const CERT_TTL_MS = 24 * 60 * 60 * 1000;
/** A failed fetch is remembered briefly, so a burst of retries does not hammer PayPal; never longer. */
export const CERT_FAILURE_TTL_MS = 10_000;
const MAX_CACHED_CERTS = 32;
const MAX_CACHED_FAILURES = 256;
/** Downloads at once for URLs that have not verified a delivery yet (made-up ones among them). */
const MAX_UNPROVEN_FETCHES = 4;
/** URLs whose certificate verified a delivery, remembered past the cache (LRU): their downloads never wait. */
const MAX_PROVEN_URLS = 16;
/** Default freshness window: PayPal retries for 3 days with the first transmission's time, plus a day of slack. */
export const RETRY_WINDOW_SECONDS = 4 * DAY;
const H_ID = 'paypal-transmission-id';
const H_TIME = 'paypal-transmission-time';
const H_SIG = 'paypal-transmission-sig';
const H_CERT = 'paypal-cert-url';
const H_ALGO = 'paypal-auth-algo';

const TRANSMISSION_ID_RE = /^[\x21-\x7b\x7d\x7e]{1,128}$/; // printable ASCII, no space, no "|"
const ISO_RE = /^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?(Z|[+-]\d{2}:\d{2})$/;
/** PayPal's schema for webhook_id is ^[a-zA-Z0-9]+$, ≤ 50; "_" for the simulator's literal WEBHOOK_ID. */
const WEBHOOK_ID_RE = /^[A-Za-z0-9_]{1,50}$/;

interface PaypalSignature extends SignatureMetadata {
  readonly timestamp: number;
  /** Signed (in `head`), so it names this transmission: its one body is bound to it (SignatureMetadata.transmissionId). */
  readonly transmissionId: string;
  /** `${transmissionId}|${transmissionTime}|` — the signed prefix, header text verbatim. */
  readonly head: Buffer;
  readonly signature: Buffer;
  readonly certUrl: URL;
}

/** Strict ISO-8601 date-time with seconds and a zone → Unix ms, or null. */
export function parseTransmissionTime(s: string): number | null {
  const m = ISO_RE.exec(s);
  if (!m) return null;
  const [y, mo, d, h, mi, sec] = m.slice(1, 7).map(Number) as [number, number, number, number, number, number];
  const ms = Date.UTC(y, mo - 1, d, h, mi, sec);
  const back = new Date(ms);
  if (back.getUTCFullYear() !== y || back.getUTCMonth() !== mo - 1 || back.getUTCDate() !== d || back.getUTCHours() !== h || back.getUTCMinutes() !== mi || sec > 59) return null;
  const zone = m[8]!;
  if (zone === 'Z') return ms;
  const sign = zone[0] === '-' ? -1 : 1;
  const zh = Number(zone.slice(1, 3));
  const zm = Number(zone.slice(4, 6));
  if (zh > 23 || zm > 59) return null;
  return ms - sign * (zh * 60 + zm) * 60_000;
}

/**
 * The certificate URL, if it is one PayPal serves signing certificates from; otherwise an IngressError
 * (an unparsable value is malformed, a well-formed URL we do not trust is invalid). No I/O.
 */
export function checkCertUrl(raw: string, hosts: readonly string[] = DEFAULT_CERT_HOSTS): URL {
  if (raw.length > 2048 || /[\s\\]/.test(raw)) throw new IngressError('malformed_signature', `${H_CERT} is not a URL`);
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    throw new IngressError('malformed_signature', `${H_CERT} is not a URL`);
  }
  const ok = url.protocol === 'https:'
    && url.username === '' && url.password === ''
    && url.port === ''
    && hosts.includes(url.hostname)
    && CERT_PATH_RE.test(url.pathname)
    && url.search === '' && url.hash === '' && !raw.includes('?') && !raw.includes('#');
  if (!ok) throw new IngressError('invalid_signature', `${H_CERT} is not a PayPal certificate URL`);
  // Apart from the check above so the refusal says why: a made-up id must not cost a download.
  if (!CERT_ID_RE.test(url.pathname)) throw new IngressError('invalid_signature', `${H_CERT} does not name a PayPal certificate id (CERT-xxxxxxxx-xxxxxxxx-xxxxxxxx)`);
  return url;
}

function parseSignature(req: RequestView, hosts: readonly string[]): PaypalSignature {
  const sigText = req.single(H_SIG);
  if (sigText === undefined || sigText === '') throw new IngressError('missing_signature', `${H_SIG} header is absent`);
  const need = (name: string): string => {
    const v = req.single(name);
    if (v === undefined || v === '') throw new IngressError('malformed_signature', `${name} header is absent`);
    return v;
  };
  const transmissionId = need(H_ID);
  const time = need(H_TIME);
  const certText = need(H_CERT);
  const algo = need(H_ALGO);
  if (algo !== AUTH_ALGO) throw new IngressError('malformed_signature', `${H_ALGO} must be ${AUTH_ALGO}`);
  if (!TRANSMISSION_ID_RE.test(transmissionId)) throw new IngressError('malformed_signature', `${H_ID} has characters outside printable ASCII or a "|"`);
  const ms = parseTransmissionTime(time);
  if (ms === null) throw new IngressError('malformed_signature', `${H_TIME} is not an ISO-8601 date-time`);
  const signature = decodeBase64(sigText);
  if (signature === null || signature.length < 128 || signature.length > 1024) throw new IngressError('malformed_signature', `${H_SIG} is not a base64 RSA signature`);
  const certUrl = checkCertUrl(certText, hosts);
  return { timestamp: Math.floor(ms / 1000), transmissionId, head: Buffer.from(`${transmissionId}|${time}|`, 'utf8'), signature, certUrl };
}

/** A parsed signing certificate. `problem` says why it cannot vouch for anything (checked before any signature). */
export interface SigningCert {
  readonly key: KeyObject;
  readonly notBeforeMs: number;
  readonly notAfterMs: number;
  readonly problem: string | null;
}

/** The first certificate of a PEM document; throws when there is none or it does not parse. */
export function parseSigningCert(pem: Buffer): SigningCert {
  const block = /-----BEGIN CERTIFICATE-----[A-Za-z0-9+/=\r\n\t ]+-----END CERTIFICATE-----/.exec(pem.toString('latin1'));
  if (!block) throw new Error('no PEM certificate');
  const x = new X509Certificate(block[0]);
  const notBeforeMs = Date.parse(x.validFrom);
  const notAfterMs = Date.parse(x.validTo);
  if (Number.isNaN(notBeforeMs) || Number.isNaN(notAfterMs)) throw new Error('unreadable validity dates');
  const key = x.publicKey;
  const cns = x.subject.split('\n').filter((l) => l.startsWith('CN=')).map((l) => l.slice(3));
  let problem: string | null = null;
  if (key.asymmetricKeyType !== 'rsa' || (key.asymmetricKeyDetails?.modulusLength ?? 0) < 2048) problem = 'PayPal signing certificate does not hold an RSA key of at least 2048 bits';
  else if (cns.length !== 1 || !SIGNING_CN_RE.test(cns[0]!)) problem = 'certificate subject is not PayPal\'s webhook signing service';
  return { key, notBeforeMs, notAfterMs, problem };
}

/**
 * The default fetcher: undici GET over https with Node's CA store, redirects NOT followed (a 3xx is a
 * failure), bounded by time and size. `dispatcher` lets tests (and proxies) choose the connection.
 */
export function createCertFetcher(opts: { dispatcher?: Dispatcher; timeoutMs?: number; maxBytes?: number } = {}): CertFetcher {
  const timeoutMs = opts.timeoutMs ?? CERT_FETCH_TIMEOUT_MS;
  const maxBytes = opts.maxBytes ?? MAX_CERT_BYTES;
  return async (url) => {
    // Loaded on the first fetch: undici is ~100 modules, and every CLI command reads the config.
    const { request } = await import('undici');
    const res = await request(url, {
      method: 'GET',
      headers: { accept: 'application/x-pem-file, text/plain, */*' },
      headersTimeout: timeoutMs,
      bodyTimeout: timeoutMs,
      signal: AbortSignal.timeout(timeoutMs),
      ...(opts.dispatcher ? { dispatcher: opts.dispatcher } : {}),
    });
    const body = res.body;
    body.on('error', () => undefined); // a body given up on must never surface as an uncaught 'error'
    try {
      if (res.statusCode < 200 || res.statusCode > 299) throw new Error(`HTTP ${res.statusCode}`);
      if (Number(res.headers['content-length']) > maxBytes) throw new Error('too large');
      const chunks: Buffer[] = [];
      let size = 0;
      for await (const chunk of body) {
        size += (chunk as Buffer).length;
        if (size > maxBytes) throw new Error('too large');
        chunks.push(chunk as Buffer);
      }
      return Buffer.concat(chunks);
    } finally {
      if (!body.destroyed) body.destroy();
    }
  };
}

const defaultFetcher = createCertFetcher();

/**
 * Signing certificates by URL: successes for CERT_TTL_MS (LRU, at most 32), failures for
 * CERT_FAILURE_TTL_MS (kept apart, so a flood of bad URLs cannot evict a good certificate), one
 * download per URL at a time. Downloads for URLs not yet proven (see `prove`) are at most 4 at once
 * and refused beyond that (fail fast: 503, the sender retries); a proven URL's download never waits
 * for them, so a stream of made-up URLs cannot keep PayPal's own certificate from being fetched again.
 */
export class CertificateCache {
  private readonly good = new Map<string, { cert: SigningCert; untilMs: number }>();
  private readonly bad = new Map<string, { detail: string; untilMs: number }>();
  private readonly inFlight = new Map<string, Promise<SigningCert>>();
  /** URLs whose certificate verified a delivery's signature (LRU): only PayPal's key can add one. */
  private readonly proven = new Set<string>();
  private unprovenInFlight = 0;

  constructor(private readonly fetcher: CertFetcher) {}

  /**
   * Its times are monotonic (performance.now()): the TTLs are spans within this process. On the
   * wall clock, a clock stepped back 10 minutes after a failed download answered every delivery
   * signed with that certificate 503 for those 10 minutes, without trying again.
   */
  get(url: URL): Promise<SigningCert> {
    const nowMs = performance.now();
    const k = url.href;
    const hit = this.good.get(k);
    if (hit) {
      this.good.delete(k);
      if (nowMs < hit.untilMs) {
        this.good.set(k, hit); // most recently used
        return Promise.resolve(hit.cert);
      }
    }
    const miss = this.bad.get(k);
    if (miss) {
      if (nowMs < miss.untilMs) return Promise.reject(new IngressError('verification_unavailable', miss.detail));
      this.bad.delete(k);
    }
    const pending = this.inFlight.get(k);
    if (pending) return pending;
    const proven = this.proven.has(k); // bounded (MAX_PROVEN_URLS), one download each at a time
    if (!proven && this.unprovenInFlight >= MAX_UNPROVEN_FETCHES) return Promise.reject(new IngressError('verification_unavailable', 'too many certificate downloads in progress'));
    if (!proven) this.unprovenInFlight++;
    const p = this.load(url, nowMs).finally(() => {
      this.inFlight.delete(k);
      if (!proven) this.unprovenInFlight--;
    });
    this.inFlight.set(k, p);
    return p;
  }

  /** The certificate at `url` verified a delivery for a trusted webhook id: its URL is PayPal's. */
  prove(url: URL): void {
    const k = url.href;
    this.proven.delete(k); // most recently used
    if (this.proven.size >= MAX_PROVEN_URLS) this.proven.delete(this.proven.values().next().value!);
    this.proven.add(k);
  }

  private async load(url: URL, nowMs: number): Promise<SigningCert> {
    let pem: Buffer;
    try {
      // Bounded, so a custom fetcher that never settles cannot hold a request forever.
      pem = await withDeadline(this.fetcher(url), CERT_FETCH_TIMEOUT_MS + 1_000, () => new Error('timed out'));
      if (!Buffer.isBuffer(pem)) throw new Error('fetcher returned no bytes');
      if (pem.length > MAX_CERT_BYTES) throw new Error('too large');
    } catch {
      throw this.fail(url.href, 'PayPal signing certificate could not be downloaded', nowMs);
    }
    let cert: SigningCert;
    try {
      cert = parseSigningCert(pem);
    } catch {
      throw this.fail(url.href, 'PayPal signing certificate is not a PEM X.509 certificate', nowMs);
    }
    if (this.good.size >= MAX_CACHED_CERTS) this.good.delete(this.good.keys().next().value!);
    this.good.set(url.href, { cert, untilMs: nowMs + CERT_TTL_MS });
    return cert;
  }

  private fail(k: string, detail: string, nowMs: number): IngressError {
    if (this.bad.size >= MAX_CACHED_FAILURES) this.bad.delete(this.bad.keys().next().value!);
    this.bad.set(k, { detail, untilMs: nowMs + CERT_FAILURE_TTL_MS });
    return new IngressError('verification_unavailable', detail);
  }
}

function signedBytes(head: Buffer | string, webhookId: Buffer, body: Buffer): Buffer {
  return Buffer.concat([typeof head === 'string' ? Buffer.from(head, 'utf8') : head, webhookId, Buffer.from(`|${crc32(body)}`, 'ascii')]);
}

function verifies(data: Buffer, key: KeyObject, signature: Buffer): boolean {
  try {
    return rsaVerify('sha256', data, key, signature); // RSA keys: PKCS#1 v1.5 padding by default
  } catch {
    return false;
  }
}

/** Transmission time as PayPal writes it: `2016-09-21T22:00:46Z`. */
const isoSeconds = (unixSeconds: number) => new Date(unixSeconds * 1000).toISOString().replace(/\.\d{3}Z$/, 'Z');

const OPTION_KEYS = ['certFetcher', 'certHosts', 'signer'] as const;

function parseOptions(options: Record<string, unknown> | undefined, path: string) {
  // read.ts's check: a long unknown key (a secret in the wrong place, say) is not echoed.
  const o = asObject(options ?? {}, path, OPTION_KEYS);
  let fetcher: CertFetcher = defaultFetcher;
  if (o.certFetcher !== undefined) {
    if (typeof o.certFetcher !== 'function') throw new ConfigError(child(path, 'certFetcher'), 'must be a function (url: URL) => Promise<Buffer>; it can only be set when the config is built in JavaScript');
    fetcher = o.certFetcher as CertFetcher;
  }
  let hosts = DEFAULT_CERT_HOSTS;
  if (o.certHosts !== undefined) {
    const p = child(path, 'certHosts');
    if (!Array.isArray(o.certHosts) || o.certHosts.length === 0) throw new ConfigError(p, 'must be a non-empty list of host names');
    hosts = o.certHosts.map((h, i) => {
      if (typeof h !== 'string' || !CERT_HOST_RE.test(h)) throw new ConfigError(child(p, i), 'must be a lowercase host name under paypal.com (no scheme, port or path)');
      return h;
    });
  }
  let signer: { key: KeyObject; certUrl: string } | undefined;
  if (o.signer !== undefined) {
    const p = child(path, 'signer');
    const s = o.signer as Partial<PaypalSigner> | null;
    if (s === null || typeof s !== 'object') throw new ConfigError(p, 'must be an object { privateKey, certUrl }');
    let key: KeyObject;
    try {
      key = typeof s.privateKey === 'string' ? createPrivateKey(s.privateKey) : (s.privateKey as KeyObject);
      if (key?.type !== 'private' || key.asymmetricKeyType !== 'rsa') throw new Error('not an RSA private key');
    } catch {
      throw new ConfigError(child(p, 'privateKey'), 'must be an RSA private key (PEM or KeyObject)');
    }
    if (typeof s.certUrl !== 'string') throw new ConfigError(child(p, 'certUrl'), 'is required');
    try {
      checkCertUrl(s.certUrl, hosts);
    } catch {
      throw new ConfigError(child(p, 'certUrl'), 'must be a PayPal certificate URL (https://<allowed host>/v1/notifications/certs/…)');
    }
    signer = { key, certUrl: s.certUrl };
  }
  return { fetcher, hosts, signer };
}

export const createPaypal: AdapterFactory = (options, path) => {
  const { fetcher, hosts, signer } = parseOptions(options, path);
  const certs = new CertificateCache(fetcher);

  const adapter: ProviderAdapter = {
    name: 'paypal',
    contentTypes: ['application/json'],
    // Retries carry the first transmission's signed time: the window must outlast PayPal's 3 days of them.
    defaultToleranceSeconds: RETRY_WINDOW_SECONDS,
    bindsTransmissions: true,
    // up to 25 retries over 3 days; "Resend" (Webhooks Events dashboard, same WH- id) of any event of the last 30 days.
    redeliveryWindowSeconds: 30 * DAY,
    prepareSecret(value) {
      if (!WEBHOOK_ID_RE.test(value)) throw new Error('a PayPal webhook id is 1-50 letters or digits, e.g. 4JH86294D6297924G (not a WH- event id, not the client secret)');
      return Buffer.from(value, 'utf8');
    },
    parseSignature: (req) => parseSignature(req, hosts),
    async verify(meta, body, keys, nowMs) {
      const m = meta as PaypalSignature;
      const live = keys.filter((k) => !isRetired(k, nowMs));
      if (live.length === 0) return null; // nothing could match: no download
      const cert = await certs.get(m.certUrl);
      if (cert.problem) throw new IngressError('invalid_signature', cert.problem);
      if (nowMs < cert.notBeforeMs || nowMs > cert.notAfterMs) throw new IngressError('invalid_signature', 'PayPal signing certificate is expired or not yet valid');
      let matched: TrustedKey | null = null;
      for (const k of live) {
        if (verifies(signedBytes(m.head, k.key, body), cert.key, m.signature)) {
          matched = k;
          break;
        }
      }
      if (!matched) return null;
      certs.prove(m.certUrl);
      // The CRC-32 lets a captured transmission verify other bytes: the ingress binds
      // m.transmissionId to these bytes in the store and refuses other bytes under it.
      return matched;
    },
    envelope: jsonEnvelope({ id: 'id', type: 'event_type', objectId: 'resource.id', objectVersion: 'resource.update_time', createdAt: 'create_time' }),
    sign(body, secret, opts) {
      // A one-line failure of the command asking (send-sample), not a bug: no stack.
      if (!signer) throw new CommandError('PayPal signs deliveries with its own private key: send a test event from the PayPal webhooks simulator, or configure options.signer (JavaScript only) to sign locally');
      const transmissionId = opts.id ?? randomUUID();
      const time = isoSeconds(opts.timestamp ?? Math.floor(Date.now() / 1000));
      const sig = rsaSign('sha256', signedBytes(`${transmissionId}|${time}|`, Buffer.from(secret, 'utf8'), body), signer.key);
      return {
        [H_ID]: transmissionId,
        [H_TIME]: time,
        [H_SIG]: sig.toString('base64'),
        [H_CERT]: signer.certUrl,
        [H_ALGO]: AUTH_ALGO,
        'paypal-auth-version': 'v2',
      };
    },
    sample(seq) {
      const now = new Date().toISOString();
      const capture = `SAMPLE${seq.toUpperCase()}`.slice(0, 17);
      const body = JSON.stringify({
        id: `WH-SAMPLE-${seq}`, event_version: '1.0', create_time: now, resource_type: 'capture', resource_version: '2.0',
        event_type: 'PAYMENT.CAPTURE.COMPLETED', summary: 'Payment completed for $ 20.0 USD',
        resource: { id: capture, status: 'COMPLETED', amount: { currency_code: 'USD', value: '20.00' }, final_capture: true, create_time: now, update_time: now },
        links: [{ href: `https://api.sandbox.paypal.com/v1/notifications/webhooks-events/WH-SAMPLE-${seq}`, rel: 'self', method: 'GET' }],
      });
      return { body: Buffer.from(body), headers: { 'content-type': 'application/json' }, signOptions: {} };
    },
  };
  return adapter;
};
