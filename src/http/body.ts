import type { IncomingMessage } from 'node:http';
import { IngressError } from '../errors.js';

/**
 * A process-wide cap on request-body bytes held in memory. Under a flood of large bodies the
 * server answers 503 + Retry-After (the provider retries later) instead of growing without bound.
 */
export class BodyBudget {
  used = 0;
  constructor(readonly limit: number) {}

  tryReserve(n: number): boolean {
    if (this.used + n > this.limit) return false;
    this.used += n;
    return true;
  }

  release(n: number): void {
    this.used -= n;
  }
}

/**
 * Reads the exact raw bytes of the body, never more than `maxBytes`. With a Content-Length
 * the bytes are reserved up front and copied into one buffer; a chunked body reserves as it
 * streams and is cut off (413) as soon as it passes the limit. The caller must call
 * `budget.release(reserved)` when it no longer holds the body.
 */
export function readBody(
  req: IncomingMessage,
  maxBytes: number,
  budget: BodyBudget,
  declaredLength: number | null,
): Promise<{ body: Buffer; reserved: number }> {
  return new Promise((resolve, reject) => {
    let reserved = 0;
    let received = 0;
    let done = false;
    const fail = (err: IngressError) => {
      if (done) return;
      done = true;
      req.off('data', onData);
      budget.release(reserved);
      reject(err);
    };

    let target: Buffer | null = null;
    const chunks: Buffer[] = [];
    if (declaredLength !== null) {
      if (!budget.tryReserve(declaredLength)) return fail(new IngressError('overloaded', 'too many body bytes in flight'));
      reserved = declaredLength;
      target = Buffer.allocUnsafe(declaredLength);
    }

    function onData(chunk: Buffer) {
      if (done) return;
      if (received + chunk.length > maxBytes) return fail(new IngressError('payload_too_large', `body exceeds ${maxBytes} bytes`));
      if (target) {
        // Node's parser never delivers more than Content-Length bytes for this request.
        chunk.copy(target, received);
      } else {
        if (!budget.tryReserve(chunk.length)) return fail(new IngressError('overloaded', 'too many body bytes in flight'));
        reserved += chunk.length;
        chunks.push(chunk);
      }
      received += chunk.length;
    }

    req.on('data', onData);
    req.once('end', () => {
      if (done) return;
      if (target && received !== target.length) return fail(new IngressError('request_aborted', 'body shorter than Content-Length'));
      done = true;
      resolve({ body: target ?? (chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks, received)), reserved });
    });
    req.once('aborted', () => fail(new IngressError('request_aborted', 'client aborted the request')));
    req.once('error', () => fail(new IngressError('request_aborted', 'request stream failed')));
    req.once('close', () => fail(new IngressError('request_aborted', 'connection closed before the body ended')));
  });
}

/** Content-Length as a number, null when absent; throws on a malformed or conflicting value. */
export function declaredContentLength(req: IncomingMessage): number | null {
  const raw = req.headers['content-length'];
  if (raw === undefined) return null;
  if (!/^\d{1,15}$/.test(raw)) throw new IngressError('bad_content_length', 'Content-Length is not a single decimal number');
  return Number(raw);
}
