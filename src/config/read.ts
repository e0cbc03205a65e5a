import { ConfigError } from '../errors.js';

/**
 * Tiny typed readers over parsed YAML/JSON. Every failure is a ConfigError naming the
 * exact path (`endpoints[2].rateLimit.burst`), and unknown keys are errors, so a typo
 * never silently falls back to a default.
 */
export type Obj = Record<string, unknown>;

export function child(path: string, key: string | number): string {
  return typeof key === 'number' ? `${path}[${key}]` : path ? `${path}.${key}` : key;
}

const INVISIBLE_RE = /[\s\p{Cc}\p{Cf}\p{Z}]/u;
const INVISIBLE_G = /[\s\p{Cc}\p{Cf}\p{Z}]/gu;
const escaped = (c: string): string => {
  const n = c.codePointAt(0)!;
  return n > 0xffff ? `\\u{${n.toString(16)}}` : `\\u${n.toString(16).padStart(4, '0')}`;
};

export function asObject(v: unknown, path: string, allowed: readonly string[]): Obj {
  // A plain mapping only: YAML's !!omap and !!set load as a Map and a Set (a 1.1 timestamp as a
  // Date), objects whose entries Object.entries does not see, so their keys went unchecked and unread.
  if (Object.prototype.toString.call(v) !== '[object Object]') throw new ConfigError(path || '(root)', 'must be an object');
  for (const [k, value] of Object.entries(v as Obj)) {
    // YAML 1.1's merge key; the YAML 1.2 reader (config/load.ts) leaves it a key like any other.
    if (k === '<<') throw new ConfigError(child(path, k), 'a YAML merge key, which is not applied: write the keys out, or alias whole values (secrets: *shared)');
    if (allowed.includes(k)) continue;
    // A long "key" is more likely a value in the wrong place (a secret, say) than a typo: not echoed.
    // Nor is a key without a value, whatever its length: that is a value written alone, without its
    // key (`{ version: v1, <a 32-character Slack signing secret> }` in YAML is a key with a null value).
    // An invisible character (a no-break or zero-width space pasted from a page) is shown escaped:
    // printed as is, "listen.port : unknown key (allowed: host, port)" names a key that looks allowed.
    const withheld = value === null || k.length > 32;
    const hidden = !withheld && INVISIBLE_RE.test(k);
    const shown = withheld ? `(a ${k.length}-character key)` : hidden ? `"${k.replace(INVISIBLE_G, escaped)}"` : k;
    throw new ConfigError(child(path, shown), `unknown key (allowed: ${allowed.join(', ') || 'none'})${hidden ? '; it holds an invisible or space character' : ''}`);
  }
  return v as Obj;
}

export function asArray(v: unknown, path: string): unknown[] {
  if (!Array.isArray(v)) throw new ConfigError(path, 'must be a list');
  return v;
}

/**
 * The strings these readers return are taken as written: a reference there (`host: "${env:HOST}"`)
 * would be its own text, never its value, and fail later or match nothing (an `events` glob). So
 * one is refused; references are read where secrets go (config/secrets.ts parseSecretRef). The
 * value is not echoed.
 */
export const REFERENCE_NOT_READ = 'contains "${": a reference (${env:NAME}, ${file:PATH}) is read only where a secret goes (secret values, payloadKeys.keys, a destination\'s url and secret, provider options that hold secrets); write the value itself';

function literal(v: string, path: string): string {
  if (v.includes('${')) throw new ConfigError(path, REFERENCE_NOT_READ);
  return v;
}

export function reqString(o: Obj, key: string, path: string): string {
  const v = o[key];
  if (typeof v !== 'string' || v.length === 0) throw new ConfigError(child(path, key), 'is required and must be a non-empty string');
  return literal(v, child(path, key));
}

export function optString(o: Obj, key: string, path: string): string | undefined {
  const v = o[key];
  if (v === undefined) return undefined;
  if (typeof v !== 'string' || v.length === 0) throw new ConfigError(child(path, key), 'must be a non-empty string');
  return literal(v, child(path, key));
}

export function optInt(o: Obj, key: string, path: string, min: number, max: number): number | undefined {
  const v = o[key];
  if (v === undefined) return undefined;
  if (typeof v !== 'number' || !Number.isInteger(v) || v < min || v > max) {
    throw new ConfigError(child(path, key), `must be an integer from ${min} to ${max}`);
  }
  return v;
}

export function optNumber(o: Obj, key: string, path: string, min: number, max: number): number | undefined {
  const v = o[key];
  if (v === undefined) return undefined;
  if (typeof v !== 'number' || !Number.isFinite(v) || v < min || v > max) {
    throw new ConfigError(child(path, key), `must be a number from ${min} to ${max}`);
  }
  return v;
}

export function optBool(o: Obj, key: string, path: string): boolean | undefined {
  const v = o[key];
  if (v === undefined) return undefined;
  if (typeof v !== 'boolean') throw new ConfigError(child(path, key), 'must be true or false');
  return v;
}

export function optEnum<T extends string>(o: Obj, key: string, path: string, values: readonly T[]): T | undefined {
  const v = o[key];
  if (v === undefined) return undefined;
  if (typeof v !== 'string' || !(values as readonly string[]).includes(v)) {
    throw new ConfigError(child(path, key), `must be one of: ${values.join(', ')}`);
  }
  return v as T;
}

export function optStringArray(o: Obj, key: string, path: string): string[] | undefined {
  const v = o[key];
  if (v === undefined) return undefined;
  const p = child(path, key);
  return asArray(v, p).map((s, i) => {
    if (typeof s !== 'string' || s.length === 0) throw new ConfigError(child(p, i), 'must be a non-empty string');
    return literal(s, child(p, i));
  });
}
