import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { DeliveryEvent } from '../../src/destinations/contract.js';
import { NeedsDecisionError, RetryableError } from '../../src/engine/failure.js';

/** The typed failure a delivery rejects with (anything else fails the test). */
export async function failureOf(p: Promise<unknown>): Promise<RetryableError | NeedsDecisionError> {
  try {
    await p;
  } catch (e) {
    if (e instanceof RetryableError || e instanceof NeedsDecisionError) return e;
    throw e;
  }
  throw new Error('expected the delivery to fail');
}

/** A loopback port nothing listens on (bound, then released). */
export async function closedPort(): Promise<number> {
  const s = createServer();
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', r));
  const port = (s.address() as AddressInfo).port;
  await new Promise<void>((r) => s.close(() => r()));
  return port;
}

/** A unique suffix for broker objects, so parallel or repeated runs never share a stream or queue. */
export const uniqueName = (prefix: string): string => `${prefix}_${process.pid}_${Date.now().toString(36)}_${Math.random().toString(36).slice(2, 8)}`;

export function deliveryEvent(over: Partial<DeliveryEvent> = {}): DeliveryEvent {
  return {
    inboxId: `0190a1b2-c3d4-7e5f-8a9b-${Math.random().toString(16).slice(2, 14).padEnd(12, '0')}`,
    provider: 'stripe',
    endpointId: 'stripe-main',
    providerEventId: 'evt_1',
    eventType: 'payment_intent.succeeded',
    receivedAtMs: Date.UTC(2025, 0, 2, 3, 4, 5, 678),
    ...over,
  };
}
