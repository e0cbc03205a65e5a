import { createHash, createPrivateKey, createSign, type KeyObject } from 'node:crypto';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createServer, type Server } from 'node:https';
import type { LookupFunction } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { crc32 as zlibCrc32 } from 'node:zlib';
import { Agent } from 'undici';
import { createCertFetcher, type CertFetcher } from '../../src/providers/paypal.js';

/**
 * Test fixtures for PayPal: throwaway RSA keys and self-signed X.509 certificates made with the
 * `openssl` CLI, a local `node:https` server standing in for PayPal's certificate host, and a
 * signer written independently of the adapter (zlib's CRC-32, a template string, createSign).
 */

export interface SigningCert {
  readonly privateKeyPem: string;
  readonly privateKey: KeyObject;
  readonly certPem: Buffer;
}

export interface CertSpec {
  /** Subject CN (default PayPal's sandbox signing name). */
  readonly cn?: string;
  readonly days?: number;
  /** openssl -newkey argument (default rsa:2048). */
  readonly newkey?: string;
  readonly extraArgs?: readonly string[];
}

export const SANDBOX_SIGNING_CN = 'messageverificationcerts.sandbox.paypal.com';
export const LIVE_SIGNING_CN = 'messageverificationcerts.paypal.com';
export const PAYPAL_HOSTS = ['api.paypal.com', 'api-m.paypal.com', 'api.sandbox.paypal.com', 'api-m.sandbox.paypal.com'];

/** A key and a self-signed certificate, made by `openssl req -x509` in a temp dir (removed after). */
export function makeCert(spec: CertSpec = {}): SigningCert {
  const dir = mkdtempSync(join(tmpdir(), 'wi-paypal-'));
  try {
    const key = join(dir, 'key.pem');
    const cert = join(dir, 'cert.pem');
    const newkey = spec.newkey ?? 'rsa:2048';
    const args = ['req', '-x509', '-newkey', newkey, '-nodes', '-sha256', '-keyout', key, '-out', cert, '-days', String(spec.days ?? 30),
      '-subj', `/C=US/ST=California/L=San Jose/O=PayPal, Inc./OU=test/CN=${spec.cn ?? SANDBOX_SIGNING_CN}`, ...(spec.extraArgs ?? [])];
    if (newkey.startsWith('ec')) args.splice(args.indexOf(newkey) + 1, 0, '-pkeyopt', 'ec_paramgen_curve:P-256');
    execFileSync('openssl', args, { stdio: 'pipe' });
    const privateKeyPem = readFileSync(key, 'utf8');
    return { privateKeyPem, privateKey: createPrivateKey(privateKeyPem), certPem: readFileSync(cert) };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/** Signs exactly as PayPal does, written apart from the adapter: `${id}|${time}|${webhookId}|${crc32 decimal}`. */
export function paypalSign(privateKey: KeyObject | string, h: { transmissionId: string; time: string; webhookId: string; body: Buffer }): string {
  const message = `${h.transmissionId}|${h.time}|${h.webhookId}|${zlibCrc32(h.body)}`;
  return createSign('RSA-SHA256').update(message, 'utf8').sign(privateKey, 'base64');
}

/** The five PayPal headers for one transmission. */
export function paypalHeaders(privateKey: KeyObject | string, certUrl: string, h: { transmissionId: string; time: string; webhookId: string; body: Buffer }): Record<string, string> {
  return {
    'content-type': 'application/json',
    'paypal-transmission-id': h.transmissionId,
    'paypal-transmission-time': h.time,
    'paypal-transmission-sig': paypalSign(privateKey, h),
    'paypal-cert-url': certUrl,
    'paypal-auth-algo': 'SHA256withRSA',
    'paypal-auth-version': 'v2',
  };
}

/**
 * A certificate id in PayPal's form (`CERT-` and three groups of 8 hex digits) for a test label: the
 * label's SHA-256, so each label names its own id; an id already in that form is kept as it is.
 */
export function certId(label: string): string {
  if (/^CERT-[0-9A-Fa-f]{8}-[0-9A-Fa-f]{8}-[0-9A-Fa-f]{8}$/.test(label)) return label;
  const h = createHash('sha256').update(label).digest('hex');
  return `CERT-${h.slice(0, 8)}-${h.slice(8, 16)}-${h.slice(16, 24)}`;
}

export const isoSeconds = (ms: number) => new Date(ms).toISOString().replace(/\.\d{3}Z$/, 'Z');

/** What the fake certificate host answers on one path. */
export type Route =
  | { readonly pem: Buffer | string }
  | { readonly status: number; readonly body?: string; readonly headers?: Record<string, string> }
  | { readonly hang: true };

export interface FakePaypal {
  readonly port: number;
  /** Requests the server saw, per path. */
  readonly hits: Map<string, number>;
  /** Certificate path → answer. */
  readonly routes: Map<string, Route>;
  /** The production fetcher (undici), pointed at this server: PayPal host names resolve to 127.0.0.1 and its TLS cert is trusted. */
  readonly fetcher: CertFetcher;
  /** Calls `fetcher` made (cache misses), per URL. */
  readonly fetches: string[];
  /** A fetcher as above with its own options (timeouts, size). */
  fetcherWith(opts: { timeoutMs?: number; maxBytes?: number }): CertFetcher;
  close(): Promise<void>;
}

/**
 * A local HTTPS server that plays PayPal's certificate host. Its TLS certificate names the four PayPal
 * API hosts; the fetcher resolves those names to 127.0.0.1 and trusts only that certificate, so the
 * real TLS host-name check runs.
 */
export async function startFakePaypal(): Promise<FakePaypal> {
  const tls = makeCert({ cn: 'api.paypal.com', days: 2, extraArgs: ['-addext', `subjectAltName=${PAYPAL_HOSTS.map((h) => `DNS:${h}`).join(',')}`] });
  const hits = new Map<string, number>();
  const routes = new Map<string, Route>();
  const server: Server = createServer({ key: tls.privateKeyPem, cert: tls.certPem }, (req, res) => {
    const path = new URL(req.url ?? '/', 'https://x').pathname;
    hits.set(path, (hits.get(path) ?? 0) + 1);
    const route = routes.get(path);
    if (!route) {
      res.writeHead(404, { 'content-type': 'application/json' }).end('{"name":"RESOURCE_NOT_FOUND"}');
    } else if ('hang' in route) {
      // never answers
    } else if ('pem' in route) {
      res.writeHead(200, { 'content-type': 'application/x-pem-file' }).end(route.pem);
    } else {
      res.writeHead(route.status, route.headers).end(route.body ?? '');
    }
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as { port: number }).port;
  const lookup: LookupFunction = (_host, opts, cb) => {
    if ((opts as { all?: boolean }).all) (cb as unknown as (e: null, a: { address: string; family: number }[]) => void)(null, [{ address: '127.0.0.1', family: 4 }]);
    else cb(null, '127.0.0.1', 4);
  };
  const agents: Agent[] = [];
  const fetches: string[] = [];
  const fetcherWith = (opts: { timeoutMs?: number; maxBytes?: number }): CertFetcher => {
    const agent = new Agent({ connect: { ca: tls.certPem, lookup } });
    agents.push(agent);
    const base = createCertFetcher({ ...opts, dispatcher: agent });
    return (url: URL) => {
      fetches.push(url.href);
      // Same host name (SNI and certificate check), this server's port.
      return base(new URL(`${url.pathname}${url.search}`, `https://${url.hostname}:${port}`));
    };
  };
  const fetcher = fetcherWith({});
  return {
    port, hits, routes, fetcher, fetches, fetcherWith,
    async close() {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
      await Promise.all(agents.map((a) => a.destroy()));
    },
  };
}

const TABLE = (() => {
  const t: number[] = [];
  for (let n = 0; n < 256; n++) {
    let c = n;
    for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
    t.push(c >>> 0);
  }
  return t;
})();
const BY_TOP_BYTE = new Map(TABLE.map((v, i) => [v >>> 24, i])); // the 256 top bytes are distinct

const step = (s: number, b: number) => (TABLE[(s ^ b) & 0xff]! ^ (s >>> 8)) >>> 0;
/** Undoes `step` for a known byte. */
function unstep(next: number, b: number): number {
  const i = BY_TOP_BYTE.get(next >>> 24)!;
  return ((((next ^ TABLE[i]!) << 8) | ((i ^ b) & 0xff)) >>> 0);
}

/**
 * A body `${prefix}<n><4 bytes>${suffix}` whose CRC-32 is `target` — CRC-32 is linear, so anyone
 * holding one signed delivery can make other bytes that PayPal's signed string cannot tell apart.
 * The 4 forced bytes are printable ASCII other than `"` and `\` (so they fit inside a JSON string).
 */
export function forgeSameCrc(target: number, prefix: string, suffix: string): Buffer {
  const tail = Buffer.from(suffix, 'utf8');
  let need = (target ^ 0xffffffff) >>> 0; // the register after prefix + forced bytes
  for (let k = tail.length - 1; k >= 0; k--) need = unstep(need, tail[k]!);
  for (let n = 0; n < 100_000; n++) {
    const head = Buffer.from(`${prefix}${n}`, 'utf8');
    let s = 0xffffffff;
    for (const b of head) s = step(s, b);
    const idx: number[] = [];
    let x = need;
    for (let k = 0; k < 4; k++) {
      const i = BY_TOP_BYTE.get(x >>> 24)!;
      idx.unshift(i);
      x = ((x ^ TABLE[i]!) << 8) >>> 0;
    }
    const forced: number[] = [];
    for (const i of idx) {
      forced.push((s ^ i) & 0xff);
      s = (TABLE[i]! ^ (s >>> 8)) >>> 0;
    }
    if (forced.every((b) => b >= 0x20 && b < 0x7f && b !== 0x22 && b !== 0x5c)) return Buffer.concat([head, Buffer.from(forced), tail]);
  }
  throw new Error('no printable forgery found');
}
