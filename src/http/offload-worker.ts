/**
 * The parse-and-seal thread (offload.ts is its main side). It only ever sees bodies whose
 * signature and freshness the main thread has already checked: it runs step 7 of the ingress
 * pipeline (the adapter's `envelope`) and the sealing of step 8 for one large body at a time.
 */
import { parentPort } from 'node:worker_threads';
import { sealPayload, sha256, type SealingKey } from '../crypto/payload-cipher.js';
import { IngressError } from '../errors.js';
import { bytes, exitOnUnreadableRequest, lowerThisThreadsPriority } from '../threads.js';
import type { ProviderAdapter, SignatureMetadata } from '../providers/contract.js';
import { PROVIDERS } from '../providers/registry.js';
import { storableEnvelope } from '../providers/storable.js';
import { OFFLOAD_THREAD_NICE_STEPS } from './offload.js';
import { viewOf, type RequestSnapshot } from './request-view.js';

export interface OffloadRequest {
  readonly id: number;
  readonly provider: string;
  readonly options: Record<string, unknown> | undefined;
  readonly endpointId: string;
  readonly snapshot: RequestSnapshot;
  readonly meta: SignatureMetadata;
  readonly body: Uint8Array;
  readonly sealingKey: SealingKey;
}

const adapters = new Map<string, ProviderAdapter>();
function adapterFor(provider: string, options: Record<string, unknown> | undefined): ProviderAdapter {
  const key = `${provider}\u0000${JSON.stringify(options ?? null)}`;
  let a = adapters.get(key);
  if (!a) adapters.set(key, (a = PROVIDERS[provider]!(options, 'options')));
  return a;
}

exitOnUnreadableRequest();
lowerThisThreadsPriority(OFFLOAD_THREAD_NICE_STEPS);
parentPort!.on('message', (m: OffloadRequest) => {
  try {
    const body = bytes(m.body);
    // Made storable here, where the body is (its UTF-8 check needs it; ingress.ts does not repeat it).
    const { payload, ...envelope } = storableEnvelope(adapterFor(m.provider, m.options).envelope(body, viewOf(m.snapshot), m.meta), body);
    const stored = payload ?? body;
    const sealed = sealPayload(stored, m.sealingKey, { provider: m.provider, endpointId: m.endpointId, providerEventId: envelope.eventId });
    // seal() gives the ciphertext its own memory: it moves back without a copy.
    parentPort!.postMessage({ id: m.id, ok: true, envelope, payloadHash: sha256(stored), sealed }, [sealed.ciphertext.buffer as ArrayBuffer]);
  } catch (err) {
    const e = err as Error;
    parentPort!.postMessage(err instanceof IngressError
      ? { id: m.id, ok: false, reason: err.reason, detail: err.detail }
      : { id: m.id, ok: false, message: e?.message ?? String(err) });
  }
});
