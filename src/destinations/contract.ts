/**
 * One destination contract for every transport. `deliver` resolves once the destination has
 * durably taken the event (HTTP 2xx, JetStream ack, RabbitMQ publisher confirm) and otherwise
 * throws a RetryableError / NeedsDecisionError (src/engine/failure.ts) with a short reason
 * such as `http_503`, `timeout`, `connection`. Delivery is at-least-once: every transport
 * carries the inbox id as its idempotency key so the receiver can drop a second copy.
 */
export interface DeliveryEvent {
  readonly inboxId: string;
  readonly provider: string;
  readonly endpointId: string;
  readonly providerEventId: string;
  readonly eventType: string;
  readonly receivedAtMs: number;
  /** The exact verified bytes the provider sent (HTTP forward); brokers carry metadata only. */
  readonly body?: Buffer;
  /** `fetch-required`: an unsigned notice (Mollie classic) — the receiver must fetch the state, not trust the body. */
  readonly verification?: 'signature' | 'fetch-required';
}

export interface Destination {
  readonly id: string;
  readonly type: DestinationType;
  deliver(event: DeliveryEvent): Promise<void>;
  close(): Promise<void>;
}

export type DestinationType = 'http' | 'nats' | 'rabbitmq';

/** Brokers are published to by the outbox relay; the others are delivered by the inbox worker. */
export const isBrokerType = (type: DestinationType): boolean => type === 'nats' || type === 'rabbitmq';

/** Broker message body: the inbox id and the event's metadata — never the provider payload. */
export function brokerMessage(e: DeliveryEvent): string {
  return JSON.stringify({
    inbox_id: e.inboxId,
    provider: e.provider,
    endpoint_id: e.endpointId,
    provider_event_id: e.providerEventId,
    event_type: e.eventType,
    received_at: new Date(e.receivedAtMs).toISOString(),
  });
}

/** `webhooks.{provider}.{type}` → `webhooks.stripe.payment_intent.succeeded`. */
export function expandTemplate(template: string, e: DeliveryEvent): string {
  return template.replace(/\{(provider|type|endpoint)\}/g, (_, k: string) =>
    k === 'provider' ? e.provider : k === 'type' ? e.eventType : e.endpointId);
}
