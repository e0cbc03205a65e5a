import { sha256 } from '../crypto/payload-cipher.js';
import { MINUTE, withoutOptions } from './contract.js';
import { hmac, matchHmac, decodeHex } from '../crypto/hmac.js';
import { IngressError } from '../errors.js';
import { formObject, isJsonBytes } from './form.js';
import type { AcceptedEvent, AdapterFactory, ProviderAdapter, Reply, RequestView, SignatureMetadata } from './contract.js';
import { envelope, isJsonObject, parseJsonObject, pathValue, idString, requireEventId, requireEventType, toEpochMs, parseUnixSeconds } from './json.js';

/**
 * Slack: `X-Slack-Signature: v0=<hex>` = HMAC-SHA256(signing secret as UTF-8, `v0:${ts}:${raw}`),
 * `ts` = `X-Slack-Request-Timestamp` exactly as received (signed, ±300 s both ways via the pipeline).
 * One request URL may receive three kinds of body, all signed the same way:
 *  - Events API, `application/json`: key = `event_id` (Ev…), kept by Slack's retries (which add
 *    the UNSIGNED `X-Slack-Retry-Num`/`-Reason` headers: never trusted, de-dup is by `event_id`).
 *    `url_verification` is a handshake: the challenge is echoed, no row.
 *  - slash commands, form-encoded: key = `command:<trigger_id>`, type = the command (`/deploy`).
 *  - interactivity, form-encoded `payload=<JSON>`: key = `interaction:<trigger_id>`; payloads
 *    without one (view_closed, block_suggestion, dialog_*) use `interaction:sha256:<hex of the
 *    raw body>` — Slack never retries these requests, so the only repeat is a byte-identical replay.
 * Form deliveries are acked with an EMPTY 200 (a body would be shown to the user as a message, or
 * break a modal's view_submission); Events API deliveries get the usual JSON answer.
 */
interface SlackSignature extends SignatureMetadata {
  readonly timestamp: number;
  /** The signed timestamp exactly as it arrived (it is part of the signed bytes). */
  readonly ts: string;
  readonly digest: Buffer;
}

const SIGNATURE = 'x-slack-signature';
const TIMESTAMP = 'x-slack-request-timestamp';
const VERSION = 'v0';
const JSON_TYPE = 'application/json';
const FORM_TYPE = 'application/x-www-form-urlencoded';
const COMMAND_PREFIX = 'command:';
const INTERACTION_PREFIX = 'interaction:';
const URL_VERIFICATION = Buffer.from('url_verification');
const SSL_CHECK = Buffer.from('ssl_check');

function parseSignature(req: RequestView): SlackSignature {
  const header = req.single(SIGNATURE);
  if (header === undefined || header.trim() === '') throw new IngressError('missing_signature', 'X-Slack-Signature header is absent');
  const eq = header.indexOf('=');
  if (eq <= 0) throw new IngressError('malformed_signature', 'X-Slack-Signature is not "<version>=<hex>"');
  // Only v0 exists; another version is a scheme this adapter cannot check (Bolt refuses it too).
  if (header.slice(0, eq) !== VERSION) throw new IngressError('missing_signature', 'X-Slack-Signature carries no v0 signature');
  const digest = decodeHex(header.slice(eq + 1));
  if (digest === null || digest.length !== 32) throw new IngressError('malformed_signature', 'X-Slack-Signature v0 is not a 64-digit hex digest');
  const ts = req.single(TIMESTAMP);
  const timestamp = parseUnixSeconds(ts);
  if (timestamp === null) throw new IngressError('malformed_signature', 'X-Slack-Request-Timestamp is absent or not Unix seconds');
  return { timestamp, ts: ts!, digest };
}

/** A Slack `ts` ("1515449522.000016", Unix seconds with a fraction) → Unix ms. */
function slackTsMs(v: unknown): number | null {
  if (typeof v !== 'string' || !/^\d{1,12}(\.\d{1,9})?$/.test(v)) return null;
  return Math.round(Number(v) * 1000);
}


/** The one value of a form field; a repeated field is refused (two readers could pick different ones). */
function field(form: URLSearchParams, name: string): string | null {
  const all = form.getAll(name);
  if (all.length > 1) throw new IngressError('malformed_payload', `form field "${name}" appears ${all.length} times`);
  return all[0] ?? null;
}

/** Events API (JSON). */
function eventsEnvelope(body: Buffer) {
  const e = parseJsonObject(body);
  if (e.type === 'app_rate_limited') {
    // No event_id: at most one such notice per team and rate-limited minute.
    const team = requireEventId(e.team_id, 'team_id');
    const minute = requireEventId(e.minute_rate_limited, 'minute_rate_limited');
    return envelope({ eventId: `app_rate_limited:${team}:${minute}`, eventType: 'app_rate_limited', objectId: team, providerCreatedAtMs: toEpochMs(e.minute_rate_limited) });
  }
  const eventId = requireEventId(e.event_id, 'event_id');
  const ev = isJsonObject(e.event) ? e.event : undefined;
  // event_callback: the inner type (`app_mention`, `message`…) is what handlers route on.
  const eventType = requireEventType(ev ? ev.type : e.type, ev ? 'event.type' : 'type');
  const eventTs = ev ? idString(ev.event_ts) ?? idString(ev.ts) : null;
  return envelope({
    eventId,
    eventType,
    // The conversation the event happened in (per-conversation ordering), else the user a user event is about.
    objectId: ev
      ? idString(ev.channel) ?? idString(pathValue(ev, 'channel.id')) ?? idString(pathValue(ev, 'item.channel')) ?? idString(ev.channel_id) ?? idString(pathValue(ev, 'user.id'))
      : null,
    objectVersion: eventTs,
    providerCreatedAtMs: toEpochMs(e.event_time) ?? slackTsMs(eventTs),
  });
}

/** Slash commands and interactivity (form-encoded). */
function formEnvelope(body: Buffer, meta: SlackSignature) {
  const form = new URLSearchParams(body.toString('utf8'));
  const sentAtMs = meta.timestamp * 1000; // never retried: the signed attempt time is the event time
  const payload = field(form, 'payload');
  if (payload !== null) {
    let p: unknown;
    try {
      p = JSON.parse(payload);
    } catch {
      throw new IngressError('malformed_payload', 'the payload field is not valid JSON');
    }
    if (!isJsonObject(p)) throw new IngressError('malformed_payload', 'the payload field is not a JSON object');
    const eventType = requireEventType(p.type, 'payload.type');
    const trigger = idString(p.trigger_id);
    const actionTs = idString(p.action_ts) ?? idString(pathValue(p, 'actions.0.action_ts'));
    return envelope({
      eventId: INTERACTION_PREFIX + (trigger ?? `sha256:${sha256(body).toString('hex')}`),
      eventType,
      objectId: idString(pathValue(p, 'channel.id')) ?? idString(pathValue(p, 'container.channel_id')) ?? idString(pathValue(p, 'view.id')),
      objectVersion: actionTs,
      providerCreatedAtMs: slackTsMs(actionTs) ?? sentAtMs,
    });
  }
  const command = field(form, 'command');
  if (command !== null) {
    return envelope({
      eventId: COMMAND_PREFIX + requireEventId(field(form, 'trigger_id'), 'trigger_id'),
      eventType: requireEventType(command, 'command'),
      objectId: idString(field(form, 'channel_id')),
      providerCreatedAtMs: sentAtMs,
    });
  }
  throw new IngressError('malformed_payload', 'form body is neither a slash command (command=) nor an interaction (payload=)');
}


const adapter: ProviderAdapter = {
  name: 'slack',
  contentTypes: [JSON_TYPE, FORM_TYPE],
  defaultToleranceSeconds: 300,
  // 3 retries: at once, after 1 and after 5 minutes.
  redeliveryWindowSeconds: 10 * MINUTE,
  prepareSecret(value) {
    if (value.length === 0) throw new Error('secret is empty');
    if (value.trim() !== value) throw new Error('the signing secret has leading or trailing whitespace');
    // The usual mix-ups: a bot/user/app token instead of the app's Signing Secret (Basic Information → App Credentials).
    if (/^(xox[a-z]|xapp)-/.test(value)) throw new Error('this is a Slack token; use the app\'s Signing Secret (Basic Information → App Credentials)');
    return Buffer.from(value, 'utf8');
  },
  parseSignature,
  verify(meta, body, keys, nowMs) {
    const m = meta as SlackSignature;
    return matchHmac('sha256', [`${VERSION}:${m.ts}:`, body], [m.digest], keys, nowMs);
  },
  probe(req, body): Reply | null {
    // Slack's slash-command SSL check arrives WITHOUT signature headers (bolt-js #1397): answer it,
    // but only in its exact shape — no signature header, a tiny form of ssl_check=1 and at most a token.
    if (req.mediaType !== FORM_TYPE || body.length > 256 || req.all(SIGNATURE).length > 0 || body.indexOf(SSL_CHECK) < 0) return null;
    const form = new URLSearchParams(body.toString('utf8'));
    if (form.getAll('ssl_check').length !== 1 || form.get('ssl_check') !== '1') return null;
    for (const k of form.keys()) if (k !== 'ssl_check' && k !== 'token') return null;
    return { status: 200, contentType: 'text/plain', body: '' };
  },
  handshake(body, req): Reply | null {
    if (req.mediaType === JSON_TYPE) {
      if (body.indexOf(URL_VERIFICATION) < 0) return null; // the common case: no second parse
      const e = parseJsonObject(body);
      if (e.type !== 'url_verification') return null;
      const challenge = typeof e.challenge === 'string' ? idString(e.challenge) : null;
      if (challenge === null) throw new IngressError('malformed_payload', 'url_verification without a challenge');
      // Slack's documented primary answer: the challenge as plain text.
      return { status: 200, contentType: 'text/plain', body: challenge };
    }
    // A (signed) slash-command SSL check: acknowledge, store nothing.
    if (body.indexOf(SSL_CHECK) >= 0 && field(new URLSearchParams(body.toString('utf8')), 'ssl_check') === '1') {
      return { status: 200, contentType: 'text/plain', body: '' };
    }
    return null;
  },
  envelope(body, req, meta) {
    return req.mediaType === FORM_TYPE ? formEnvelope(body, meta as SlackSignature) : eventsEnvelope(body);
  },
  acceptedReply(_results: readonly AcceptedEvent[], req: RequestView): Reply | null {
    // Slash commands / interactions: an empty 200 is the ack (Bolt's `ack()`); a body would be shown or misread.
    // Events API: the gateway's usual answer (Slack ignores the body).
    return req.mediaType === FORM_TYPE ? { status: 200, contentType: 'text/plain', body: '' } : null;
  },
  parsePayload(raw) {
    if (isJsonBytes(raw)) return JSON.parse(raw.toString('utf8')); // Events API
    const form = formObject(raw);
    // Interactivity: the interaction object itself (as Bolt's `body`); slash commands: the fields.
    return typeof form.payload === 'string' ? JSON.parse(form.payload) : form;
  },
  sign(body, secret, opts) {
    const ts = opts.timestamp ?? Math.floor(Date.now() / 1000);
    return {
      [TIMESTAMP]: String(ts),
      [SIGNATURE]: `${VERSION}=${hmac('sha256', Buffer.from(secret, 'utf8'), [`${VERSION}:${ts}:`, body]).toString('hex')}`,
    };
  },
  sample(seq) {
    const now = Math.floor(Date.now() / 1000);
    const ts = `${now}.${seq.padStart(6, '0').slice(-6)}`;
    const body = JSON.stringify({
      token: 'sample-verification-token', team_id: 'T0SAMPLE', api_app_id: 'A0SAMPLE', type: 'event_callback',
      event_id: `Ev0SAMPLE${seq}`, event_time: now,
      event: { type: 'app_mention', user: 'U0SAMPLE', text: '<@U0BOT> hello', ts, channel: 'C0SAMPLE', event_ts: ts },
    });
    return { body: Buffer.from(body), headers: { 'content-type': 'application/json' }, signOptions: {} };
  },
};

export const createSlack: AdapterFactory = withoutOptions(adapter);
