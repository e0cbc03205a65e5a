import type { EndpointConfig } from '../config/schema.js';
import type { PayloadCipher, SealedPayload } from '../crypto/payload-cipher.js';
import { IngressError, type Reason } from '../errors.js';
import type { Envelope, ProviderAdapter, SignatureMetadata } from '../providers/contract.js';
import { bytes, ownsItsMemory, revivedPayload, startWorker, WorkerCalls } from '../threads.js';
import type { OffloadRequest } from './offload-worker.js';
import type { RequestSnapshot } from './request-view.js';

/** A large body's step 7 (its envelope) and the sealing of step 8, done on the helper thread. */
export interface Offloaded {
  readonly envelope: Envelope;
  readonly payloadHash: Buffer;
  readonly payload: SealedPayload;
}

type Reply =
  | { id: number; ok: true; envelope: Envelope; payloadHash: Uint8Array; sealed: { keyId: string; nonce: Uint8Array; ciphertext: Uint8Array } }
  | { id: number; ok: false; reason?: Reason; detail?: string; message?: string };

/** Below this, the round trip to the helper thread costs more than the parse it saves. */
export const DEFAULT_OFFLOAD_BODY_BYTES = 256 * 1024;

/**
 * How many nice steps the helper thread runs below the thread that started it (Linux; the event
 * loop keeps its own). A 1 MiB body's parse and seal is ~8 ms of CPU that only its own request
 * waits for, while the event loop and the SQLite writer serve every request: on a busy box they
 * go first, and the helper uses the CPU they leave. On 2 cores at 2,000 req/s, 0.3 % of bodies at
 * 1 MiB, SQLite, 6 alternating pairs: ack p99 36.6–64.1 ms (median 52.6) against 53.6–146 (median
 * 61); PostgreSQL within the noise (bench/RESULTS.md, 2026-12-01 "Latest").
 */
export const OFFLOAD_THREAD_NICE_STEPS = 10;

/**
 * limits.offloadBodyBytes, or its default: on in a process that only receives (`serve` with
 * `workers.enabled: false`, beside a `webhook-inbox work` process), off where the workers share
 * the process. Measured on 2 cores (bench/RESULTS.md, 2026-11-30): receiving alone, the helper
 * thread took ingress p99 at 2,000 req/s from 52–125 ms to 34–56 ms; with the workers in the
 * same process it made it worse (a third busy thread beside the event loop and the SQLite writer).
 */
export function offloadThreshold(configured: number | undefined, workersInProcess: boolean): number {
  return configured ?? (workersInProcess ? 0 : DEFAULT_OFFLOAD_BODY_BYTES);
}

/** Why a verified body went to the helper thread: its size, or an event loop with many requests in progress. */
export type OffloadReason = 'large' | 'busy';

/**
 * limits.offloadWhenInFlight's default on PostgreSQL: from this many webhook requests in progress
 * (received, not yet answered), every verified body goes to the helper thread, not only a large
 * one. There the event loop is the bottleneck at high rates (the database works in its own
 * process), and a small body's parse, hash and seal (~35 µs of a 10 KiB event) cost it more than
 * the round trip to the thread does once messages come many per wake-up. Measured on 2 cores
 * (bench/RESULTS.md, 2026-12-06 21:30): at 6,500-7,000 req/s the server achieved 6,077-6,468
 * req/s against 5,689-5,934 without it (with no hold); at 2,000 req/s it is reached only in
 * bursts, which BUSY_HOLD_MS leaves alone; a threshold of 64 came too late (p99 at 6,000 req/s
 * 277-326 ms against 48-97 at 16). On SQLite it is off: its writer thread is ours too and needs that core
 * (at 6,500 req/s p99 265 against 63 ms, more CPU per request). On a slow machine whose cores are
 * full at the top rate it loses (2026-12-07 05:30: at 3,500 req/s p99 ≤ 500 ms in 1 of 8 pairs
 * against 6 of 8 with 0); the default follows the fast machines, where 3× Express is at stake.
 */
export const DEFAULT_OFFLOAD_WHEN_IN_FLIGHT = 16;

/**
 * "Busy" must last this long (every request sampled at its step 7 at or over whenInFlight since)
 * before small bodies go: a stall of the box at a moderate rate also piles up requests for ~100 ms,
 * and handing them to a thread 10 nice steps down then lengthened it (at 2,000 req/s p99 worse in
 * 12 of 15 alternating pairs with thresholds 8-48 and no hold); a server past what its event loop
 * can do stays busy. With 250 ms, 12 pairs at 2,000 req/s: median p99 27.7 against 25.5 ms, over
 * 50 ms once each (no difference the pairs can show); at 6,500 req/s still 6-7 % more achieved
 * (bench/RESULTS.md, 2026-12-06 21:30).
 */
export const BUSY_HOLD_MS = 250;

/** limits.offloadWhenInFlight, or its default for the store (0 = only large bodies go to the helper thread). */
export function offloadWhenInFlight(configured: number | undefined, store: 'sqlite' | 'postgres'): number {
  return configured ?? (store === 'postgres' ? DEFAULT_OFFLOAD_WHEN_IN_FLIGHT : 0);
}

/**
 * One helper thread that parses and seals large verified bodies, so the event loop never holds
 * a 1 MiB JSON.parse, its 1 MiB strings and their garbage while every other request waits
 * (measured: event-loop delay max 63 ms at 2,000 req/s with 0.3 % of bodies at 1 MiB). Small
 * bodies stay on the event loop while it has time for them: one at a time, the round trip costs
 * more than the parse; with many requests in progress (whenInFlight) they go too. Verification
 * never moves: only bytes whose signature and freshness were checked are sent here.
 */
export class OffloadLane {
  /** When the requests in progress last reached whenInFlight (undefined: below it at the last sample). */
  private busySince: number | undefined;
  // A dead thread fails the requests it held (nothing of them was accepted: each answers 503
  // and the provider retries); the next large body starts a new one.
  private readonly calls = new WorkerCalls<Reply>({
    start: () => {
      // The thread builds its own adapters, and an adapter reads the `${env:}` references in its
      // options when built: from the env the app was started with (a library caller's), not
      // from whatever this process's environment holds.
      const w = startWorker(import.meta.url, 'offload-worker', null, this.env);
      w.unref(); // an idle helper never keeps the process alive
      return w;
    },
    settle: (r) => {
      if (r.ok) return { envelope: r.envelope, payloadHash: bytes(r.payloadHash), payload: revivedPayload(r.sealed) };
      if (r.reason) throw new IngressError(r.reason, r.detail);
      throw new Error(`parse thread: ${r.message}`);
    },
    stopped: (cause) => new Error(`parse thread stopped: ${cause.message}`),
  });

  constructor(
    readonly minBytes: number,
    /** From this many requests in progress, smaller bodies go too (0 = never): offloadWhenInFlight. */
    readonly whenInFlight = 0,
    private readonly env: NodeJS.ProcessEnv = process.env,
  ) {}

  /**
   * Whether this verified body goes to the helper thread, and why; undefined = it stays on the
   * event loop. Only single-event adapters with a pure `envelope` (their answer does not depend
   * on which events were accepted): a multi-event adapter may hand verify's work to `envelopes`
   * by Buffer. `inProgress` counts this request too; a small body goes only once that count has
   * stayed at or over whenInFlight for BUSY_HOLD_MS.
   */
  applies(adapter: ProviderAdapter, body: Buffer, inProgress: number): OffloadReason | undefined {
    if (this.minBytes <= 0 || adapter.envelopes || adapter.acceptedReply) return undefined;
    if (body.length >= this.minBytes) return 'large';
    if (this.whenInFlight <= 0 || inProgress < this.whenInFlight) {
      this.busySince = undefined;
      return undefined;
    }
    const now = performance.now();
    this.busySince ??= now;
    return now - this.busySince >= BUSY_HOLD_MS ? 'busy' : undefined;
  }

  /**
   * Resolves with the helper thread's work; after that `body` may be empty (its memory moved
   * there when it owned it). null: this request cannot cross threads (its signature metadata
   * holds an object that does not clone, e.g. PayPal's certificate URL); `body` is untouched
   * and the caller parses on the event loop, as for a small body.
   */
  run(endpoint: EndpointConfig, snapshot: RequestSnapshot, meta: SignatureMetadata, body: Buffer, cipher: PayloadCipher): Promise<Offloaded> | null {
    const msg: Omit<OffloadRequest, 'id'> = {
      provider: endpoint.provider, options: endpoint.adapterOptions, endpointId: endpoint.id, snapshot, meta, body, sealingKey: cipher.sealingKey,
    };
    try {
      // Serialising fails (DataCloneError) before anything is transferred.
      return this.calls.call<Offloaded>(msg, ownsItsMemory(body) ? [body.buffer as ArrayBuffer] : []);
    } catch {
      return null;
    }
  }

  close(): Promise<void> {
    return this.calls.close();
  }
}
