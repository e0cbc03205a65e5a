import { describe, expect, it } from 'vitest';
import { eventMatcher } from '../../src/http/event-filter.js';

describe('eventMatcher: events globs', () => {
  it('`*` stands for any characters, line terminators included (a type is verified provider text, not a line)', () => {
    const all = eventMatcher(['*']);
    const pi = eventMatcher(['payment_intent.*']);
    for (const t of ['a\nb', 'a\rb', 'a\u2028b', 'a\u2029b', '\n']) {
      expect(all(t), JSON.stringify(t)).toBe(true);
      expect(pi(`payment_intent.${t}`), JSON.stringify(t)).toBe(true);
      expect(pi(`charge.${t}`), JSON.stringify(t)).toBe(false);
    }
  });

  it('everything but `*` is literal, and the whole type must match', () => {
    const m = eventMatcher(['a.b', 'c+d?', 'x*y']);
    expect(m('a.b')).toBe(true);
    expect(m('aXb')).toBe(false);
    expect(m('c+d?')).toBe(true);
    expect(m('ccd')).toBe(false);
    expect(m('x\ny')).toBe(true);
    expect(m('a.b\n')).toBe(false);
    expect(m('\na.b')).toBe(false);
  });
});
