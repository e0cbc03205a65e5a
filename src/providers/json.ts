import { IngressError } from '../errors.js';
import type { Envelope } from './contract.js';

/** Parses a verified body. Only ever called after the signature checked out. */
export function parseJsonObject(body: Buffer): Record<string, unknown> {
  let value: unknown;
  try {
    value = JSON.parse(body.toString('utf8'));
  } catch {
    throw new IngressError('malformed_payload', 'body is not valid JSON');
  }
  if (value === null || typeof value !== 'object' || Array.isArray(value)) {
    throw new IngressError('malformed_payload', 'body is not a JSON object');
  }
  return value as Record<string, unknown>;
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

/** A usable identifier: a non-empty string (or an integer, as some providers send) of sane length. */
export function idString(v: unknown): string | null {
  if (typeof v === 'number' && Number.isSafeInteger(v)) return String(v);
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
  if (t === null) throw new IngressError('missing_event_type', `${where} is missing or not a string`);
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

/** The envelope of a verified JSON event whose fields sit at fixed paths (Stripe, Paddle, PayPal, …). */
export function jsonEnvelope(body: Buffer, p: EnvelopePaths): Envelope {
  const e = parseJsonObject(body);
  const at = (path: string | undefined) => (path === undefined ? undefined : pathValue(e, path));
  return envelope({
    eventId: requireEventId(at(p.id), p.id),
    eventType: requireEventType(at(p.type), p.type),
    objectId: idString(at(p.objectId)),
    objectVersion: idString(at(p.objectVersion)),
    providerCreatedAtMs: toEpochMs(at(p.createdAt)),
    parsed: e,
  });
}

/** Parses a signed decimal Unix-seconds timestamp strictly. */
export function parseUnixSeconds(s: string | undefined): number | null {
  if (s === undefined || !/^\d{1,12}$/.test(s)) return null;
  return Number(s);
}
