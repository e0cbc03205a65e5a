import { describe, expect, it } from 'vitest';
import { createInbox, HandlerRegistry, parseConfig } from '../../src/index.js';
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
