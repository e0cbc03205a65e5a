import { withDeadline } from '../deadline.js';
import { RetryableError } from '../engine/failure.js';

/** Raised by {@link withTimeout}; callers map it to the `timeout` reason. */
export class DeadlineExceeded extends Error {
  override readonly name = 'DeadlineExceeded';
}

/**
 * Waits for `p` at most `ms`. The underlying operation is not cancelled (brokers offer no way
 * to): a late answer is simply ignored, which at-least-once delivery tolerates.
 */
export function withTimeout<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  return withDeadline(p, ms, () => new DeadlineExceeded(`${what} took longer than ${ms} ms`));
}

/** How long a connection suspected dead (a timeout, nothing heard since) gets to answer a probe before it is dropped. */
export const PROBE_GRACE_MS = 1000;

/**
 * Whether `probe`, a round trip to the server (a NATS PING, an AMQP channel.open), succeeds within
 * PROBE_GRACE_MS: a slow but live server answers it, a link dead without a FIN does not.
 */
export async function answers(probe: Promise<unknown>): Promise<boolean> {
  try {
    await withTimeout(probe, PROBE_GRACE_MS, 'the probe');
    return true;
  } catch {
    probe.catch(() => undefined);
    return false;
  }
}

/** The error message of `err` on one line, for an operator; never a payload. */
export function describe(err: unknown): string {
  const e = err as { message?: unknown; code?: unknown };
  const msg = typeof e?.message === 'string' && e.message !== '' ? e.message : String(err);
  const code = typeof e?.code === 'string' && !msg.includes(e.code) ? ` [${e.code}]` : '';
  return `${msg}${code}`.replace(/\s+/g, ' ');
}

export function closedError(type: string, id: string): RetryableError {
  return new RetryableError('destination_closed', `${type} destination "${id}" is closed`);
}

const PLACEHOLDER = /\{(provider|type|endpoint)\}/;

/**
 * The binding/stream pattern that captures every expansion of a `.`-separated template:
 * the literal tokens before the first placeholder, then `wildcard` (a placeholder value may
 * itself contain dots, e.g. `payment_intent.succeeded`). A template without placeholders is its
 * own pattern. Returns null when the very first token holds a placeholder (no literal prefix).
 */
export function capturePattern(template: string, wildcard: string): string | null {
  const tokens = template.split('.');
  const i = tokens.findIndex((t) => PLACEHOLDER.test(t));
  if (i < 0) return template;
  if (i === 0) return null;
  return [...tokens.slice(0, i), wildcard].join('.');
}

export const hasPlaceholder = (template: string): boolean => PLACEHOLDER.test(template);
