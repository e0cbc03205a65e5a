import { IncomingMessage } from 'node:http';
import { Socket } from 'node:net';
import { setImmediate as nextTurn } from 'node:timers/promises';
import { IngressError, type Reason } from '../errors.js';

/**
 * Each accepted body is held twice until its commit: the raw bytes and their ciphertext.
 * The budget counts both, so `maxInFlightBodyBytes` bounds what the bodies really occupy.
 */
export const IN_MEMORY_COPIES = 2;

/** A body's first second is free of the pace rule (connection start-up, the first window). */
const PACE_GRACE_MS = 1000;
const PACE_CHECK_MS = 500;

/**
 * A process-wide cap on request-body bytes held in memory. Under a flood of large bodies the
 * server answers 503 + Retry-After (the provider retries later) instead of growing without bound.
 */
export class BodyBudget {
  used = 0;
  /**
   * @param limit bytes held at once, over all requests.
   * @param minBytesPerSecond the pace a body holding a reservation must keep (0 = none): see readBody.
   */
  constructor(readonly limit: number, readonly minBytesPerSecond = 0) {}

  /** Whether a body of `bodyBytes` would fit now, both its copies (nothing is reserved). */
  hasRoomForBody(bodyBytes: number): boolean {
    return this.fits(bodyBytes * IN_MEMORY_COPIES);
  }

  private fits(n: number): boolean {
    return this.used + n <= this.limit;
  }

  tryReserve(n: number): boolean {
    if (!this.fits(n)) return false;
    this.used += n;
    return true;
  }

  release(n: number): void {
    this.used -= n;
  }
}

/**
 * Reads the exact raw bytes of the body, never more than `maxBytes`. With a Content-Length
 * the bytes are reserved up front and copied into one buffer (so an admitted body is never cut
 * off for want of room: under a flood of large bodies the others get 503 at once, unread); a
 * chunked body reserves as it streams and is cut off (413) as soon as it passes the limit.
 * A reservation must be paid for in bytes: after the first second, a body that has arrived slower
 * than `budget.minBytesPerSecond` is cut off (408 body_too_slow), so idle or trickling uploads that
 * declared large bodies cannot hold the budget and turn every other sender away for as long as
 * the request timeout. The caller must call `budget.release(reserved)` when it no longer holds the body.
 */
export function readBody(
  req: IncomingMessage,
  maxBytes: number,
  budget: BodyBudget,
  declaredLength: number | null,
  /** Resolves when the sender has been invited to send the body (100 Continue written): the pace counts from then. */
  invited?: Promise<unknown>,
): Promise<{ body: Buffer; reserved: number }> {
  return new Promise((resolve, reject) => {
    let reserved = 0;
    let received = 0;
    let done = false;
    // The error is built only when it is the outcome: 'close' fires after every request.
    const fail = (reason: Reason, detail: string) => {
      if (done) return;
      done = true;
      clearTimeout(pace);
      req.off('data', onData);
      budget.release(reserved);
      reject(new IngressError(reason, detail));
    };

    // The pace check. A sender waiting for 100 Continue sends nothing before it, and the 100 may
    // wait behind the answers still owed on the connection: the pace counts from when it is written.
    let started = performance.now();
    const minRate = budget.minBytesPerSecond;
    const checkPace = () => {
      const owed = (minRate * (performance.now() - started - PACE_GRACE_MS)) / 1000;
      if (received < owed) return fail('body_too_slow', `body arrived slower than ${minRate} bytes/s`);
      pace = setTimeout(checkPace, PACE_CHECK_MS);
    };
    let pace: NodeJS.Timeout | undefined;
    // Started a microtask later, by when a body that came in the same read as its headers (most
    // do) has been delivered: it then needs no timer at all. One that has not gets its timer, due
    // as if set when the read began; only the saving depends on that order. A timer set and
    // cleared per request was ~1 % of the event loop's time at PostgreSQL's top rate (timer-list
    // insert and removal, the Timeout object); deferred, timers are ~0.1 % and the microtask ~0.25 %.
    const startPace = () => {
      if (done || minRate <= 0 || (declaredLength !== null && received >= declaredLength)) return;
      pace = setTimeout(checkPace, PACE_GRACE_MS + PACE_CHECK_MS - (performance.now() - started));
    };
    if (invited) {
      void invited.then(() => {
        started = performance.now();
        startPace();
      });
    } else {
      queueMicrotask(startPace);
    }

    // With a Content-Length: the body when it came in one chunk (most do: it is kept as it is, with
    // no copy), else the one buffer its chunks are copied into, allocated at the first.
    let whole: Buffer | null = null;
    let target: Buffer | null = null;
    const chunks: Buffer[] = [];
    if (declaredLength !== null) {
      if (!budget.tryReserve(declaredLength * IN_MEMORY_COPIES)) return fail('overloaded', 'too many body bytes in flight');
      reserved = declaredLength * IN_MEMORY_COPIES;
    }

    function onData(chunk: Buffer) {
      if (done) return;
      if (received + chunk.length > maxBytes) return fail('payload_too_large', `body exceeds ${maxBytes} bytes`);
      if (declaredLength !== null) {
        // Node's parser never delivers more than Content-Length bytes for this request, and each
        // chunk is memory of its own socket read, never reused, so keeping it is safe.
        if (received === 0 && chunk.length === declaredLength) whole = chunk;
        else chunk.copy((target ??= Buffer.allocUnsafe(declaredLength)), received);
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
      if (declaredLength !== null && received !== declaredLength) return fail('request_aborted', 'body shorter than Content-Length');
      done = true;
      clearTimeout(pace);
      const body = declaredLength !== null ? (whole ?? target ?? Buffer.alloc(0)) : chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks, received);
      resolve({ body, reserved });
    });
    req.once('aborted', () => fail('request_aborted', 'client aborted the request'));
    req.once('error', () => fail('request_aborted', 'request stream failed'));
    req.once('close', () => fail('request_aborted', 'connection closed before the body ended'));
  });
}

/**
 * Runs a body in several chunks through readBody and Node's body stream once per process (V8's
 * type feedback is the process's: a second app started in it has nothing to gain), before the
 * first request, with nothing received, stored, counted or logged (~7 ms). Why: a body that
 * came with its head is buffered before the first read, while later chunks of a large one are
 * emitted as they arrive, through other branches of the same functions. V8 optimised those on
 * the small bodies alone and threw the code away at the first large body: a cold server
 * under load then fell behind. Once both shapes are seen before any optimisation, on a slow
 * 2-core box at 2,000 req/s on PostgreSQL, 20 alternating pairs: p99 ≤ 50 ms in 17 against 9,
 * server CPU per request lower in 16 (median 300 against 318 µs) (bench/RESULTS.md, 2026-12-07 18:45).
 */
export function warmBodyPath(): Promise<void> {
  return (warmed ??= runBodiesThroughReader());
}
let warmed: Promise<void> | undefined;

async function runBodiesThroughReader(): Promise<void> {
  const CHUNK = 64 * 1024;
  for (let n = 0; n < 3; n++) {
    const req = new IncomingMessage(new Socket());
    const read = readBody(req, 3 * CHUNK, new BodyBudget(3 * CHUNK * IN_MEMORY_COPIES), 3 * CHUNK);
    req.push(Buffer.alloc(CHUNK)); // before the first read: buffered, as a body that came with its head
    await nextTurn();
    req.push(Buffer.alloc(CHUNK)); // flowing by now: emitted at once, as a large body's later chunks
    await nextTurn();
    req.push(Buffer.alloc(CHUNK));
    req.complete = true; // as Node's parser marks a whole message before it ends the stream
    req.push(null);
    await read;
  }
}

/** Content-Length as a number, null when absent; throws on a malformed or conflicting value. */
export function declaredContentLength(req: IncomingMessage): number | null {
  const raw = req.headers['content-length'];
  if (raw === undefined) return null;
  // Leading zeros do not change the value (RFC 9110 §8.6: 1*DIGIT), and Node frames the body by it.
  const digits = raw.replace(/^0+(?=\d)/, '');
  // More digits than any limit: too large (413), not malformed.
  if (/^\d{16,}$/.test(digits)) return Infinity;
  if (!/^\d{1,15}$/.test(digits)) throw new IngressError('bad_content_length', 'Content-Length is not a single decimal number');
  return Number(digits);
}
