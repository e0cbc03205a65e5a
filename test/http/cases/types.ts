import { randomUUID } from 'node:crypto';
import type { ProviderAdapter, SignOptions } from '../../../src/providers/contract.js';

/**
 * One provider's part in the table-driven HTTP suite (test/http/verification.test.ts): how it
 * makes, signs and tampers with a delivery. Each endpoint trusts three secret versions:
 * v2 (current), v1 (previous) and v0 (retired in the past).
 */
export type Version = 'v2' | 'v1' | 'v0';
export type Secrets = Record<Version, string>;

export const RETIRED_AT = '2000-01-01T00:00:00Z';

/** The endpoint's `secrets:` list for a rotation: v2 current, v1 previous, v0 retired. */
export const rotation = (s: Secrets) => [
  { version: 'v2', value: s.v2 },
  { version: 'v1', value: s.v1 },
  { version: 'v0', value: s.v0, retireAt: RETIRED_AT },
];

/** One logical event as a provider would send it, before signing. */
export interface Made {
  readonly body: Buffer;
  /** Unsigned headers (content type, ids, event names). */
  readonly headers: Record<string, string>;
  readonly signOpts: SignOptions;
  /** The provider event id the row must be stored under. */
  readonly key: string;
  readonly type: string;
  /** The object id the row must carry (null when the provider names none). */
  readonly objectId?: string | null;
}

export interface Case {
  /** Provider (adapter) name. */
  readonly name: string;
  /** Endpoint id (URL /webhooks/<endpoint>). */
  readonly endpoint: string;
  /** The endpoint's config entry (id, provider, secrets: rotation(secrets), options…). */
  readonly config: Record<string, unknown>;
  readonly adapter: ProviderAdapter;
  readonly secrets: Secrets;
  /** Freshness window in seconds; null when no timestamp is signed. */
  readonly tolerance: number | null;
  readonly signatureHeader: string;
  /** The body is JSON (false: form-encoded; the JSON re-serialisation test does not apply). */
  readonly json: boolean;
  /**
   * A new logical event. `text` goes verbatim into the body (use it for multi-byte characters);
   * the body contains the bytes `1.0` (the tamper test flips them). `objectId` pins the object the
   * event is about (two events about one object must still be two rows).
   */
  make(text?: string, type?: string, objectId?: string): Made;
  /** The same delivery with a different event id, keeping the original signature; null when the id is not signed. */
  changeId(m: Made, headers: Record<string, string>): { body: Buffer; headers: Record<string, string> } | null;
  /** The same delivery with the signed timestamp moved by one second; null when no timestamp is signed. */
  changeTimestamp(headers: Record<string, string>): Record<string, string> | null;
}

export const uid = () => randomUUID().replaceAll('-', '');
/** Spacing, `1.0` and a `\u00e9` escape: JSON.stringify(JSON.parse(body)) is never the same bytes. */
export const fields = (text: string) => `"amount": 1.0, "note": "caf\\u00e9 ${text}"`;
export const bumpTimestamp = (v: string) => String(Number(v) + 1);

export const nowSeconds = () => Math.floor(Date.now() / 1000);

/** Multi-byte UTF-8 of every width (more bytes than UTF-16 code units): the text a suite's events carry. */
export const RICH = 'Zoë 😀 東京 — naïve ü 𝄞';

/** Unsigned + signature headers, signed with the given secret version (default v2) at the given time (default now). */
export function signed(c: Case, m: Made, opts: { version?: Version; timestamp?: number; body?: Buffer } = {}): Record<string, string> {
  const sig = c.adapter.sign(opts.body ?? m.body, c.secrets[opts.version ?? 'v2'], { ...m.signOpts, timestamp: opts.timestamp ?? nowSeconds() });
  return { ...m.headers, ...sig };
}
