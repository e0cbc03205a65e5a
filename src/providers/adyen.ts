import { sha256 } from '../crypto/payload-cipher.js';
import { DAY } from './contract.js';
import { decodeBase64, decodeHex, digestsEqual, hmac, matchHmac, type TrustedKey } from '../crypto/hmac.js';
import { ConfigError, IngressError } from '../errors.js';
import { asArray, asObject, child, optEnum, type Obj } from '../config/read.js';
import { parseSecretRef, type SecretRef } from '../config/secrets.js';
import { OptionSecrets } from './option-secrets.js';
import type { AcceptedEvent, AdapterFactory, Envelope, ProviderAdapter, Reply, RequestView, SignatureMetadata } from './contract.js';
import { envelope, isJsonObject, idString, parseJsonObject, requireEventId, requireEventType, toEpochMs, isoTimestamp } from './json.js';
import { digestHeader } from './signature.js';
import { duplicateKeyOffset, topLevelArrayElements } from './json-slices.js';

/**
 * Adyen standard (payment) notifications, JSON: `{"live": "...", "notificationItems":
 * [{"NotificationRequestItem": {...}}, ...]}`. One delivery may hold several items; each is its
 * own event and its own inbox row, stored as the exact bytes of its array element.
 *
 * The signature is NOT in a header and NOT over the raw body (this adapter breaks the
 * "headers only" rule by design, because Adyen does): every item carries its own
 * `additionalData.hmacSignature` = base64 HMAC-SHA256, keyed by the hex-decoded HMAC key, over
 *
 *   pspReference:originalReference:merchantAccountCode:merchantReference:amount.value:amount.currency:eventCode:success
 *
 * (missing or null fields are empty strings). So `verify` must parse the body to find the items;
 * it builds each signed string from the parsed fields (never re-serialises), checks EVERY item
 * (one bad item rejects the whole delivery) and stashes the parse on the metadata object for
 * `envelopes`.
 *
 * ONLY THOSE EIGHT FIELDS ARE SIGNED. Everything else in an item (additionalData, eventDate,
 * reason, paymentMethod, operations…) and the top-level `live` flag can be changed by anyone
 * holding one captured item, and the signature still verifies: that is Adyen's protocol.
 *
 * The fields are joined with ":" without escaping, so a colon could move between neighbouring
 * fields without changing the signed string. Adyen's references are alphanumeric: a colon is
 * refused everywhere except in `merchantReference` (the merchant's own free text), and
 * `amount.value` must be an integer. Then the signed string decides every field uniquely —
 * in particular the pspReference / eventCode / success that make the de-duplication key.
 *
 * Optional HTTP Basic auth (`options.basicAuth`), which Adyen sends when configured in the
 * Customer Area, is checked in constant time in addition to (never instead of) the HMAC.
 */

/** What `verify` learnt from the body; `envelopes` reuses it when it sees the same Buffer. */
interface ParsedDelivery {
  readonly body: Buffer;
  readonly items: readonly ParsedItem[];
}

interface ParsedItem {
  readonly fields: SignedFields;
  readonly signedString: string;
  readonly signature: Buffer;
  readonly eventDate: unknown;
  /** The trusted key version that verified this item (set by verify). */
  version?: string;
}

interface AdyenSignature extends SignatureMetadata {
  readonly timestamp: null;
  /** SHA-256 of the Basic credentials sent, when the endpoint requires Basic auth. */
  readonly basic: Buffer | null;
  /** Filled in by `verify` (the signatures live in the body). */
  parsed?: ParsedDelivery;
}

/** The eight signed values, as the strings that are signed. */
export interface SignedFields {
  readonly pspReference: string;
  readonly originalReference: string;
  readonly merchantAccountCode: string;
  readonly merchantReference: string;
  readonly value: string;
  readonly currency: string;
  readonly eventCode: string;
  readonly success: string;
}

const ITEMS = 'notificationItems';
const ITEM = 'NotificationRequestItem';
const REPLY: Reply = { status: 200, contentType: 'text/plain', body: '[accepted]' };
const MIN_KEY_BYTES = 16;

// ignoreBOM keeps a byte-order mark in the text, so JSON.parse refuses it (400), as everywhere else:
// dropped here, the items parsed but the byte slicing of the raw body (envelopes) failed later.
const utf8 = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });


function malformed(detail: string): IngressError {
  return new IngressError('malformed_payload', detail);
}

/** A signed text field: absent/null → '', a string as-is; `colon: false` refuses ':' (see header). */
function text(item: Obj, name: string, where: string, colon: boolean): string {
  const v = item[name];
  if (v === undefined || v === null) return '';
  if (typeof v !== 'string') throw malformed(`${where}.${name} is not a string`);
  if (!colon && v.includes(':')) throw malformed(`${where}.${name} contains ":"`);
  return v;
}

/**
 * The eight signed values of one NotificationRequestItem, strictly typed (throws
 * malformed_payload). Exported for tests and tools.
 */
export function signedFields(item: Obj, where = ITEM): SignedFields {
  const amount = item.amount;
  if (amount !== undefined && amount !== null && !isJsonObject(amount)) throw malformed(`${where}.amount is not an object`);
  const a: Obj = isJsonObject(amount) ? amount : {};
  let value = '';
  const v = a.value;
  if (typeof v === 'number') {
    // Minor units: an integer. Its decimal form is what Adyen (and every SDK) signs.
    if (!Number.isSafeInteger(v)) throw malformed(`${where}.amount.value is not an integer`);
    value = String(v);
  } else if (v !== undefined && v !== null) {
    throw malformed(`${where}.amount.value is not a number`);
  }
  const s = item.success;
  let success: string;
  if (typeof s === 'boolean') success = String(s);
  else success = text(item, 'success', where, false);
  return {
    pspReference: text(item, 'pspReference', where, false),
    originalReference: text(item, 'originalReference', where, false),
    merchantAccountCode: text(item, 'merchantAccountCode', where, false),
    merchantReference: text(item, 'merchantReference', where, true),
    value,
    currency: text(a, 'currency', `${where}.amount`, false),
    eventCode: text(item, 'eventCode', where, false),
    success,
  };
}

export function signedString(f: SignedFields): string {
  return [f.pspReference, f.originalReference, f.merchantAccountCode, f.merchantReference, f.value, f.currency, f.eventCode, f.success].join(':');
}

/** base64 HMAC-SHA256 of an item's signed string under a hex key, as Adyen computes it. For tests and tools. */
export function signAdyenItem(item: Obj, hexKey: string): string {
  return hmac('sha256', prepareHexKey(hexKey), [signedString(signedFields(item))]).toString('base64');
}

function prepareHexKey(value: string): Buffer {
  const key = decodeHex(value);
  if (key === null) throw new Error('an Adyen HMAC key is hexadecimal (64 hex digits as shown in the Customer Area)');
  if (key.length < MIN_KEY_BYTES) throw new Error(`an Adyen HMAC key is at least ${MIN_KEY_BYTES * 2} hex digits (the Customer Area shows 64)`);
  return key;
}

/** Strict UTF-8 + JSON; the items with their signatures. Before verification: nothing here is trusted yet. */
function parseDelivery(body: Buffer): ParsedDelivery {
  let doc: unknown;
  try {
    doc = JSON.parse(utf8.decode(body));
  } catch {
    throw malformed('body is not UTF-8 JSON');
  }
  if (!isJsonObject(doc)) throw malformed('body is not a JSON object');
  const list = doc[ITEMS];
  if (!Array.isArray(list)) throw malformed(`${ITEMS} is missing or not an array`);
  if (list.length === 0) throw malformed(`${ITEMS} is empty`);
  const items = list.map((wrapper: unknown, i): ParsedItem => {
    const where = `${ITEMS}[${i}]`;
    if (!isJsonObject(wrapper) || !isJsonObject(wrapper[ITEM])) throw malformed(`${where} has no ${ITEM} object`);
    const item = wrapper[ITEM];
    const extra = item.additionalData;
    if (extra !== undefined && extra !== null && !isJsonObject(extra)) throw malformed(`${where}.${ITEM}.additionalData is not an object`);
    const sig = isJsonObject(extra) ? extra.hmacSignature : undefined;
    if (sig === undefined || sig === null || sig === '') throw new IngressError('missing_signature', `${where} has no additionalData.hmacSignature`);
    if (typeof sig !== 'string') throw new IngressError('malformed_signature', `${where} hmacSignature is not a string`);
    const signature = decodeBase64(sig);
    if (signature === null || signature.length !== 32) throw new IngressError('malformed_signature', `${where} hmacSignature is not a base64 SHA-256 digest`);
    const fields = signedFields(item, `${where}.${ITEM}`);
    return { fields, signedString: signedString(fields), signature, eventDate: item.eventDate };
  });
  return { body, items };
}

/**
 * `options.basicAuth`: one `{username, password}` or a list (to change the password without
 * downtime), as references: [username, password] of each, flattened.
 */
function basicCredentialRefs(o: Obj, path: string): SecretRef[] {
  const raw = o.basicAuth;
  if (raw === undefined) return [];
  const p = child(path, 'basicAuth');
  const list = Array.isArray(raw) ? asArray(raw, p) : [raw];
  if (list.length === 0) throw new ConfigError(p, 'must name at least one username/password');
  return list.flatMap((entry, i) => {
    const ep = Array.isArray(raw) ? child(p, i) : p;
    const c = asObject(entry, ep, ['username', 'password']);
    return [parseSecretRef(c.username, child(ep, 'username')), parseSecretRef(c.password, child(ep, 'password'))];
  });
}

/** A username a Basic header could not carry (usernames are at the even positions; a password may hold ":"). */
function checkCredential(value: string, ref: SecretRef, index: number): void {
  if (index % 2 === 0 && value.includes(':')) throw new ConfigError(ref.path, 'must not contain ":" (HTTP Basic)');
}

/** `user:pass` of each configured pair, in order. */
function pairs(values: readonly string[]): string[] {
  const out: string[] = [];
  for (let i = 0; i < values.length; i += 2) out.push(`${values[i]!}:${values[i + 1]!}`);
  return out;
}

/** `Authorization: Basic <base64(user:pass)>` → SHA-256 of the credentials. */
function parseBasic(req: RequestView): Buffer {
  const h = req.single('authorization');
  if (h === undefined || h.trim() === '') throw new IngressError('missing_signature', 'Authorization header is absent');
  const m = /^basic +(\S+)\s*$/i.exec(h.trim());
  const decoded = m ? decodeBase64(m[1]!) : null;
  if (decoded === null || !decoded.includes(0x3a)) throw new IngressError('malformed_signature', 'Authorization is not HTTP Basic credentials');
  return sha256(decoded);
}

/**
 * Adyen platform webhooks (Balance Platform, Management API, `options.webhooks: platform`): one
 * event per request, `HmacSignature: <base64>` = HMAC-SHA256(hex-decoded key, raw body). They carry
 * no event id; a redelivery resends the same bytes, so the key is the SHA-256 of the body.
 */
interface PlatformSignature extends SignatureMetadata {
  readonly basic: Buffer | null;
  readonly digest: Buffer;
}

const PLATFORM_HEADER = 'hmacsignature';

/** The resource a platform event is about: `data.id`, else the `id` of the one object inside `data`. */
function platformObjectId(data: unknown): string | null {
  if (!isJsonObject(data)) return null;
  const direct = idString(data.id);
  if (direct !== null) return direct;
  const nested = Object.values(data).filter((v): v is Obj => isJsonObject(v) && idString(v.id) !== null);
  return nested.length === 1 ? idString(nested[0]!.id) : null;
}

export const createAdyen: AdapterFactory = (options, path, env) => {
  const o = asObject(options ?? {}, path, ['basicAuth', 'webhooks']);
  const refs = basicCredentialRefs(o, path);
  // Compared as fixed-length SHA-256 digests: constant time, and the length does not leak.
  // Re-read with the endpoint's secrets (OptionSecrets says how).
  const basic = refs.length > 0
    ? new OptionSecrets(refs, (values) => {
      const credentials = pairs(values);
      return { first: credentials[0]!, digests: credentials.map((c) => sha256(c)) };
    }, checkCredential, env)
    : null;
  const basicOk = (sent: Buffer | null) => {
    if (!basic) return true;
    let ok = false;
    for (const d of basic.value.digests) ok = (sent !== null && digestsEqual(d, sent)) || ok;
    return ok;
  };
  const basicHeader = (): Record<string, string> =>
    (basic ? { authorization: `Basic ${Buffer.from(basic.value.first, 'utf8').toString('base64')}` } : {});
  const secretsOf = basic ? { optionSecrets: basic } : {};

  if (optEnum(o, 'webhooks', path, ['standard', 'platform'] as const) === 'platform') {
    const platform: ProviderAdapter = {
      name: 'adyen',
      contentTypes: ['application/json'],
      defaultToleranceSeconds: null,
      // Same retry queue as standard webhooks [U: Adyen documents it for standard webhooks].
      redeliveryWindowSeconds: 30 * DAY,
      prepareSecret: prepareHexKey,
      ...secretsOf,
      parseSignature: (req): PlatformSignature => ({
        timestamp: null,
        basic: basic ? parseBasic(req) : null,
        digest: digestHeader(req, PLATFORM_HEADER, 'base64', { label: 'HmacSignature' }),
      }),
      verify(meta, body, keys, nowMs) {
        const m = meta as PlatformSignature;
        return basicOk(m.basic) ? matchHmac('sha256', [body], [m.digest], keys, nowMs) : null;
      },
      envelope(body) {
        const e = parseJsonObject(body);
        return envelope({
          eventId: `sha256:${sha256(body).toString('hex')}`,
          eventType: requireEventType(e.type, 'type'),
          objectId: platformObjectId(e.data),
          providerCreatedAtMs: toEpochMs(e.timestamp ?? e.createdAt),
        });
      },
      sign: (body, hexKey) => ({ ...basicHeader(), [PLATFORM_HEADER]: hmac('sha256', prepareHexKey(hexKey), [body]).toString('base64') }),
      sample: (seq) => ({
        body: Buffer.from(JSON.stringify({
          data: { balancePlatform: 'YOUR_BALANCE_PLATFORM', accountHolder: { id: `AH${seq.toUpperCase()}`, status: 'active' } },
          environment: 'test', timestamp: new Date().toISOString(), type: 'balancePlatform.accountHolder.created',
        })),
        headers: { 'content-type': 'application/json' },
        signOptions: {},
      }),
    };
    return platform;
  }

  /**
   * Every item must verify. Each row records its own item's version; the one reported for the
   * request (metrics) is the LAST-listed version any item needed (see docs).
   */
  function verifyItems(items: readonly ParsedItem[], keys: readonly TrustedKey[], nowMs: number): TrustedKey | null {
    let reported = -1;
    for (const it of items) {
      const k = matchHmac('sha256', [it.signedString], [it.signature], keys, nowMs);
      if (k === null) return null;
      it.version = k.version;
      reported = Math.max(reported, keys.indexOf(k));
    }
    return keys[reported] ?? null;
  }

  const adapter: ProviderAdapter = {
    name: 'adyen',
    contentTypes: ['application/json'],
    defaultToleranceSeconds: null,
    // Adyen's retry queue keeps an unaccepted notification for up to 30 days.
    redeliveryWindowSeconds: 30 * DAY,
    prepareSecret: prepareHexKey,
    ...secretsOf,
    parseSignature(req): AdyenSignature {
      // Headers only: the HMACs are inside the body and are read by `verify`.
      return { timestamp: null, basic: basic ? parseBasic(req) : null };
    },
    verify(meta, body, keys, nowMs) {
      const m = meta as AdyenSignature;
      // Checked before the body is parsed: without the credentials, no parse work and no parse errors.
      if (!basicOk(m.basic)) return null;
      const parsed = parseDelivery(body);
      const key = verifyItems(parsed.items, keys, nowMs);
      if (key !== null) m.parsed = parsed;
      return key;
    },
    envelope(body, req, meta) {
      return adapter.envelopes!(body, req, meta)[0]!;
    },
    envelopes(body, _req, meta): Envelope[] {
      const m = meta as AdyenSignature;
      const parsed = m.parsed?.body === body ? m.parsed : parseDelivery(body);
      const slices = topLevelArrayElements(body, ITEMS);
      if (slices.kind === 'duplicate') throw malformed(`${ITEMS} appears more than once`);
      // Inside an item too: the HMAC covers the fields as JSON.parse read them (the last of two equal
      // keys), while the stored and forwarded slice keeps both, so a reader that takes the first
      // (other parsers do) would see an unsigned pspReference or amount as the event's.
      if (duplicateKeyOffset(utf8.decode(body)) !== undefined) throw malformed('a member appears twice in one object');
      if (slices.kind !== 'array' || slices.elements.length !== parsed.items.length) throw malformed(`${ITEMS} could not be sliced`);
      return parsed.items.map((it, i) => {
        const f = it.fields;
        const psp = requireEventId(f.pspReference, `${ITEMS}[${i}].pspReference`);
        const eventCode = requireEventType(f.eventCode, `${ITEMS}[${i}].eventCode`);
        const r = slices.elements[i]!;
        return envelope({
          // pspReference is unique per payment AND per modification (each refund has its own);
          // eventCode + success separate the events Adyen sends about one reference.
          eventId: `${psp}:${eventCode}:${f.success}`,
          eventType: eventCode,
          // The payment: a modification's originalReference, else the item's own pspReference.
          objectId: idString(f.originalReference) ?? psp,
          // eventDate is NOT signed: ordering evidence only, never proof.
          objectVersion: isoTimestamp(it.eventDate),
          providerCreatedAtMs: typeof it.eventDate === 'string' ? toEpochMs(it.eventDate) : null,
          payload: body.subarray(r.start, r.end),
          secretVersion: it.version,
        });
      });
    },
    acceptedReply(_results: readonly AcceptedEvent[]) {
      // Adyen wants `[accepted]` for new, duplicate and filtered-out items alike: anything else retries.
      return REPLY;
    },
    signBody(body, hexKey) {
      // Our own sample (or a test's), not a received body: re-serialising it is fine here.
      const doc = JSON.parse(body.toString('utf8')) as { notificationItems: { NotificationRequestItem: Obj & { additionalData?: Obj } }[] };
      for (const { NotificationRequestItem: item } of doc.notificationItems) {
        item.additionalData = { ...item.additionalData, hmacSignature: signAdyenItem(item, hexKey) };
      }
      return Buffer.from(JSON.stringify(doc));
    },
    sign(): Record<string, string> {
      // The HMACs live inside the body (signBody); only Basic credentials travel in a header.
      return basicHeader();
    },
    sample(seq) {
      // The hmacSignature is a placeholder until signBody fills it in under the endpoint's key.
      const item = {
        additionalData: { hmacSignature: Buffer.alloc(32).toString('base64'), authCode: '058705', cardSummary: '1111' },
        amount: { currency: 'EUR', value: 1000 },
        eventCode: 'AUTHORISATION',
        eventDate: new Date().toISOString(),
        merchantAccountCode: 'SampleMerchant',
        merchantReference: `order-${seq}`,
        paymentMethod: 'visa',
        pspReference: `SAMPLE${seq.replace(/[^A-Za-z0-9]/g, '').toUpperCase()}`.slice(0, 16).padEnd(16, '0'),
        success: 'true',
      };
      const body = JSON.stringify({ live: 'false', notificationItems: [{ NotificationRequestItem: item }] });
      return { body: Buffer.from(body), headers: { 'content-type': 'application/json' }, signOptions: {} };
    },
  };
  return adapter;
};
