import type { EndpointConfig } from '../config/schema.js';
import { HandlerError } from '../errors.js';
import { eventMatcher, isUnmatchableGlob } from '../http/event-filter.js';
import { PROVIDERS } from '../providers/registry.js';
import type { Row } from '../store/work-port.js';

/** What a handler receives: the verified event, parsed, with its inbox identity. */
export interface InboxEvent {
  readonly inboxId: string;
  readonly provider: string;
  readonly endpointId: string;
  /** The provider's stable event id (the de-duplication key within provider + endpoint). */
  readonly providerEventId: string;
  readonly type: string;
  readonly objectId: string | null;
  readonly objectVersion: string | null;
  readonly receivedAt: Date;
  /** 1 on the first attempt. */
  readonly attempt: number;
  /**
   * `signature`: the bytes were verified. `fetch-required`: an unsigned notice (Mollie classic) —
   * `payload` says only WHICH resource changed; fetch its state from the provider, never trust it.
   */
  readonly verification: 'signature' | 'fetch-required';
  /** The stored body, parsed (JSON, or the adapter's format, e.g. form fields), on first access. */
  readonly payload: unknown;
  /** The exact verified bytes (decrypted on first access). */
  readonly raw: Buffer;
}

/**
 * The handler's transaction on the inbox database (PostgreSQL `$1` placeholders, SQLite `?`).
 * One statement per query; transaction control (COMMIT, ROLLBACK, SAVEPOINT…) is refused:
 * FAILED `handler_transaction_control` (engine/tx-control.ts).
 */
export interface HandlerTx {
  readonly kind: 'sqlite' | 'postgres';
  query<R extends Row = Row>(sql: string, params?: readonly unknown[]): Promise<R[]>;
}

export interface HandlerContext {
  /** Commits together with the processed marker and the inbox row's move to PROCESSED. */
  readonly tx: HandlerTx;
  /**
   * Records an external effect in the same transaction; the effects runner executes it after
   * commit with the idempotency key `<inbox_id>:<name>`. One effect per name per event: a name
   * another handler of the event recorded already throws (`effect_name_taken`, the event FAILED).
   */
  effect(name: string, data: unknown): void;
}

export type Handler = (event: InboxEvent, ctx: HandlerContext) => Promise<void> | void;

export interface HandlerOptions {
  /**
   * The handler's name: the processed-marker consumer (`handler:<name>`), so two handlers of
   * one event type are tracked apart. Default: the type pattern. Keep it stable across deploys.
   */
  readonly name?: string;
  /** Recorded on the inbox row as `<name>@<version>` (default "1"). */
  readonly version?: string;
  /** Only events of this provider / endpoint (default: any). */
  readonly provider?: string;
  readonly endpoint?: string;
  /**
   * false: the handler uses only the event's identity (ids, type, object id and version) — e.g.
   * it fetches the authoritative state from the provider — so the worker does not read or
   * decrypt the stored body for it, and `event.payload` / `event.raw` throw. Default true.
   */
  readonly readsPayload?: boolean;
}

export interface RegisteredHandler {
  readonly name: string;
  /** As given in HandlerOptions (checked against the config's endpoints at start). */
  readonly provider: string | undefined;
  readonly endpoint: string | undefined;
  readonly version: string;
  readonly consumer: string;
  readonly readsPayload: boolean;
  readonly fn: Handler;
  matches(provider: string, endpointId: string, type: string): boolean;
}

export interface EffectContext {
  /** `<inbox_id>:<effect name>`: pass it downstream so a repeated execution is a no-op there. */
  readonly idempotencyKey: string;
  readonly inboxId: string;
  readonly attempt: number;
}

export type EffectExecutor = (data: unknown, ctx: EffectContext) => Promise<void> | void;

/** How a handler's processed-marker consumer begins (`handler:<name>`; a forward's: `destination:<id>`). */
export const HANDLER_CONSUMER = 'handler:';

/** In-process handlers and effect executors, registered by library users. */
export class HandlerRegistry {
  private readonly handlers: RegisteredHandler[] = [];
  private readonly executors = new Map<string, EffectExecutor>();

  /** Set by the first start: registering later would race the workers (see `sealFor`). */
  private sealed = false;

  on(typePattern: string, fn: Handler, opts: HandlerOptions = {}): this {
    this.refuseAfterStart(`handler "${opts.name ?? typePattern}"`);
    // A JS module's slip (a misspelt export: undefined) retried every event it matched until FAILED.
    if (typeof fn !== 'function') throw new HandlerError(`handler "${opts.name ?? typePattern}": not a function (${typeof fn}), so every event it matches would fail`);
    // As the config refuses such an `events` glob: a slip (' payment_intent.*', a trailing newline)
    // would match no event type, and every event meant for this handler would end unsupported_type.
    if (typePattern === '' || isUnmatchableGlob(typePattern)) {
      throw new HandlerError(`handler type pattern ${JSON.stringify(typePattern)} is empty or has surrounding whitespace or a control character, so it would match no event type`);
    }
    // An endpoint's provider is always one of these: any other name ('Stripe') would match nothing.
    if (opts.provider !== undefined && !Object.hasOwn(PROVIDERS, opts.provider)) {
      throw new HandlerError(`handler option provider: unknown provider ${JSON.stringify(opts.provider)}, so the handler would never run (known: ${Object.keys(PROVIDERS).join(', ')})`);
    }
    const name = opts.name ?? typePattern;
    const consumer = `${HANDLER_CONSUMER}${name}`;
    if (this.handlers.some((h) => h.consumer === consumer)) throw new HandlerError(`a handler named "${name}" is already registered; give it options.name`);
    const typeMatches = eventMatcher([typePattern]);
    this.handlers.push({
      name,
      provider: opts.provider,
      endpoint: opts.endpoint,
      version: opts.version ?? '1',
      consumer,
      readsPayload: opts.readsPayload ?? true,
      fn,
      matches: (provider, endpointId, type) =>
        (opts.provider === undefined || opts.provider === provider) && (opts.endpoint === undefined || opts.endpoint === endpointId) && typeMatches(type),
    });
    return this;
  }

  effect(name: string, fn: EffectExecutor): this {
    this.refuseAfterStart(`effect executor "${name}"`);
    if (typeof name !== 'string' || name === '') throw new HandlerError(`effect executor name must be a non-empty string (as ctx.effect's), not ${name === '' ? 'an empty string' : typeof name}`);
    // Taken so, it made each of its effects FAILED unsupported_effect, "no executor registered".
    if (typeof fn !== 'function') throw new HandlerError(`effect executor "${name}": not a function (${typeof fn}), so every effect of that name would fail`);
    if (this.executors.has(name)) throw new HandlerError(`an effect executor named "${name}" is already registered`);
    this.executors.set(name, fn);
    return this;
  }

  /**
   * Called by startApp / startWorkers before they open anything: every `endpoint` option must name
   * one of `endpoints` (of the handler's `provider`, when both are given), since a typo matched no
   * event and its events ended FAILED unsupported_type. Then no more registrations: a handler added
   * after the workers started would miss the events they had already claimed (FAILED the same way).
   */
  sealFor(endpoints: readonly EndpointConfig[]): void {
    const byId = new Map(endpoints.map((e) => [e.id, e]));
    for (const h of this.handlers) {
      if (h.endpoint === undefined) continue;
      const endpoint = byId.get(h.endpoint);
      if (!endpoint) {
        throw new HandlerError(`handler "${h.name}": option endpoint ${JSON.stringify(h.endpoint)} is not an endpoint of this config, so the handler would never run (endpoints: ${[...byId.keys()].join(', ')})`);
      }
      if (h.provider !== undefined && h.provider !== endpoint.provider) {
        throw new HandlerError(`handler "${h.name}": option endpoint "${h.endpoint}" is a ${endpoint.provider} endpoint, not ${h.provider}, so the handler would never run`);
      }
    }
    this.sealed = true;
  }

  private refuseAfterStart(what: string): void {
    if (this.sealed) {
      throw new HandlerError(`${what} registered after start: register every handler and effect executor before start(), or events claimed meanwhile end FAILED (unsupported_type, unsupported_effect)`);
    }
  }

  match(provider: string, endpointId: string, type: string): RegisteredHandler[] {
    return this.handlers.filter((h) => h.matches(provider, endpointId, type));
  }

  executor(name: string): EffectExecutor | undefined {
    return this.executors.get(name);
  }

  get size(): number {
    return this.handlers.length;
  }

  /** No handler and no effect executor: a process with it records no effect and can run none. */
  get empty(): boolean {
    return this.handlers.length === 0 && this.executors.size === 0;
  }
}
