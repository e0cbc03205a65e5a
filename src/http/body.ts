import type { IncomingMessage } from 'node:http';
import { IngressError, type Reason } from '../errors.js';

/**
 * Each accepted body is held twice until its commit: the raw bytes and their ciphertext.
 * The budget counts both, so `maxInFlightBodyBytes` bounds what the bodies really occupy.
 */
const IN_MEMORY_COPIES = 2;

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
    // The error is built only when it is the outcome: 'close' fires after every request.
    const fail = (reason: Reason, detail: string) => {
      if (done) return;
      done = true;
      req.off('data', onData);
      budget.release(reserved);
      reject(new IngressError(reason, detail));
    };

    let target: Buffer | null = null;
    const chunks: Buffer[] = [];
    if (declaredLength !== null) {
      if (!budget.tryReserve(declaredLength * IN_MEMORY_COPIES)) return fail('overloaded', 'too many body bytes in flight');
      reserved = declaredLength * IN_MEMORY_COPIES;
      target = Buffer.allocUnsafe(declaredLength);
    }

    function onData(chunk: Buffer) {
      if (done) return;
      if (received + chunk.length > maxBytes) return fail('payload_too_large', `body exceeds ${maxBytes} bytes`);
      if (target) {
        // Node's parser never delivers more than Content-Length bytes for this request.
        chunk.copy(target, received);
      } else {
        if (!budget.tryReserve(chunk.length * IN_MEMORY_COPIES)) return fail('overloaded', 'too many body bytes in flight');
        reserved += chunk.length * IN_MEMORY_COPIES;
        chunks.push(chunk);
      }
      received += chunk.length;
    }

    req.on('data', onData);
    req.once('end', () => {
      if (done) return;
      if (target && received !== target.length) return fail('request_aborted', 'body shorter than Content-Length');
      done = true;
      resolve({ body: target ?? (chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks, received)), reserved });
    });
    req.once('aborted', () => fail('request_aborted', 'client aborted the request'));
    req.once('error', () => fail('request_aborted', 'request stream failed'));
    req.once('close', () => fail('request_aborted', 'connection closed before the body ended'));
  });
}

/** Content-Length as a number, null when absent; throws on a malformed or conflicting value. */
export function declaredContentLength(req: IncomingMessage): number | null {
  const raw = req.headers['content-length'];
  if (raw === undefined) return null;
  if (!/^\d{1,15}$/.test(raw)) throw new IngressError('bad_content_length', 'Content-Length is not a single decimal number');
  return Number(raw);
}
