import { describe, expect, it } from 'vitest';
import { createInbox, HandlerError, HandlerRegistry, parseConfig } from '../../src/index.js';
import { configDoc } from '../helpers/app.js';

/**
 * A handler's type pattern with a slip in it (surrounding whitespace, a trailing newline, empty)
 * matched no event type: registered without a word, it never ran, and the events meant for it
 * ended FAILED unsupported_type. It is refused at registration, as such an `events` glob is in
 * the config.
 */
describe('HandlerRegistry.on: type patterns that can match no event type', () => {
  const fn = () => undefined;

  it('refuses an empty pattern, surrounding whitespace and control characters, naming the pattern', () => {
    for (const bad of ['', ' payment_intent.succeeded', 'payment_intent.*\n', 'charge.refunded ', '\tcharge.*', 'a\u0000b']) {
      expect(() => new HandlerRegistry().on(bad, fn), JSON.stringify(bad)).toThrow(`handler type pattern ${JSON.stringify(bad)} is empty or has surrounding whitespace or a control character`);
      expect(() => createInbox(parseConfig(configDoc('sqlite:/tmp/unused.db'), {})).on(bad, fn), JSON.stringify(bad)).toThrow(/would match no event type/);
    }
  });

  it('still takes the patterns that can match (an inner space included)', () => {
    const r = new HandlerRegistry().on('payment_intent.*', fn).on('*', fn).on('odd type', fn);
    expect(r.size).toBe(3);
    expect(r.match('stripe', 'stripe', 'payment_intent.succeeded').map((h) => h.name)).toEqual(['payment_intent.*', '*']);
  });
});

/**
 * options.provider naming no provider ('Stripe', 'stripe ') matched no event: the handler never
 * ran and its events ended FAILED unsupported_type. Refused at registration.
 */
describe('HandlerRegistry.on: options.provider', () => {
  const fn = () => undefined;

  it('refuses a provider name that no endpoint can have, naming it', () => {
    for (const bad of ['Stripe', 'stripe ', '', 'constructor']) {
      expect(() => new HandlerRegistry().on('*', fn, { provider: bad }), bad).toThrow(`handler option provider: unknown provider ${JSON.stringify(bad)}`);
    }
  });

  it('takes a known provider, and matches only its events', () => {
    const r = new HandlerRegistry().on('*', fn, { provider: 'stripe' });
    expect(r.match('stripe', 'any', 'charge.refunded')).toHaveLength(1);
    expect(r.match('github', 'any', 'push')).toHaveLength(0);
  });
});

/**
 * A JS handlers module registering what is not a function (`inbox.effect('send-receipt',
 * mailer.sendReciept)`: a typo, undefined) was taken without a word. An executor so registered
 * made every such effect FAILED unsupported_effect, "no executor registered", though one was; a
 * handler so registered made each of its events retry `h.fn is not a function` until FAILED.
 * Refused at registration, naming it, as the other registrations that could never run are.
 */
describe('HandlerRegistry: a handler or an executor that is not a function', () => {
  it('refuses on() and effect() without a function, and an effect name that is not a non-empty string', () => {
    expect(() => new HandlerRegistry().on('payment_intent.succeeded', undefined as never)).toThrow(/handler "payment_intent.succeeded": not a function \(undefined\)/);
    expect(() => new HandlerRegistry().effect('send-receipt', undefined as never)).toThrow(/effect executor "send-receipt": not a function \(undefined\)/);
    expect(() => new HandlerRegistry().effect('send-receipt', 'mailer' as never)).toThrow(HandlerError);
    expect(() => new HandlerRegistry().effect('', () => undefined)).toThrow(/effect executor name must be a non-empty string/);
    expect(() => new HandlerRegistry().effect(undefined as never, () => undefined)).toThrow(HandlerError);
    expect(new HandlerRegistry().on('*', async () => undefined).effect('send-receipt', async () => undefined).size).toBe(1);
  });
});
