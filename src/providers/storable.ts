import { isUtf8 } from 'node:buffer';
import { IngressError } from '../errors.js';
import type { Envelope } from './contract.js';

/**
 * The longest event id (and notice key) stored, in UTF-8 bytes. With the provider and endpoint
 * ids (≤ 64 bytes each) a unique-key entry stays far inside PostgreSQL's b-tree limit (2,704
 * bytes); past it the whole group-commit batch would fail, not only this event.
 */
export const MAX_KEY_BYTES = 1024;

// Provider times outside years 1–9999 are kept as unknown rather than stored: both stores hold
// that range, and a misread unit (µs taken for s) lands far outside it.
const MIN_TIME_MS = -62_135_596_800_000;
const MAX_TIME_MS = 253_402_300_799_999;

/** Why a string cannot round-trip through a text column unchanged, or null. */
function textProblem(s: string): string | null {
  // A lone surrogate is stored as U+FFFD: the row's key would no longer match the payload's AAD
  // (it could never be opened) nor the request's, and two such ids could share one row.
  if (!s.isWellFormed()) return 'is not well-formed Unicode (a lone surrogate)';
  if (s.includes('\0')) return 'contains a NUL character'; // PostgreSQL text cannot hold one
  return null;
}

/**
 * The envelope as the stores can keep it exactly, checked once for every adapter before any row
 * is built: one unstorable event must be answered 400 on its own, not fail the batch it shares
 * with other requests.
 */
export function storableEnvelope(env: Envelope, body: Buffer): Envelope {
  const idProblem = textProblem(env.eventId) ?? (Buffer.byteLength(env.eventId) > MAX_KEY_BYTES ? `is longer than ${MAX_KEY_BYTES} bytes` : null)
    // Invalid UTF-8 decodes to U+FFFD: ids that differ only in such bytes would share one row, the
    // second event answered as a duplicate of the first. (The scan is paid only for an id holding U+FFFD.)
    ?? (env.eventId.includes('\uFFFD') && !isUtf8(body) ? 'was read from a body that is not valid UTF-8' : null);
  if (idProblem) throw new IngressError('invalid_event_id', `the event id ${idProblem}`);
  const fields: [string, string | null][] = [['event type', env.eventType], ['object id', env.objectId], ['object version', env.objectVersion]];
  if (env.notice) fields.push(['notice key', env.notice.coalesceKey]);
  for (const [name, value] of fields) {
    const problem = value === null ? null : textProblem(value);
    if (problem) throw new IngressError('invalid_envelope', `the ${name} ${problem}`);
  }
  if (env.notice && Buffer.byteLength(env.notice.coalesceKey) > MAX_KEY_BYTES) {
    throw new IngressError('invalid_envelope', `the notice key is longer than ${MAX_KEY_BYTES} bytes`);
  }
  const t = env.providerCreatedAtMs;
  if (t !== null && !(Number.isSafeInteger(t) && t >= MIN_TIME_MS && t <= MAX_TIME_MS)) return { ...env, providerCreatedAtMs: null };
  return env;
}
