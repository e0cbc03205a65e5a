import type { IncomingMessage } from 'node:http';
import { IngressError } from '../errors.js';
import type { RequestView } from '../providers/contract.js';

/** A request's headers and target as plain data: what a view is built from, on any thread. */
export interface RequestSnapshot {
  /** Every header as it arrived (`headersDistinct`): repeated ones are never comma-joined. */
  readonly headers: Readonly<Record<string, readonly string[] | undefined>>;
  readonly contentType: string | undefined;
  readonly target: string;
}

export function requestSnapshot(req: IncomingMessage): RequestSnapshot {
  return { headers: req.headersDistinct, contentType: req.headers['content-type'], target: req.url ?? '/' };
}

/** Own keys only: a snapshot cloned to another thread is a plain object ("constructor" is inherited). */
const own = (h: RequestSnapshot['headers'], name: string) => (Object.hasOwn(h, name) ? h[name] : undefined);

/**
 * The adapter's view of a request. Repeated headers are seen as they arrived
 * (`headersDistinct`), never comma-joined, so a second signature header cannot hide.
 */
export function viewOf(s: RequestSnapshot): RequestView {
  const ct = s.contentType;
  const semi = ct === undefined ? -1 : ct.indexOf(';');
  return {
    single(name, repeated = 'ambiguous_signature') {
      const values = own(s.headers, name);
      if (values === undefined) return undefined;
      if (values.length > 1) throw new IngressError(repeated, `header ${name} appears ${values.length} times`);
      return values[0];
    },
    all(name) {
      return own(s.headers, name) ?? [];
    },
    mediaType: ct === undefined ? '' : (semi < 0 ? ct : ct.slice(0, semi)).trim().toLowerCase(),
    target: s.target,
  };
}
