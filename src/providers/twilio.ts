import { sha256 } from '../crypto/payload-cipher.js';
import { HOUR } from './contract.js';
import { parse as parseQueryString, stringify as stringifyQueryString } from 'node:querystring';
import { hmac, matchHmac, digestsEqual, decodeBase64, decodeHex } from '../crypto/hmac.js';
import { ConfigError, IngressError } from '../errors.js';
import { asObject, child, optStringArray, reqString, type Obj } from '../config/read.js';
import type { AdapterFactory, Envelope, ProviderAdapter, RequestView, SignatureMetadata } from './contract.js';
import { isJsonBytes } from './form.js';
import { opensArray, topLevelArray } from './json-slices.js';
import { envelope, isJsonObject, parseJsonObject, idString, requireEventId, requireEventType, toEpochMs } from './json.js';

/**
 * Twilio: `X-Twilio-Signature: <base64>` = HMAC-SHA1(auth token as UTF-8, signed string).
 *
 * - Form bodies: signed string = the URL Twilio called + every POST parameter, sorted by name,
 *   as `name + value` with the DECODED values (`+` → space, %XX → UTF-8), repeated values
 *   de-duplicated and sorted (twilio-node `getExpectedTwilioSignature`). The bytes are not
 *   signed, the parameters are: we parse the form only to rebuild that string.
 * - JSON bodies: the URL carries `bodySHA256=<hex>`; the signature covers the URL alone and
 *   SHA-256(raw body) must equal that value.
 *   Event Streams webhook sinks send JSON too: an array of CloudEvents, one row each (cloudEvents).
 * - The URL is the endpoint's configured `publicUrl` (behind a proxy the server sees another
 *   one) followed by the query of the request target exactly as received: Twilio signs the URL it
 *   requested, query included, usually in the spelling it sent (re-encoding it is the bug of
 *   twilio-node #1059/#1183), so that spelling is tried first. Like twilio-node we accept the URL
 *   with and without its port (`:443`/`:80` added when absent, any port removed when present):
 *   Twilio strips the port for some requests and not for others (twilio-node #411, twilio-python
 *   #402); and, as its fallback does, the re-encoded spellings (`'` ↔ `%27`), which some of
 *   Twilio's back ends sign instead (signedUrls).
 * - `X-Twilio-Webhooks-Signature-Settings: key=…,algorithm=HMAC_SHA256` (webhook SharedKeys,
 *   public beta) switches the hash to SHA-256; the signed string is unchanged.
 * - Nothing time-related is signed. There is no event id either: the key is the resource SID +
 *   its status (`SM…:delivered`), or the endpoint's `keyFields`.
 * - The signature has no delimiters between names and values, so a signed body can be re-split
 *   (`MessageStatus=se&ntTo=+1…` signs like `MessageStatus=sent&To=+1…`). The default key
 *   fields are checked so that no re-split can produce another key: SIDs have their fixed
 *   format, statuses are lowercase words, the parameter after a status may not begin with a
 *   character a status could continue with, and a SID + status smuggled out of a free-text value
 *   (an SMS `Body`) next to the real resource is refused (see RULES).
 */
const HEADER = 'x-twilio-signature';
const SETTINGS_HEADER = 'x-twilio-webhooks-signature-settings';
const FORM = 'application/x-www-form-urlencoded';
const JSON_TYPE = 'application/json';
const DIGEST_BYTES: Readonly<Record<'sha1' | 'sha256', number>> = { sha1: 20, sha256: 32 };
const MAX_KEY_FIELDS = 8;

interface TwilioSignature extends SignatureMetadata {
  readonly algorithm: 'sha1' | 'sha256';
  readonly digest: Buffer;
  /** The candidate signed URLs (publicUrl + the received query, its port and spelling variants: signedUrls). */
  readonly urls: readonly string[];
  /** SHA-256 the body must have (JSON deliveries), or null: the form parameters are signed. */
  readonly bodySha256: Buffer | null;
}

export type FormParams = ReadonlyMap<string, readonly string[]>;

/**
 * Form body → parameters as twilio-node's users hand them to `validateRequest` (Express
 * `urlencoded({extended: false})` = `querystring.parse`): `+` is a space, %XX are UTF-8 bytes
 * (invalid sequences → U+FFFD), a name without `=` has the value ''. No parameter limit.
 */
export function formParams(body: Buffer): Map<string, string[]> {
  const parsed = parseQueryString(body.toString('utf8'), '&', '=', { maxKeys: 0 });
  const params = new Map<string, string[]>();
  for (const [name, v] of Object.entries(parsed)) params.set(name, Array.isArray(v) ? v : [v ?? '']);
  return params;
}

/** The parameter part of the signed string: names sorted, each value (de-duplicated, sorted) as `name + value`. */
export function signedParams(params: FormParams): string {
  let s = '';
  for (const name of [...params.keys()].sort()) {
    for (const v of [...new Set(params.get(name))].sort()) s += name + v;
  }
  return s;
}

/** Base64 HMAC of `url` + the sorted parameters (`params` null = a JSON delivery: the URL alone). */
export function twilioSignature(token: string | Buffer, url: string, params: FormParams | null, algorithm: 'sha1' | 'sha256' = 'sha1'): string {
  const key = typeof token === 'string' ? Buffer.from(token, 'utf8') : token;
  return hmac(algorithm, key, [url, params ? signedParams(params) : '']).toString('base64');
}

export const sha256Hex = (body: Buffer): string => sha256(body).toString('hex');

/** `url` without its port, and with the scheme's default port when it has none (twilio-node removePort/addPort). */
export function portVariants(url: string): string[] {
  const m = /^([a-z][a-z0-9+.-]*:\/\/)([^/?#]*)/i.exec(url);
  if (!m) return [url];
  const [prefix, scheme, authority] = m as unknown as [string, string, string];
  const at = authority.lastIndexOf('@');
  const userInfo = authority.slice(0, at + 1);
  const hostPort = authority.slice(at + 1);
  const colon = hostPort.indexOf(':', hostPort.lastIndexOf(']') + 1);
  const host = colon < 0 ? hostPort : hostPort.slice(0, colon);
  const rest = url.slice(prefix.length);
  const without = scheme + userInfo + host + rest;
  const withPort = colon >= 0 ? url : scheme + userInfo + host + (scheme.toLowerCase() === 'https://' ? ':443' : ':80') + rest;
  return without === withPort ? [without] : [without, withPort];
}

/**
 * The URLs a signature may cover, in twilio-node's order (`validateRequest`): the URL as received
 * (`publicUrl` + the query exactly as sent) without and with its port, then its WHATWG `new URL()`
 * spelling and that spelling's Node `querystring` re-encoding, each without and with the port.
 * Twilio's back ends do not agree on one spelling: some sign `'` raw and send `%27`, or the reverse
 * (twilio-node #1059, #1183, its spec "escaped / unescaped single quote"); a valid request must
 * not be refused for it. Each spelling decodes to the values received, so none says anything else.
 */
export function signedUrls(publicUrl: string, query: string): string[] {
  const received = publicUrl + query;
  const urls = portVariants(received);
  let normalized: string;
  try {
    normalized = new URL(received).toString();
  } catch {
    return urls;
  }
  const variants = portVariants(normalized);
  for (const u of [...variants, ...variants.map(withLegacyQuerystring)]) if (!urls.includes(u)) urls.push(u);
  return urls;
}

/**
 * twilio-node's `withLegacyQuerystring`: the query parsed and re-encoded by Node's `querystring`.
 * No key limit: the SDK's default (1,000) drops the rest, and a `bodySHA256` dropped from the spelling
 * the signature covers would still be the one read from the request.
 */
function withLegacyQuerystring(url: string): string {
  const q = url.indexOf('?');
  if (q < 0 || q === url.length - 1) return url;
  return `${url.slice(0, q)}?${stringifyQueryString(parseQueryString(url.slice(q + 1), '&', '=', { maxKeys: 0 }))}`;
}

/** The algorithm named by X-Twilio-Webhooks-Signature-Settings (absent/no `algorithm=` → HMAC_SHA1). */
function signatureAlgorithm(settings: string | undefined): 'sha1' | 'sha256' {
  let named: string | undefined;
  for (const part of (settings ?? '').split(',')) {
    const eq = part.indexOf('=');
    if (eq < 0 || part.slice(0, eq).trim() !== 'algorithm') continue;
    if (named !== undefined) throw new IngressError('ambiguous_signature', `${SETTINGS_HEADER} names two algorithms`);
    named = part.slice(eq + 1).trim();
  }
  if (named === undefined || named === '' || named.toUpperCase() === 'HMAC_SHA1') return 'sha1';
  if (named.toUpperCase() === 'HMAC_SHA256') return 'sha256';
  throw new IngressError('malformed_signature', `${SETTINGS_HEADER} names an unsupported algorithm`);
}

// ── configuration ─────────────────────────────────────────────────────────────────────────────

function parsePublicUrl(o: Obj, path: string): string {
  const p = child(path, 'publicUrl');
  const raw = reqString(o, 'publicUrl', path);
  const example = 'e.g. https://hooks.example.com/twilio';
  if (/[\s\x00-\x1f\x7f]/.test(raw)) throw new ConfigError(p, 'must not contain whitespace or control characters');
  if (!/^https?:\/\/[^/?#]+/i.test(raw)) throw new ConfigError(p, `must be an absolute http(s) URL, ${example}`);
  if (raw.includes('?')) throw new ConfigError(p, 'must not contain a query: the query of each request (as Twilio sent it) is appended when verifying');
  if (raw.includes('#')) throw new ConfigError(p, 'must not contain a fragment: connection overrides (#rc=…) are never sent; keep them only in the URL configured at Twilio');
  let u: URL;
  try {
    u = new URL(raw);
  } catch {
    throw new ConfigError(p, `must be an absolute http(s) URL, ${example}`);
  }
  if (u.username !== '' || u.password !== '') throw new ConfigError(p, 'must not contain credentials (user:password@): Twilio signs the URL without them');
  return raw;
}

function parseKeyFields(o: Obj, path: string): string[] | undefined {
  const fields = optStringArray(o, 'keyFields', path);
  if (fields === undefined) return undefined;
  const p = child(path, 'keyFields');
  if (fields.length === 0 || fields.length > MAX_KEY_FIELDS) throw new ConfigError(p, `must list 1 to ${MAX_KEY_FIELDS} parameter names`);
  fields.forEach((f, i) => {
    if (fields.indexOf(f) !== i) throw new ConfigError(child(p, i), `"${f}" is listed twice`);
  });
  return fields;
}

// ── the logical event ─────────────────────────────────────────────────────────────────────────

/**
 * Default keys. A rule applies when its SID and one of its status fields are present; the first
 * applicable rule (most specific resource first) gives the key. Another applicable rule is only
 * allowed where Twilio really sends both (a recording callback names its call): otherwise the
 * body is refused, since a re-split signed body could smuggle a SID + status out of a free-text
 * value (an SMS `Body`) and change which rule applies.
 */
interface KeyRule {
  readonly resource: string;
  readonly sid: string;
  /** Status fields, first present wins (incoming messages carry only SmsStatus). */
  readonly status: readonly string[];
  /** More fields the key needs (a conference sends one event name for every participant). */
  readonly extra?: readonly string[];
  /** Resources whose SID + status may legitimately appear in the same callback. */
  readonly companions?: readonly string[];
}

const RULES: readonly KeyRule[] = [
  { resource: 'transcription', sid: 'TranscriptionSid', status: ['TranscriptionStatus'], companions: ['recording', 'call'] },
  { resource: 'recording', sid: 'RecordingSid', status: ['RecordingStatus'], companions: ['conference', 'call'] },
  { resource: 'conference', sid: 'ConferenceSid', status: ['StatusCallbackEvent'], extra: ['SequenceNumber'], companions: ['call'] },
  { resource: 'message', sid: 'MessageSid', status: ['MessageStatus', 'SmsStatus'] },
  { resource: 'call', sid: 'CallSid', status: ['CallStatus'] },
];

const SID_RE = /^[A-Z]{2}[0-9a-fA-F]{32}$/;
const STATUS_RE = /^[a-z][a-z0-9_-]{0,63}$/;
const SEQUENCE_RE = /^\d{1,15}$/;
/** A name starting like this could be the tail of a status or sequence number moved across the boundary. */
const CONTINUES_VALUE_RE = /^[a-z0-9_-]/;

/** Field access over a verified body, the same view the signature was computed on. '' counts as absent. */
interface Fields {
  get(name: string): string | undefined;
  /** The parameter name after `name` in signature order; undefined for JSON bodies (the bytes are hashed). */
  next(name: string): string | undefined;
}

function formFields(body: Buffer): Fields {
  const params = formParams(body);
  const names = [...params.keys()].sort();
  return {
    get(name) {
      const values = params.get(name);
      if (values === undefined) return undefined;
      if (new Set(values).size > 1) throw new IngressError('malformed_payload', `parameter ${name} appears with different values`);
      return values[0] === '' ? undefined : values[0];
    },
    next: (name) => names[names.indexOf(name) + 1],
  };
}

function jsonFields(body: Buffer): Fields {
  const o = parseJsonObject(body);
  return { get: (name) => idString(Object.hasOwn(o, name) ? o[name] : undefined) ?? undefined, next: () => undefined };
}

const escapeKeyPart = (v: string) => v.replaceAll('%', '%25').replaceAll(':', '%3A');

/** `MessageSid` → `message`, `ConferenceParticipantSid` → `conference-participant`. */
const resourceName = (field: string) => (field.replace(/Sid$/, '') || field).replace(/([a-z0-9])([A-Z])/g, '$1-$2').toLowerCase();

function defaultEnvelope(f: Fields): Envelope {
  const applicable = RULES.filter((r) => f.get(r.sid) !== undefined && r.status.some((s) => f.get(s) !== undefined));
  const rule = applicable[0];
  if (!rule) {
    const sid = RULES.find((r) => f.get(r.sid) !== undefined);
    if (sid) throw new IngressError('missing_event_id', `${sid.sid} without ${sid.status.join(' or ')}: set options.keyFields for this webhook`);
    throw new IngressError('missing_event_id', `no ${RULES.map((r) => r.sid).join(', ')} parameter: set options.keyFields for this webhook`);
  }
  for (const other of applicable.slice(1)) {
    if (!rule.companions?.includes(other.resource)) throw new IngressError('malformed_payload', `carries both ${rule.sid} and ${other.sid} with a status`);
  }
  const sid = f.get(rule.sid)!;
  if (!SID_RE.test(sid)) throw new IngressError('malformed_payload', `${rule.sid} is not a Twilio SID`);
  const statusField = rule.status.find((s) => f.get(s) !== undefined)!;
  const status = f.get(statusField)!;
  if (!STATUS_RE.test(status)) throw new IngressError('malformed_payload', `${statusField} is not a status word`);
  const parts = [sid, status];
  const guarded = [statusField];
  for (const extra of rule.extra ?? []) {
    const v = f.get(extra);
    if (v === undefined) throw new IngressError('missing_event_id', `${rule.sid} without ${extra}`);
    if (!SEQUENCE_RE.test(v)) throw new IngressError('malformed_payload', `${extra} is not a decimal number`);
    parts.push(v);
    guarded.push(extra);
  }
  for (const name of guarded) {
    const next = f.next(name);
    if (next !== undefined && CONTINUES_VALUE_RE.test(next)) throw new IngressError('malformed_payload', `the parameter boundary after ${name} is ambiguous`);
  }
  return envelope({
    eventId: parts.join(':'),
    eventType: `${rule.resource}.${status}`,
    objectId: sid,
    ...ordering(f),
  });
}

function configuredEnvelope(f: Fields, keyFields: readonly string[]): Envelope {
  const values = keyFields.map((name) => {
    const v = f.get(name);
    if (v === undefined) throw new IngressError('missing_event_id', `key field ${name} is missing or empty`);
    return v;
  });
  return envelope({
    eventId: requireEventId(values.map(escapeKeyPart).join(':'), 'the key fields'),
    eventType: requireEventType(values.length > 1 ? `${resourceName(keyFields[0]!)}.${values[1]!}` : resourceName(keyFields[0]!), 'the key fields'),
    objectId: idString(values[0]),
    ...ordering(f),
  });
}

/** Voice and conference callbacks number their events and stamp them (RFC 2822 `Timestamp`). */
function ordering(f: Fields): Pick<Envelope, 'objectVersion' | 'providerCreatedAtMs'> {
  const seq = f.get('SequenceNumber');
  return {
    objectVersion: seq !== undefined && SEQUENCE_RE.test(seq) ? seq : null,
    providerCreatedAtMs: toEpochMs(f.get('Timestamp')),
  };
}

// ── Event Streams (webhook sinks) ────────────────────────────────────────────────────────────

/**
 * An Event Streams delivery: a JSON array of CloudEvents, signed as any JSON webhook (the URL
 * with `bodySHA256`, the bytes hashed). Each element is its own event and row, stored as its exact
 * bytes: key = the CloudEvent `id` (a redelivered batch carries the same ids), type = its `type`
 * (`com.twilio.messaging.message.delivered`), time = its `time`. Null for any other body.
 */
function cloudEvents(body: Buffer): Envelope[] | null {
  if (!opensArray(body)) return null;
  let doc: unknown[];
  try {
    doc = JSON.parse(body.toString('utf8')) as unknown[]; // it opens with "[": an array, if JSON
  } catch {
    throw new IngressError('malformed_payload', 'body is not valid JSON');
  }
  const ranges = topLevelArray(body);
  if (ranges === null || ranges.length !== doc.length) throw new IngressError('malformed_payload', 'the array of events could not be sliced');
  return doc.map((e: unknown, i) => {
    if (!isJsonObject(e)) throw new IngressError('malformed_payload', `[${i}] is not a CloudEvent object`);
    const r = ranges[i]!;
    return envelope({
      eventId: requireEventId(e.id, `[${i}].id`),
      eventType: requireEventType(e.type, `[${i}].type`),
      providerCreatedAtMs: toEpochMs(e.time),
      payload: body.subarray(r.start, r.end),
    });
  });
}

// ── the adapter ───────────────────────────────────────────────────────────────────────────────

export const createTwilio: AdapterFactory = (options, path) => {
  const o = asObject(options ?? {}, path, ['publicUrl', 'keyFields']);
  const publicUrl = parsePublicUrl(o, path);
  const keyFields = parseKeyFields(o, path);

  const adapter: ProviderAdapter = {
    name: 'twilio',
    contentTypes: [FORM, JSON_TYPE],
    defaultToleranceSeconds: null,
    // Callbacks: retries only within the request's own ≤ 15 s window (#rc/#tt overrides). Event Streams
    // retries an undelivered event, same id, for up to four hours.
    redeliveryWindowSeconds: 4 * HOUR,
    prepareSecret(value) {
      if (value.length === 0) throw new Error('the auth token is empty');
      if (value.trim() !== value) throw new Error('the auth token has leading or trailing whitespace');
      if (/^AC[0-9a-fA-F]{32}$/.test(value)) throw new Error('this is an Account SID; the secret is the Auth Token (or a webhook SharedKey secret)');
      return Buffer.from(value, 'utf8');
    },
    parseSignature(req: RequestView): TwilioSignature {
      const header = req.single(HEADER);
      if (header === undefined || header === '') throw new IngressError('missing_signature', `${HEADER} header is absent`);
      const algorithm = signatureAlgorithm(req.single(SETTINGS_HEADER));
      const digest = decodeBase64(header);
      if (digest === null || digest.length !== DIGEST_BYTES[algorithm]) throw new IngressError('malformed_signature', `${HEADER} is not a base64 HMAC-${algorithm.toUpperCase()} digest`);
      const q = req.target.indexOf('?');
      const query = q < 0 ? '' : req.target.slice(q);
      const hashes = new URLSearchParams(query).getAll('bodySHA256');
      if (hashes.length > 1) throw new IngressError('ambiguous_signature', 'the URL carries bodySHA256 more than once');
      let bodySha256: Buffer | null = null;
      if (hashes.length === 1) {
        bodySha256 = decodeHex(hashes[0]!);
        if (bodySha256 === null || bodySha256.length !== 32) throw new IngressError('malformed_signature', 'bodySHA256 in the URL is not a 64-digit hex SHA-256');
      } else if (req.mediaType === JSON_TYPE) {
        throw new IngressError('malformed_signature', 'an application/json delivery carries no bodySHA256 in its URL');
      }
      return { timestamp: null, algorithm, digest, urls: signedUrls(publicUrl, query), bodySha256 };
    },
    verify(meta, body, keys, nowMs) {
      const m = meta as TwilioSignature;
      if (m.bodySha256 && !digestsEqual(sha256(body), m.bodySha256)) return null;
      const params = m.bodySha256 ? '' : signedParams(formParams(body));
      for (const url of m.urls) {
        const k = matchHmac(m.algorithm, [url, params], [m.digest], keys, nowMs);
        if (k) return k;
      }
      return null;
    },
    envelope(body, req) {
      const f = req.mediaType === JSON_TYPE ? jsonFields(body) : formFields(body);
      return keyFields ? configuredEnvelope(f, keyFields) : defaultEnvelope(f);
    },
    envelopes(body, req, meta) {
      // Event Streams sends a batch of CloudEvents; everything else is one callback.
      return (req.mediaType === JSON_TYPE ? cloudEvents(body) : null) ?? [adapter.envelope(body, req, meta)];
    },
    parsePayload(raw) {
      if (isJsonBytes(raw)) return JSON.parse(raw.toString('utf8'));
      // The values exactly as the signature saw them (querystring rules, not URLSearchParams').
      // Own properties (as formObject): a `__proto__` parameter stays a field, not the object's prototype.
      return Object.fromEntries([...formParams(raw)].map(([name, values]) => [name, values.length === 1 ? values[0]! : values]));
    },
    /** Signs a FORM body as Twilio does for publicUrl (no query). JSON deliveries need `?bodySHA256=` in the request target: use twilioSignature. */
    sign(body, secret) {
      return { [HEADER]: twilioSignature(secret, publicUrl, formParams(body)) };
    },
    sample(seq) {
      const hex = sha256(seq).toString('hex');
      const sid = `SM${hex.slice(0, 32)}`;
      const body = [
        'ApiVersion=2010-04-01', `MessageStatus=delivered`, `SmsSid=${sid}`, 'SmsStatus=delivered', 'To=%2B15558675310',
        `MessagingServiceSid=MG${hex.slice(32, 64)}`, `MessageSid=${sid}`, `AccountSid=AC${hex.slice(16, 48)}`, 'From=%2B15017122661',
      ].join('&');
      return { body: Buffer.from(body), headers: { 'content-type': FORM }, signOptions: {} };
    },
  };
  return adapter;
};
