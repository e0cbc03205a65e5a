import { IngressError } from '../errors.js';
import type { Envelope } from './contract.js';
import { compilePaths, scanJsonObject, type ScanFailure, type ScannedValue } from './json-scan.js';

function malformed(why: ScanFailure): IngressError {
  return new IngressError('malformed_payload', why === 'invalid' ? 'body is not valid JSON' : 'body is not a JSON object');
}

/** A JSON object: not null, not an array. */
export const isJsonObject = (v: unknown): v is Record<string, unknown> => v !== null && typeof v === 'object' && !Array.isArray(v);

/** Parses a verified body. Only ever called after the signature checked out. */
export function parseJsonObject(body: Buffer): Record<string, unknown> {
  let value: unknown;
  try {
    value = JSON.parse(body.toString('utf8'));
  } catch {
    throw malformed('invalid');
  }
  if (!isJsonObject(value)) throw malformed('not_object');
  return value;
}

/** Follows a dotted path (`data.object.id`) through plain objects. */
export function pathValue(obj: unknown, path: string): unknown {
  let cur: unknown = obj;
  for (const key of path.split('.')) {
    if (cur === null || typeof cur !== 'object') return undefined;
    cur = (cur as Record<string, unknown>)[key];
  }
  return cur;
}

const MAX_ID_LENGTH = 512;

/**
 * A usable identifier: a non-empty string (or an integer, as some providers send) of sane length.
 * An integer as its decimal text: a number only while it is exact (±2^53); a longer one only as
 * the scanner's bigint (json-scan.ts), which kept its digits, never as a rounded double.
 */
export function idString(v: unknown): string | null {
  if (typeof v === 'number' && Number.isSafeInteger(v)) return String(v);
  if (typeof v === 'bigint') return idString(v.toString());
  if (typeof v !== 'string' || v.length === 0 || v.length > MAX_ID_LENGTH) return null;
  return v;
}

export function requireEventId(v: unknown, where: string): string {
  const id = idString(v);
  if (id === null) throw new IngressError('missing_event_id', `${where} is missing or not a usable id`);
  return id;
}

export function requireEventType(v: unknown, where: string): string {
  const t = idString(v);
  // A whole number is taken as its decimal text, as ids are (a generic-hmac typePath may name a numeric code).
  if (t === null) throw new IngressError('missing_event_type', `${where} is missing, empty, or not a string or whole number`);
  return t;
}

/** Unix seconds or an ISO-8601 string → Unix ms; anything else → null. */
export function toEpochMs(v: unknown): number | null {
  if (typeof v === 'number' && Number.isFinite(v)) return Math.round(v * 1000);
  if (typeof v === 'string' && v.length > 0) {
    const ms = Date.parse(v);
    return Number.isNaN(ms) ? null : ms;
  }
  return null;
}

/** A date-time string normalised to UTC ISO-8601 (ms), so versions compare as strings across offsets; else null. */
export function isoTimestamp(v: unknown): string | null {
  const ms = typeof v === 'string' ? toEpochMs(v) : null;
  return ms === null ? null : new Date(ms).toISOString();
}

export function envelope(fields: Partial<Envelope> & Pick<Envelope, 'eventId' | 'eventType'>): Envelope {
  return {
    objectId: null,
    objectVersion: null,
    providerCreatedAtMs: null,
    ...fields,
  };
}

/** Where a provider's JSON event keeps each envelope field (dotted paths; absent = none). */
export interface EnvelopePaths {
  readonly id: string;
  readonly type: string;
  readonly objectId?: string;
  readonly objectVersion?: string;
  /** Event time: Unix seconds or an ISO-8601 string. */
  readonly createdAt?: string;
}

/**
 * A reader of the values at fixed dotted paths (through objects only) of a verified body that
 * must be a JSON object: validated whole, but no tree is built (json-scan.ts). An object or
 * array at a path reads as NON_SCALAR, which no id or time accepts.
 */
export function jsonFields(paths: readonly string[]): (body: Buffer) => ScannedValue[] {
  const compiled = compilePaths(paths);
  return (body) => {
    const r = scanJsonObject(body, compiled);
    if (typeof r === 'string') throw malformed(r);
    return r;
  };
}

/**
 * The envelope reader of a verified JSON event whose fields sit at fixed paths (Stripe, Paddle,
 * PayPal, …). The body is validated whole but not built into a tree (json-scan.ts): the ingress
 * needs five values, and a worker that wants the payload parses it when it asks.
 */
export function jsonEnvelope(p: EnvelopePaths): (body: Buffer) => Envelope {
  const order = [p.id, p.type, p.objectId, p.objectVersion, p.createdAt];
  const wanted = order.filter((path): path is string => path !== undefined);
  const read = jsonFields(wanted);
  const slot = order.map((path) => (path === undefined ? -1 : wanted.indexOf(path)));
  return (body) => {
    const r = read(body);
    const at = (field: number): ScannedValue => (slot[field]! < 0 ? undefined : r[slot[field]!]);
    return envelope({
      eventId: requireEventId(at(0), p.id),
      eventType: requireEventType(at(1), p.type),
      objectId: idString(at(2)),
      objectVersion: idString(at(3)),
      providerCreatedAtMs: toEpochMs(at(4)),
    });
  };
}

/** Parses a signed decimal Unix-seconds timestamp strictly. */
export function parseUnixSeconds(s: string | undefined): number | null {
  if (s === undefined || !/^\d{1,12}$/.test(s)) return null;
  return Number(s);
}
