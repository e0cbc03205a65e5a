import type { IncomingMessage } from 'node:http';
import { IngressError } from '../errors.js';
import type { RequestView } from '../providers/contract.js';

/**
 * The adapter's view of a request. Repeated headers are seen as they arrived
 * (`headersDistinct`), never comma-joined, so a second signature header cannot hide.
 */
export function requestView(req: IncomingMessage): RequestView {
  const distinct = req.headersDistinct;
  const ct = req.headers['content-type'];
  const semi = ct === undefined ? -1 : ct.indexOf(';');
  return {
    single(name) {
      const values = distinct[name];
      if (values === undefined) return undefined;
      if (values.length > 1) throw new IngressError('ambiguous_signature', `header ${name} appears ${values.length} times`);
      return values[0];
    },
    all(name) {
      return distinct[name] ?? [];
    },
    mediaType: ct === undefined ? '' : (semi < 0 ? ct : ct.slice(0, semi)).trim().toLowerCase(),
    target: req.url ?? '/',
  };
}
