import type { TrustedKey } from '../../src/crypto/hmac.js';
import { IngressError } from '../../src/errors.js';
import { viewOf } from '../../src/http/request-view.js';
import type { ProviderAdapter, RequestView } from '../../src/providers/contract.js';

/**
 * A RequestView built by the pipeline's own `viewOf` over header pairs (names any case, repeats
 * kept). The content type defaults to the pairs' Content-Type header.
 */
export function view(pairs: [string, string][], opts: { target?: string; contentType?: string } = {}): RequestView {
  const headers: Record<string, string[]> = {};
  for (const [k, v] of pairs) (headers[k.toLowerCase()] ??= []).push(v);
  return viewOf({ headers, contentType: opts.contentType ?? headers['content-type']?.[0], target: opts.target ?? '/webhooks/x' });
}

/** The error of class `type` that `fn` throws; fails the test if it throws nothing or something else. */
export function thrownBy<E extends Error>(fn: () => unknown, type: new (...args: never[]) => E): E {
  try {
    fn();
  } catch (e) {
    if (e instanceof type) return e;
    throw e;
  }
  throw new Error(`expected a ${type.name}`);
}

/** The IngressError reason `fn` throws. */
export const reasonOf = (fn: () => unknown): string => thrownBy(fn, IngressError).reason;

/** Table rows are written (name, input, expected); test titles read better as (name, expected). */
export const expectedFirst = <A, B, C>(rows: [A, B, C][]): [A, C, B][] => rows.map(([a, b, c]) => [a, c, b]);

/** Trusted keys from [version, secret, retireAtMs?] entries, prepared by the adapter. */
export function trustedKeys(adapter: ProviderAdapter, ...entries: [string, string, number?][]): TrustedKey[] {
  return entries.map(([version, s, retireAtMs]) => ({ version, key: adapter.prepareSecret(s), retireAtMs }));
}

/** Parse + verify over header pairs; the matched version or null. For adapters that verify synchronously. */
export function verifyWith(adapter: ProviderAdapter, pairs: [string, string][], body: Buffer | string, ks: TrustedKey[], nowMs = Date.now()): string | null {
  const meta = adapter.parseSignature(view(pairs));
  const r = adapter.verify(meta, Buffer.from(body), ks, nowMs);
  if (r instanceof Promise) throw new Error(`${adapter.name} verifies asynchronously: use verifyWithAsync`);
  return r?.version ?? null;
}

/** Parse + verify over header pairs, for adapters whose verify may be async (PayPal). */
export async function verifyWithAsync(adapter: ProviderAdapter, pairs: [string, string][], body: Buffer | string, ks: TrustedKey[], nowMs = Date.now()): Promise<string | null> {
  const meta = adapter.parseSignature(view(pairs));
  return (await adapter.verify(meta, Buffer.from(body), ks, nowMs))?.version ?? null;
}
