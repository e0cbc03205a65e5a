import type { DestinationConfig } from '../config/engine.js';
import { brokerRouteMatcher } from '../engine/routes.js';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Logger } from 'pino';
import type { EndpointConfig } from '../config/schema.js';
import { uuidv7 } from '../crypto/ids.js';
import type { KeyRing } from '../crypto/keyring.js';
import { sha256 } from '../crypto/payload-cipher.js';
import { IngressError, OUTCOMES, StorageUnavailableError, type Outcome, type Reason } from '../errors.js';
import type { IngressMetrics } from '../metrics/registry.js';
import type { GroupCommitter } from '../store/group-commit.js';
import type { AcceptRecord, AcceptResult, TransmissionBinding } from '../store/port.js';
import type { AcceptedEvent, Envelope } from '../providers/contract.js';
import { storableEnvelope } from '../providers/storable.js';
import type { PayloadCipher } from '../crypto/payload-cipher.js';
import { readBody, declaredContentLength, type BodyBudget } from './body.js';
import { eventMatcher } from './event-filter.js';
import { isFresh } from './freshness.js';
import { TokenBucket } from './rate-limit.js';
import type { FreshBodies } from '../engine/fresh-bodies.js';
import type { Offloaded, OffloadLane } from './offload.js';
import { requestSnapshot, viewOf } from './request-view.js';
import { isAwaitingContinue, rawAnswerOf, sendError, sendJson, sendReply } from './respond.js';

export interface IngressDeps {
  readonly keyring: KeyRing;
  readonly committer: GroupCommitter<AcceptRecord, AcceptResult>;
  /** Binds a weakly signed transmission's one body (SignatureMetadata.transmissionId): store.bindTransmissions, group-committed. */
  readonly binder: GroupCommitter<TransmissionBinding, boolean>;
  readonly metrics: IngressMetrics;
  readonly log: Logger;
  readonly budget: BodyBudget;
  readonly maxHeaders: number;
  readonly destinations: readonly DestinationConfig[];
  /** Parses and seals large bodies off the event loop (limits.offloadBodyBytes), and every body when busy (limits.offloadWhenInFlight); absent = never. */
  readonly lane?: OffloadLane;
  /** Accepted bodies for this process's workers (present when they run here). */
  readonly fresh?: FreshBodies;
}

interface EndpointRuntime {
  readonly config: EndpointConfig;
  readonly bucket: TokenBucket | undefined;
  readonly accepts: (type: string) => boolean;
  readonly relayed: (type: string) => boolean;
}

/** What one request ended as; logged as one JSON line (with the verified event, if any) and counted once. */
interface Result {
  status: number;
  outcome: Outcome;
  reason?: string;
  inboxId?: string;
}

/** The event identity, known only once the body is verified and parsed. */
type VerifiedEvent = { eventId?: string; eventType?: string };

/** The metrics and log label of HTTP refused before it named an endpoint. */
const UNPARSED = '(unparsed)';
/** The label of a request to an endpoint id not configured (never the id itself: unbounded, sender-chosen). */
const UNKNOWN = '(unknown)';

/** A Content-Encoding value that names a coding (not `identity`, not empty). */
const isCoded = (value: string): boolean => {
  const v = value.trim().toLowerCase();
  return v !== '' && v !== 'identity';
};

/** A Transfer-Encoding value with a coding besides `chunked` (`gzip, chunked`). */
const hasOtherTransferCoding = (value: string): boolean => value.split(',').some((c) => c.trim().toLowerCase() !== 'chunked');

/**
 * The ingress pipeline — the same for every provider, in this order:
 *  1 method/endpoint/rate limit  2 header and length bounds, content type  3 exact raw bytes
 *  4 signature metadata (headers)  5 verify (constant time, every trusted version)
 *  6 signed freshness  7 parse the verified body  8 durable accept, THEN answer.
 * Provider specifics live only in the adapter it calls.
 */
export class Ingress {
  private readonly endpoints = new Map<string, EndpointRuntime>();
  /** Webhook requests to a configured endpoint between arrival and answer (the offload lane's "busy"). */
  private inProgress = 0;

  constructor(endpoints: readonly EndpointConfig[], private readonly deps: IngressDeps) {
    for (const e of endpoints) {
      this.endpoints.set(e.id, {
        config: e,
        bucket: e.rateLimit ? new TokenBucket(e.rateLimit.perSecond, e.rateLimit.burst) : undefined,
        accepts: eventMatcher(e.events),
        relayed: brokerRouteMatcher(e, deps.destinations),
      });
      // Known at start, so at 0 from the start: a series that appears only at its first
      // increment hides that increment from increase()/rate() (the first 503s after a restart).
      for (const outcome of OUTCOMES) deps.metrics.requests.inc([e.id, outcome], 0);
      for (const s of e.secrets) deps.metrics.secretMatches.inc([e.id, s.version], 0);
    }
    // So are the requests that name no configured endpoint, with the outcomes they can have.
    deps.metrics.requests.inc([UNKNOWN, 'rejected'], 0);
    if (deps.lane) for (const why of ['large', 'busy'] as const) deps.metrics.offloaded.inc([why], 0);
    for (const outcome of ['malformed', 'rejected'] as const) deps.metrics.requests.inc([UNPARSED, outcome], 0);
  }

  /**
   * A request to /webhooks/<endpointId>. With `refusal` (a method other than POST) it is answered
   * with that and nothing else, but logged and counted like every other webhook request.
   */
  async handle(req: IncomingMessage, res: ServerResponse, endpointId: string, startedAt: number, refusal?: IngressError): Promise<void> {
    const ep = this.endpoints.get(endpointId);
    const label = ep ? endpointId : UNKNOWN;
    let result: Result;
    // Filled in once the body is verified and parsed, so a later failure (503) still logs which event.
    const verified: VerifiedEvent = {};
    try {
      if (refusal) throw refusal;
      if (!ep) throw new IngressError('unknown_endpoint', `no endpoint "${endpointId}"`);
      this.inProgress++;
      try {
        result = await this.pipeline(req, res, ep, startedAt, verified);
      } finally {
        this.inProgress--;
      }
    } catch (err) {
      let e = toIngressError(err, this.deps.log);
      // server.ts answered the connection itself (a request timeout's 408, bytes the parser refused),
      // which is what ended the body: that answer is what the sender got (sendError finds it sent).
      const raw = rawAnswerOf(req);
      if (raw !== undefined) e = new IngressError(raw);
      sendError(req, res, e);
      result = { status: e.status, outcome: e.outcome, reason: e.reason };
    }
    const seconds = (performance.now() - startedAt) / 1000;
    this.deps.metrics.requests.inc([label, result.outcome]);
    // By outcome too: fast refusals (a flood of bad signatures) must not hide slow accepts in the quantiles.
    this.deps.metrics.ackLatency.observe(seconds, [label, result.outcome]);
    this.deps.log.info({
      endpoint: label,
      provider: ep?.config.provider,
      event_id: verified.eventId,
      event_type: verified.eventType,
      inbox_id: result.inboxId,
      outcome: result.outcome,
      reason: result.reason,
      status: result.status,
      latency_ms: Math.round(seconds * 1e5) / 100,
    });
  }

  /**
   * HTTP that never became a request (malformed, an oversized header block, too slow to arrive):
   * Node's parser refused it, so there is no endpoint; logged and counted as `(unparsed)`. Also a
   * request without exactly one Host, or not HTTP/1.x, on a path other than /webhooks/… (bad_host,
   * http_version_not_supported): as malformed, and it names no endpoint either.
   */
  refusedConnection(reason: Reason): void {
    const e = new IngressError(reason);
    this.deps.metrics.requests.inc([UNPARSED, e.outcome]);
    this.deps.log.info({ endpoint: UNPARSED, outcome: e.outcome, reason, status: e.status });
  }

  private async pipeline(
    req: IncomingMessage,
    res: ServerResponse,
    ep: EndpointRuntime,
    startedAt: number,
    verified: VerifiedEvent,
  ): Promise<Result> {
    const { config } = ep;
    const adapter = config.adapter;

    // 1. Rate limit (the cheapest refusal first).
    if (ep.bucket) {
      const t = ep.bucket.take();
      if (!t.ok) throw new IngressError('rate_limited', undefined, t.retryAfterSeconds);
    }
    // 2. Bounds before reading any body byte.
    if (req.rawHeaders.length / 2 > this.deps.maxHeaders) throw new IngressError('too_many_headers', `more than ${this.deps.maxHeaders} headers`);
    const snapshot = requestSnapshot(req);
    const view = viewOf(snapshot);
    // Node keeps the first of repeated Content-Types; which one the sender meant is unknowable.
    const types = snapshot.headers['content-type'];
    if (types !== undefined && types.length > 1) throw new IngressError('unsupported_media_type', `Content-Type appears ${types.length} times`);
    if (!adapter.contentTypes.includes(view.mediaType)) {
      throw new IngressError('unsupported_media_type', `expected ${adapter.contentTypes.join(' or ')}`);
    }
    // Providers sign the bytes they send uncompressed. A compressed body would only fail its
    // signature (a misleading 401); decompressing first would let a small request grow without bound.
    const codings = snapshot.headers['content-encoding'];
    if (codings !== undefined && codings.some(isCoded)) {
      throw new IngressError('unsupported_content_encoding', 'bodies are accepted as sent, without Content-Encoding');
    }
    // Node decodes only `chunked` and passes any other transfer coding's bytes on as the body
    // (RFC 9112 §6.1: a coding the server does not understand gets 501).
    const transfer = snapshot.headers['transfer-encoding'];
    if (transfer !== undefined && transfer.some(hasOtherTransferCoding)) {
      throw new IngressError('unsupported_transfer_encoding', 'only Transfer-Encoding: chunked is understood');
    }
    const declared = declaredContentLength(req);
    if (declared !== null && declared > config.maxBodyBytes) throw new IngressError('payload_too_large', `Content-Length exceeds ${config.maxBodyBytes} bytes`);
    const keys = this.deps.keyring.keysFor(config.id);
    const cipher = this.deps.keyring.cipher;
    if (!keys || !cipher) throw new IngressError('secrets_unavailable');

    // 3. The exact raw bytes, bounded. A sender waiting for 100 Continue is invited only now.
    let invited: Promise<void> | undefined;
    if (isAwaitingContinue(res)) {
      // A body that could not be held now is not invited (readBody would refuse it at once).
      if (declared !== null && !this.deps.budget.hasRoomForBody(declared)) throw new IngressError('overloaded', 'too many body bytes in flight');
      // Behind an answer still owed on the connection, the 100 is written only after it.
      invited = new Promise((resolve) => res.writeContinue(() => resolve()));
    }
    const { body, reserved } = await readBody(req, config.maxBodyBytes, this.deps.budget, declared, invited);
    try {
      // An unsigned reachability probe (Slack ssl_check) gets its fixed empty answer; nothing is kept.
      const probe = adapter.probe?.(view, body);
      if (probe) {
        sendReply(res, probe);
        return { status: probe.status, outcome: 'handshake', reason: 'probe' };
      }
      // 4. Signature metadata from headers only.
      const meta = adapter.parseSignature(view);
      // 5. Verify the raw bytes against every trusted, non-retired secret version.
      const nowMs = Date.now();
      const verdict = adapter.verify(meta, body, keys, nowMs);
      const matched = verdict instanceof Promise ? await verdict : verdict;
      if (!matched) throw new IngressError('invalid_signature');
      // 6. Signed freshness, both directions (a future timestamp is as suspect as an old one).
      if (meta.timestamp !== null && config.toleranceSeconds !== null && !isFresh(meta.timestamp, nowMs, config.toleranceSeconds)) {
        throw new IngressError('stale_timestamp', `signed timestamp is outside ±${config.toleranceSeconds} s`);
      }
      // A transmission whose signature binds the body weakly (PayPal's CRC-32) carries one body:
      // other bytes under an id already bound are a captured request's forgery. Before any parse.
      // The body's SHA-256 when the binding computed it: its stored payload_hash then reuses it.
      let bodyHash: Buffer | undefined;
      if (meta.transmissionId !== undefined) {
        bodyHash = sha256(body);
        const binding = { provider: config.provider, endpointId: config.id, transmissionId: meta.transmissionId, payloadHash: bodyHash, receivedAtMs: nowMs };
        if (!(await this.deps.binder.submit(binding))) throw new IngressError('invalid_signature', 'this transmission was already received with other bytes');
      }
      this.deps.metrics.secretMatches.inc([config.id, matched.version]);
      // A verified protocol handshake (Slack url_verification) is answered without an inbox row.
      const handshake = adapter.handshake?.(body, view, meta);
      if (handshake) {
        sendReply(res, handshake);
        return { status: handshake.status, outcome: 'handshake' };
      }
      // 7. Only now parse the verified body: one or more logical events. A large one, and any one
      // while many requests have been in progress for a while, is parsed and sealed on the helper
      // thread (after which `body` may be empty: its memory moved there).
      const lane = this.deps.lane;
      const why = lane?.applies(adapter, body, this.inProgress);
      const sent = why ? lane!.run(config, snapshot, meta, body, cipher) : null;
      if (sent) this.deps.metrics.offloaded.inc([why!]);
      const offloaded = sent ? await sent : undefined;
      // An offloaded envelope was made storable on the helper thread, where its body is.
      const envelopes: readonly Envelope[] = offloaded ? [offloaded.envelope]
        : (adapter.envelopes ? adapter.envelopes(body, view, meta) : [adapter.envelope(body, view, meta)]).map((e) => storableEnvelope(e, body));
      if (envelopes.length === 0) throw new IngressError('malformed_payload', 'the delivery holds no event');
      verified.eventId = envelopes.length === 1 ? envelopes[0]!.eventId : `${envelopes[0]!.eventId} (+${envelopes.length - 1})`;
      verified.eventType = envelopes[0]!.eventType;
      // 8. Durably accept (group commit), then answer.
      // The request's start on the wall clock, as freshness and the workers' "due" read time:
      // timeOrigin + startedAt kept the clock of the process's start, so a server started before
      // its host's clock was stepped stored every row (and its next_attempt_at) that far off.
      const receivedAtMs = Math.round(Date.now() - (performance.now() - startedAt));
      const single = envelopes.length === 1 && !adapter.acceptedReply ? envelopes[0]! : null;
      if (single) {
        // The common case, without the bookkeeping of a multi-event delivery.
        if (!ep.accepts(single.eventType)) {
          sendJson(res, 200, IGNORED_REPLY);
          return { status: 200, outcome: 'unsupported', reason: 'unsupported_event_type' };
        }
        const rec = this.record(config, ep, single, body, matched.version, receivedAtMs, cipher, offloaded, bodyHash);
        // Kept before the commit: the workers may claim the row before this continuation runs.
        const fresh = offloaded || single.payload ? undefined : this.deps.fresh;
        fresh?.put(rec.inboxId, config.provider, config.id, single.eventType, body);
        let r: AcceptResult | undefined;
        try {
          r = await this.deps.committer.submit(rec);
        } finally {
          if (!r || r.duplicate) fresh?.discard(rec.inboxId); // no row of its own: nothing to hand over
        }
        sendJson(res, 200, acceptedJson(r.inboxId, r.duplicate));
        return { status: 200, outcome: r.duplicate ? 'duplicate' : 'accepted', inboxId: r.inboxId };
      }
      // Several events (the events of one delivery usually share a group-commit batch); all must commit before the answer.
      const wanted = envelopes.filter((e) => ep.accepts(e.eventType));
      const results = await Promise.all(wanted.map((env) => this.deps.committer.submit(this.record(config, ep, env, body, matched.version, receivedAtMs, cipher, undefined, bodyHash))));
      const byEnvelope = new Map(wanted.map((e, i) => [e, results[i]!]));
      const accepted: AcceptedEvent[] = envelopes.map((e) => {
        const r = byEnvelope.get(e);
        return { eventId: e.eventId, inboxId: r?.inboxId ?? null, duplicate: r?.duplicate ?? false, ignored: r === undefined };
      });
      const reply = adapter.acceptedReply?.(accepted, view);
      if (reply) sendReply(res, reply);
      else sendJson(res, 200, defaultReply(accepted));
      if (results.length === 0) return { status: 200, outcome: 'unsupported', reason: 'unsupported_event_type' };
      return { status: 200, outcome: results.every((r) => r.duplicate) ? 'duplicate' : 'accepted', inboxId: results[0]!.inboxId };
    } finally {
      this.deps.budget.release(reserved);
    }
  }

  /** The row(s) to write for one verified event: its own ids, its exact bytes sealed under its key. */
  private record(
    config: EndpointConfig, ep: EndpointRuntime, env: Envelope, body: Buffer, secretVersion: string, receivedAtMs: number, cipher: PayloadCipher, offloaded?: Offloaded,
    /** sha256(body), if already computed. */
    bodyHash?: Buffer,
  ): AcceptRecord {
    if (config.adapter.unsigned && !env.notice) throw new Error(`adapter ${config.provider} is unsigned but produced a non-notice event`);
    const binding = { provider: config.provider, endpointId: config.id, providerEventId: env.eventId };
    const bytes = env.payload ?? body;
    return {
      inboxId: uuidv7(receivedAtMs),
      payloadId: uuidv7(receivedAtMs),
      outboxId: uuidv7(receivedAtMs),
      ...binding,
      eventType: env.eventType,
      objectId: env.objectId,
      objectVersion: env.objectVersion,
      providerCreatedAtMs: env.providerCreatedAtMs,
      receivedAtMs,
      payloadHash: offloaded?.payloadHash ?? (bytes === body && bodyHash ? bodyHash : sha256(bytes)),
      matchedSecretVersion: env.secretVersion ?? secretVersion,
      payload: offloaded?.payload ?? cipher.seal(bytes, binding),
      topic: `${config.provider}.${env.eventType}`,
      relay: ep.relayed(env.eventType),
      coalesceKey: env.notice?.coalesceKey,
    };
  }
}

const IGNORED_REPLY = `{"inbox_id":null,"duplicate":false,"ignored":"unsupported_event_type"}`;
const acceptedJson = (inboxId: string | null, duplicate: boolean) => `{"inbox_id":"${inboxId}","duplicate":${duplicate}}`;

/** `{"inbox_id","duplicate"}` for one event; `{"events": [{"event_id","inbox_id","duplicate"[,"ignored"]}…]}` for several. */
function defaultReply(events: readonly AcceptedEvent[]): string {
  if (events.length === 1) {
    const e = events[0]!;
    return e.ignored ? IGNORED_REPLY : acceptedJson(e.inboxId, e.duplicate);
  }
  return JSON.stringify({
    events: events.map((e) => (e.ignored
      ? { event_id: e.eventId, inbox_id: null, duplicate: false, ignored: 'unsupported_event_type' }
      : { event_id: e.eventId, inbox_id: e.inboxId, duplicate: e.duplicate })),
  });
}

function toIngressError(err: unknown, log: Logger): IngressError {
  if (err instanceof IngressError) return err;
  if (err instanceof StorageUnavailableError) {
    log.warn({ err: err.message }, 'storage unavailable');
    return new IngressError('storage_unavailable');
  }
  // An unexpected bug must never turn into a 2xx: answer 503 so the provider retries.
  log.error({ err: err instanceof Error ? err.stack : String(err) }, 'unexpected ingress error');
  return new IngressError('storage_unavailable');
}
