import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { stringify } from 'yaml';
import { configDoc, PAYLOAD_KEY } from '../helpers/app.js';
import { runCli } from '../helpers/server-process.js';
import { describeEachStore, freshDatabase, type TestDatabase } from '../helpers/stores.js';

/**
 * A payload key written where its id goes (`keys: { <the key>: k2 }`, id and value swapped) is a
 * slip the config already guards against: an id longer than any id is never printed in a config
 * path (/readyz, check-config). `keys list` and `keys reseal` printed it, in the clear, as a row
 * of their table: the key material on an operator's terminal and in a CI log.
 */
const K2 = Buffer.alloc(32, 0x5a).toString('base64');
/** A long id that is no key is shown as it is. */
const LONG_ID = 'payload-key-2026-12-05-eu-central-prod';

describeEachStore('keys list / keys reseal never print a key written as a key id', (kind) => {
  let db: TestDatabase;
  let dir: string;
  let file: string;

  beforeAll(async () => {
    db = await freshDatabase(kind);
    dir = mkdtempSync(join(tmpdir(), 'wi-keys-secret-id-'));
    file = join(dir, 'config.yaml');
    writeFileSync(file, stringify(configDoc(db.url, { payloadKeys: { current: 'k1', keys: { k1: PAYLOAD_KEY, [K2]: 'k2', [LONG_ID]: Buffer.alloc(32, 3).toString('base64') } } })));
    const m = await runCli(['migrate', '--config', file]);
    expect(m.code, m.err).toBe(0);
  });

  afterAll(async () => {
    await db?.cleanup();
    rmSync(dir, { recursive: true, force: true });
  });

  it('keys list shows it by its length, as the config paths do, never its text', async () => {
    const r = await runCli(['keys', 'list', '--config', file]);
    expect(r.code, r.err).toBe(0);
    expect(r.out + r.err).not.toContain(K2);
    expect(r.out).toMatch(/^\(a 44-character key id\)\s+0\s+0\s+configured but unreadable/m);
    expect(r.out).toMatch(/^k1\s+0\s+0\s+current/m);
    expect(r.out).toMatch(new RegExp(`^${LONG_ID}\\s+0\\s+0\\s+old, seals nothing`, 'm'));
  });

  it('keys reseal prints the same table: never the key either', async () => {
    const r = await runCli(['keys', 'reseal', '--config', file]);
    expect(r.code, r.err).toBe(0);
    expect(r.out + r.err).not.toContain(K2);
    expect(r.out).toMatch(/^\(a 44-character key id\)\s+0\s+0\s+configured but unreadable/m);
  });
});
