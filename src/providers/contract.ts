import type { TrustedKey } from '../crypto/hmac.js';

/**
 * The one contract every provider adapter implements. The ingress pipeline owns the ORDER
 * (bounds → raw bytes → signature metadata → verify → freshness → parse → accept);
 * an adapter owns only its provider's exact semantics for each step.
 */
export interface ProviderAdapter {
  readonly name: string;
  /** Media types (lowercase, no parameters) this provider sends. Anything else → 415. */
  readonly contentTypes: readonly string[];
  /** Body limit when the endpoint sets no `maxBodyBytes` (default 1 MiB). */
  readonly defaultMaxBodyBytes?: number;
  /** Freshness window when the provider signs a timestamp; null = no signed timestamp. */
  readonly defaultToleranceSeconds: number | null;
  /** Turns one configured secret string into key bytes. Throws Error(message) on a bad format. */
  prepareSecret(value: string): Buffer;
  /**
   * Step 4: signature metadata from HEADERS ONLY (the body is opaque bytes here).
   * Throws IngressError missing_signature / malformed_signature / ambiguous_signature.
   */
  parseSignature(req: RequestView): SignatureMetadata;
  /** Step 5: the trusted key that verifies the raw bytes, or null. Constant-time comparisons only. */
  verify(meta: SignatureMetadata, body: Buffer, keys: readonly TrustedKey[], nowMs: number): TrustedKey | null;
  /** Step 7, only after verification: the logical event. Throws IngressError malformed_payload / missing_event_id. */
  envelope(body: Buffer, req: RequestView, meta: SignatureMetadata): Envelope;
  /** Signs `body` as the provider would (tests, `send-sample`, benchmarks). */
  sign(body: Buffer, secret: string, opts: SignOptions): Record<string, string>;
  /** A realistic sample event (body + unsigned headers) for `send-sample`, demos and benchmarks. */
  sample(seq: string): SampleEvent;
}

export interface SampleEvent {
  readonly body: Buffer;
  /** Non-signature headers the provider sends (content type, ids, event names). */
  readonly headers: Record<string, string>;
  readonly signOptions: SignOptions;
}

export interface SignatureMetadata {
  /** Signed attempt time in Unix seconds, checked against the tolerance; null when none is signed. */
  readonly timestamp: number | null;
}

export interface SignOptions {
  /** Unix seconds to sign with (default: now). */
  readonly timestamp?: number;
  /** Logical/message id for providers that carry it in headers. */
  readonly id?: string;
  /** Event type for providers that carry it in headers. */
  readonly type?: string;
}

/** The verified logical event. Everything here comes from verified bytes or verified-request headers. */
export interface Envelope {
  /** Stable provider key for retry de-duplication (UNIQUE per provider + endpoint). */
  readonly eventId: string;
  readonly eventType: string;
  readonly objectId: string | null;
  /** Ordering evidence (a version, a sequence or an updated-at); arrival order is not business order. */
  readonly objectVersion: string | null;
  /** When the provider says the event happened, Unix ms. */
  readonly providerCreatedAtMs: number | null;
}

/** Read-only view of the request the adapter may consult. Header names are lowercase. */
export interface RequestView {
  /** The single value of `name`; undefined when absent. Throws ambiguous_signature when repeated. */
  single(name: string): string | undefined;
  /** All values of `name` in arrival order (empty when absent). */
  all(name: string): readonly string[];
  /** Media type of the body, lowercase, without parameters ('' when absent). */
  readonly mediaType: string;
  /** Request target as received (path + query). */
  readonly target: string;
}

/** Creates an adapter for one endpoint; `options` is that endpoint's `options` config block. */
export type AdapterFactory = (options: Record<string, unknown> | undefined, path: string) => ProviderAdapter;
