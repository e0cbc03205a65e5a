import { sha256 } from '../crypto/payload-cipher.js';
import { DAY } from './contract.js';
import { randomUUID } from 'node:crypto';
import { digestsEqual, isRetired } from '../crypto/hmac.js';
import { asObject, optEnum } from '../config/read.js';
import { IngressError } from '../errors.js';
import type { AdapterFactory, ProviderAdapter, RequestView, SignatureMetadata } from './contract.js';
import { envelope, parseJsonObject, pathValue, idString, requireEventId, requireEventType, isoTimestamp } from './json.js';
import { decodeStandardSecret, parseStandardSignature, signStandard, verifyStandard, type StandardSignature } from './standard-webhooks.js';

/**
 * GitLab webhooks, two schemes:
 *  - signing token (`whsec_<base64 of 32 bytes>`): Standard Webhooks v1 — `webhook-id` (= the
 *    `Idempotency-Key`), `webhook-timestamp`, `webhook-signature: v1,<b64>` = HMAC-SHA256 over
 *    `${id}.${ts}.${raw}`. Verified by the standard-webhooks pieces; id, time and body are signed.
 *  - secret token: `X-Gitlab-Token: <the configured token>` in clear. Nothing is signed — the body,
 *    the key and the time can all be changed by whoever sees one request — so it is compared in
 *    constant time (SHA-256 of both sides, equal length by construction) and proves only that the
 *    sender knows the token. Replay protection rests on the durable key alone.
 * `options.mode`: `auto` (default; each secret's format decides: `whsec_…` = signing token, else
 * plain token), `signing` (signature required; the token header is ignored) or `token`.
 * Key = `Idempotency-Key` / signed `webhook-id` (same across retries and Resend, GitLab ≥ 17.4);
 * without it, `X-Gitlab-Event-UUID` + SHA-256 of the body, because that UUID is shared by
 * recursive webhooks (so by different events) and alone could merge two events into one row.
 */
type Mode = 'auto' | 'signing' | 'token';

interface GitlabSignature extends SignatureMetadata {
  /** The Standard Webhooks headers, when this request is checked as signed. */
  readonly signed: StandardSignature | null;
  /** SHA-256 of the `X-Gitlab-Token` bytes, when the plain token is checked. */
  readonly token: Buffer | null;
}

const TOKEN_HEADER = 'x-gitlab-token';
const SIGNATURE_HEADER = 'webhook-signature';
const SIGNING_PREFIX = 'whsec_';
/**
 * Prepared plain tokens are `TOKEN_TAG ‖ SHA-256(token)` (52 bytes); prepared signing keys are the
 * 32 raw HMAC key bytes. The shapes never overlap, so a key is only ever checked by its own scheme
 * (a signing token sent in clear as X-Gitlab-Token must not verify, nor a token as an HMAC key).
 */
const TOKEN_TAG = Buffer.from('gitlab-x-token-sha256:', 'latin1');


function isTokenKey(key: Buffer): boolean {
  return key.length === TOKEN_TAG.length + 32 && key.subarray(0, TOKEN_TAG.length).equals(TOKEN_TAG);
}

function prepareToken(value: string): Buffer {
  if (value.length === 0) throw new Error('secret token is empty');
  // GitLab strips line breaks from the token it sends, and HTTP trims surrounding whitespace: such a token could never match.
  if (/[\r\n]/.test(value)) throw new Error('a GitLab secret token cannot contain line breaks (GitLab removes them before sending)');
  if (value.trim() !== value) throw new Error('a GitLab secret token cannot start or end with whitespace (HTTP trims it from the header)');
  return Buffer.concat([TOKEN_TAG, sha256(Buffer.from(value, 'utf8'))]);
}

function prepareSigningToken(value: string): Buffer {
  if (!value.startsWith(SIGNING_PREFIX)) throw new Error('a GitLab signing token is "whsec_<base64 of 32 bytes>"');
  const key = decodeStandardSecret(value);
  if (key.length !== 32) throw new Error('a GitLab signing token encodes exactly 32 bytes after "whsec_"');
  return key;
}

function tokenDigest(req: RequestView): Buffer | null {
  const v = req.single(TOKEN_HEADER);
  // Node decodes header bytes as latin1: that recovers the exact bytes GitLab sent (UTF-8 of the token).
  return v === undefined || v === '' ? null : sha256(Buffer.from(v, 'latin1'));
}

/** The logical key from the (unsigned) headers of a plain-token request. */
function headerKey(req: RequestView, body: Buffer): string {
  const idem = req.single('idempotency-key', 'ambiguous_header');
  if (idem !== undefined) return requireEventId(idem, 'Idempotency-Key header');
  const uuid = idString(req.single('x-gitlab-event-uuid', 'ambiguous_header'));
  if (uuid === null) throw new IngressError('missing_event_id', 'neither Idempotency-Key nor X-Gitlab-Event-UUID is present');
  return `uuid:${uuid}:${sha256(body).toString('hex')}`;
}

export const createGitlab: AdapterFactory = (options, path) => {
  const o = asObject(options ?? {}, path, ['mode']);
  const mode: Mode = optEnum(o, 'mode', path, ['auto', 'signing', 'token'] as const) ?? 'auto';

  const adapter: ProviderAdapter = {
    name: 'gitlab',
    contentTypes: ['application/json'],
    // GitLab sends payloads of up to 25 MB and does not retry on its own: a 413 would lose the event
    // (and repeated failures disable the hook).
    defaultMaxBodyBytes: 25 * 1024 * 1024,
    // Applies only to signed requests (a plain-token request carries no signed time). In token
    // mode nothing is signed: null, so check-config says so and a toleranceSeconds is refused
    // (it read "tolerance 300", as if stale replays were turned away).
    defaultToleranceSeconds: mode === 'token' ? null : 300,
    // manual "Resend request" keeps Idempotency-Key; the history it resends from is kept a few days [U], so a week.
    redeliveryWindowSeconds: 7 * DAY,
    prepareSecret(value) {
      if (mode === 'token') return prepareToken(value);
      if (value.startsWith('whpk_') || value.startsWith('whsk_')) {
        throw new Error('GitLab signs with HMAC ("whsec_…" signing token), never ed25519: "whpk_"/"whsk_" keys do not apply (set mode: token if this really is a plain secret token)');
      }
      if (mode === 'signing' || value.startsWith(SIGNING_PREFIX)) return prepareSigningToken(value);
      return prepareToken(value);
    },
    parseSignature(req): GitlabSignature {
      if (mode === 'signing' || (mode === 'auto' && req.all(SIGNATURE_HEADER).length > 0)) {
        const signed = parseStandardSignature(req, ['webhook-']);
        // auto: GitLab sends the token too when both are configured; an endpoint may trust either.
        return { timestamp: signed.timestamp, signed, token: mode === 'auto' ? tokenDigest(req) : null };
      }
      const token = tokenDigest(req);
      if (token === null) {
        throw new IngressError('missing_signature', mode === 'token' ? 'X-Gitlab-Token header is absent' : 'neither webhook-signature nor X-Gitlab-Token is present');
      }
      return { timestamp: null, signed: null, token };
    },
    verify(meta, body, keys, nowMs) {
      const m = meta as GitlabSignature;
      for (const k of keys) {
        if (isRetired(k, nowMs)) continue;
        if (isTokenKey(k.key)) {
          if (m.token !== null && digestsEqual(k.key.subarray(TOKEN_TAG.length), m.token)) return k;
        } else if (m.signed !== null && verifyStandard(m.signed, body, [k], nowMs)) {
          return k;
        }
      }
      return null;
    },
    envelope(body, req, meta) {
      const m = meta as GitlabSignature;
      const e = parseJsonObject(body);
      const attrs = e.object_attributes;
      // object_kind (most events), event_name (system, member and subgroup events), else the header.
      const type = idString(e.object_kind) ?? idString(e.event_name) ?? req.single('x-gitlab-event', 'ambiguous_header');
      return envelope({
        eventId: m.signed !== null ? requireEventId(m.signed.id, 'webhook-id header') : headerKey(req, body),
        eventType: requireEventType(type, 'object_kind'),
        objectId: idString(pathValue(attrs, 'id')) ?? idString(pathValue(e, 'project.id')) ?? idString(e.project_id),
        objectVersion: isoTimestamp(pathValue(attrs, 'updated_at')),
      });
    },
    sign(body, secret, opts): Record<string, string> {
      const id = opts.id ?? randomUUID();
      if (mode !== 'token' && secret.startsWith(SIGNING_PREFIX)) {
        const ts = opts.timestamp ?? Math.floor(Date.now() / 1000);
        return {
          'idempotency-key': id,
          'webhook-id': id,
          'webhook-timestamp': String(ts),
          [SIGNATURE_HEADER]: signStandard(prepareSigningToken(secret), id, ts, body),
        };
      }
      return { 'idempotency-key': id, [TOKEN_HEADER]: secret };
    },
    sample(seq) {
      const body = JSON.stringify({
        object_kind: 'push', event_name: 'push', before: '0'.repeat(40), after: 'da1560886d4f094c3e6c9ef40349f7d38b5d27d7',
        ref: 'refs/heads/main', user_username: 'jsmith', project_id: 15, project: { id: 15, path_with_namespace: 'mike/diaspora' },
        commits: [], total_commits_count: 0,
      });
      const uuid = `00000000-0000-4000-8000-${seq.padStart(12, '0').slice(-12)}`;
      return {
        body: Buffer.from(body),
        headers: { 'content-type': 'application/json', 'x-gitlab-event': 'Push Hook', 'x-gitlab-event-uuid': uuid },
        signOptions: { id: uuid },
      };
    },
  };
  return adapter;
};
