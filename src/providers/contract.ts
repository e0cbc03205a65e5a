import { asObject } from '../config/read.js';
import type { TrustedKey } from '../crypto/hmac.js';
import type { FileRead, SecretRef } from '../config/secrets.js';

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
  /**
   * How long the provider may send the same logical event again (automatic retries and its
   * documented manual redelivery), per its docs; null = unknown (generic schemes). Idempotency
   * records must be kept at least this long, or a late redelivery would be applied twice.
   */
  readonly redeliveryWindowSeconds: number | null;
  /**
   * True when this endpoint's requests carry no signature at all (Mollie classic): the endpoint
   * needs no secrets, and every event it accepts must be a `notice` (see Envelope) whose data
   * processing fetches from the provider instead of trusting.
   */
  readonly unsigned?: boolean;
  /**
   * True when parseSignature sets `transmissionId` (a signature that binds the body weakly:
   * PayPal): the serving process then also prunes the provider's old bindings
   * (http/transmission-pruner.ts).
   */
  readonly bindsTransmissions?: boolean;
  /** Rate limit applied when the endpoint configures none (for unsigned endpoints anyone can call). */
  readonly defaultRateLimit?: { readonly perSecond: number; readonly burst: number };
  /** Turns one configured secret string into key bytes. Throws Error(message) on a bad format. */
  prepareSecret(value: string): Buffer;
  /**
   * Secret references inside this endpoint's `options` (providers/option-secrets.ts): re-read by
   * the KeyRing with the endpoint's own secrets; a throw (SecretUnavailableError) takes the
   * endpoint offline until they read again.
   */
  readonly optionSecrets?: { reload(env: NodeJS.ProcessEnv, files?: ReadonlyMap<string, FileRead>): void; readonly refs: readonly SecretRef[] };
  /**
   * Optional, BEFORE verification: a provider's unsigned reachability probe (Slack's `ssl_check=1`,
   * which Slack sends without a signature), answered with a fixed empty reply and no row. It must
   * decide from the request's shape alone, act on and keep nothing, and return null for anything
   * else — which then goes through verification as usual.
   */
  probe?(req: RequestView, body: Buffer): Reply | null;
  /**
   * Step 4: signature metadata from HEADERS ONLY (the body is opaque bytes here).
   * Throws IngressError missing_signature / malformed_signature / ambiguous_signature.
   */
  parseSignature(req: RequestView): SignatureMetadata;
  /**
   * Step 5: the trusted key that verifies the raw bytes, or null. Constant-time comparisons only.
   * May be async when verification needs I/O (PayPal fetches its signing certificate); a
   * verifier that cannot decide (certificate unreachable) throws IngressError verification_unavailable.
   */
  verify(meta: SignatureMetadata, body: Buffer, keys: readonly TrustedKey[], nowMs: number): TrustedKey | null | Promise<TrustedKey | null>;
  /**
   * Optional, after verification and freshness, before `envelope`: a verified request that is a
   * protocol handshake rather than an event (Slack `url_verification`) gets this reply and no inbox row.
   */
  handshake?(body: Buffer, req: RequestView, meta: SignatureMetadata): Reply | null;
  /** Step 7, only after verification: the logical event. Throws IngressError malformed_payload / missing_event_id. */
  envelope(body: Buffer, req: RequestView, meta: SignatureMetadata): Envelope;
  /**
   * Optional, for deliveries that carry several events (Adyen, Twilio Event Streams): one Envelope each; each becomes its
   * own row and the answer waits for all. When present the pipeline calls it instead of `envelope`.
   * A throw (IngressError malformed_payload / missing_event_id) means nothing of the delivery is stored.
   */
  envelopes?(body: Buffer, req: RequestView, meta: SignatureMetadata): readonly Envelope[];
  /**
   * Optional: the success answer the provider expects (Adyen `[accepted]`, an empty ack for Slack
   * commands); null = the default JSON (`{"inbox_id","duplicate"}`, or `{"events":[…]}` for several).
   */
  acceptedReply?(results: readonly AcceptedEvent[], req: RequestView): Reply | null;
  /**
   * Optional: how a stored event's exact bytes become the handler's `event.payload` (default
   * `JSON.parse`). Form-encoded providers return their fields. Throws SyntaxError when unparsable.
   */
  parsePayload?(raw: Buffer): unknown;
  /**
   * Optional, for providers whose signatures live inside the body (Adyen): `body` with its
   * signatures filled in under `secret`. Tests and `send-sample` call it before `sign`.
   */
  signBody?(body: Buffer, secret: string): Buffer;
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
  /**
   * A signed id of this one transmission, set only by a provider whose signature binds the body
   * weakly (PayPal signs a CRC-32 of it, which anyone can match with other bytes). After
   * verification and freshness the pipeline binds it to the SHA-256 of the bytes in the store
   * (webhook_transmission, per provider); other bytes under an id already bound are refused (401
   * invalid_signature), across restarts and server processes.
   */
  readonly transmissionId?: string;
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
  /** The exact bytes stored for this event when a delivery holds several (a slice of the raw body); default: the whole body. */
  readonly payload?: Buffer;
  /** The secret version that verified THIS event, when a delivery's events are signed one by one (Adyen); default: verify's. */
  readonly secretVersion?: string;
  /**
   * An unsigned "go fetch" notice (Mollie classic): stored with verification `fetch-required`, and
   * a notice whose `coalesceKey` (the resource id) matches a row still PENDING is answered as that
   * row's duplicate; once that row is claimed, the next notice makes a new row (the state may have
   * changed since the worker fetched it). `eventId` must still be unique per notice.
   */
  readonly notice?: { readonly coalesceKey: string };
}

/** A non-default answer: body sent as-is with this content type. */
export interface Reply {
  readonly status: number;
  readonly contentType: string;
  readonly body: string;
}

/** One accepted (or already accepted) event of a delivery, for `acceptedReply`. */
export interface AcceptedEvent {
  readonly inboxId: string | null;
  readonly duplicate: boolean;
  readonly eventId: string;
  /** True when the endpoint's `events` filter dropped it (no row). */
  readonly ignored: boolean;
}

/** Read-only view of the request the adapter may consult. Header names are lowercase. */
export interface RequestView {
  /**
   * The single value of `name`; undefined when absent. Repeated, it throws `repeated` (400):
   * `ambiguous_signature` (the default) for what the signature covers or carries, which step 4
   * reads; `ambiguous_header` for unsigned metadata read later (GitHub's delivery id, say).
   */
  single(name: string, repeated?: 'ambiguous_signature' | 'ambiguous_header'): string | undefined;
  /** All values of `name` in arrival order (empty when absent). */
  all(name: string): readonly string[];
  /** Media type of the body, lowercase, without parameters ('' when absent). */
  readonly mediaType: string;
  /** Request target as received (path + query). */
  readonly target: string;
}

export const MINUTE = 60;
export const HOUR = 60 * MINUTE;
export const DAY = 24 * HOUR;

/**
 * Creates an adapter for one endpoint; `options` is that endpoint's `options` config block, `env`
 * the environment its `${env:}` references are read from (parseConfig's; default process.env).
 */
export type AdapterFactory = (options: Record<string, unknown> | undefined, path: string, env?: NodeJS.ProcessEnv) => ProviderAdapter;

/** The factory of an adapter that takes no options: any key under `options` is a config error. */
export const withoutOptions = (adapter: ProviderAdapter): AdapterFactory => (options, path) => {
  asObject(options ?? {}, path, []);
  return adapter;
};
