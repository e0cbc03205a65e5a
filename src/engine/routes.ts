import type { DestinationConfig, RetryPolicy } from '../config/engine.js';
import type { EndpointConfig } from '../config/schema.js';
import { isBrokerType, type Destination } from '../destinations/contract.js';
import { eventMatcher } from '../http/event-filter.js';

export interface Target {
  readonly destination: Destination;
  /** The route's own policy, else its endpoint's. */
  readonly retry: RetryPolicy;
  /** The processed-marker consumer for this destination. */
  readonly consumer: string;
}

export interface EventRoutes {
  /** Delivered by the inbox worker (HTTP forward). */
  readonly direct: readonly Target[];
  /** Published by the outbox relay (NATS, RabbitMQ). */
  readonly brokers: readonly Target[];
}

/**
 * Whether an event type of this endpoint has a broker route — decided at accept time, so an
 * outbox row with nothing to publish is written already published and the relay never
 * touches it. A broker route added later applies to events accepted after the change, and to
 * events still waiting for the worker then: its settle makes their rows due (BatchOutcome.relayed).
 */
export function brokerRouteMatcher(ep: EndpointConfig, destinations: readonly DestinationConfig[]): (type: string) => boolean {
  const brokerIds = new Set(destinations.filter((d) => isBrokerType(d.type)).map((d) => d.id));
  const globs = ep.routes.filter((r) => brokerIds.has(r.destination)).flatMap((r) => r.events);
  return globs.length === 0 ? () => false : eventMatcher(globs);
}

/** Every route whose `events` match receives the event (fan-out), each destination once. */
export class Router {
  private readonly byEndpoint = new Map<string, { matches: (type: string) => boolean; target: Target }[]>();

  constructor(endpoints: readonly EndpointConfig[], destinations: ReadonlyMap<string, Destination>) {
    for (const ep of endpoints) {
      this.byEndpoint.set(ep.id, ep.routes.map((r) => {
        const destination = destinations.get(r.destination);
        if (!destination) throw new Error(`route destination "${r.destination}" is not open`);
        return { matches: eventMatcher(r.events), target: { destination, retry: r.retry ?? ep.retry, consumer: `destination:${destination.id}` } };
      }));
    }
  }

  /** undefined = the endpoint is no longer configured. */
  route(endpointId: string, type: string): EventRoutes | undefined {
    const routes = this.byEndpoint.get(endpointId);
    if (!routes) return undefined;
    const direct: Target[] = [];
    const brokers: Target[] = [];
    for (const r of routes) {
      if (!r.matches(type)) continue;
      const list = isBrokerType(r.target.destination.type) ? brokers : direct;
      if (!list.some((t) => t.destination === r.target.destination)) list.push(r.target);
    }
    return { direct, brokers };
  }
}
