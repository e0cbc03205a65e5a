import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { PROVIDERS } from '../../src/providers/registry.js';

/** Options each adapter needs to be constructed at all (the rest take none). */
const REQUIRED_OPTIONS: Record<string, Record<string, unknown>> = {
  'generic-hmac': { signatureHeader: 'x-signature', idPath: 'id' },
  square: { publicUrl: 'https://hooks.example.com/square' },
  twilio: { publicUrl: 'https://hooks.example.com/twilio' },
};

/** The rows every provider page's contract table has (issue 4: "the docs page of each adapter has the full contract table"). */
const CONTRACT_ROWS = ['Accepted content types', 'Max body', 'Canonical signed bytes', 'Algorithm', 'Secret format', 'Freshness', 'Logical event id', 'Object id', 'Redelivery window'];

describe('every registered adapter declares its contract', () => {
  it.each(Object.keys(PROVIDERS))('%s: content types, freshness and redelivery window declared; a doc page with the full contract table', (name) => {
    const adapter = PROVIDERS[name]!(REQUIRED_OPTIONS[name], `endpoints[0].options`);
    expect(adapter.name).toBe(name);
    expect(adapter.contentTypes.length).toBeGreaterThan(0);
    for (const t of adapter.contentTypes) expect(t).toMatch(/^[a-z]+\/[a-z0-9.+-]+$/);
    if (adapter.defaultToleranceSeconds !== null) expect(adapter.defaultToleranceSeconds).toBeGreaterThan(0);
    // Only a scheme we know nothing about may leave the window open; retention needs it later.
    if (name === 'generic-hmac') expect(adapter.redeliveryWindowSeconds).toBeNull();
    else expect(adapter.redeliveryWindowSeconds).toBeGreaterThan(0);

    const page = readFileSync(new URL(`../../docs/providers/${name}.md`, import.meta.url), 'utf8');
    for (const row of CONTRACT_ROWS) expect(page, `docs/providers/${name}.md lacks the "${row}" row`).toMatch(new RegExp(`^\\| ${row}[^|]*\\|`, 'm'));
    const index = readFileSync(new URL('../../docs/providers/README.md', import.meta.url), 'utf8');
    expect(index).toContain(`| \`${name}\` | [${name}.md](${name}.md) |`);
  });
});
