import { readFileSync } from 'node:fs';
import { parseDocument } from 'yaml';
import { ConfigError } from '../errors.js';
import { duplicateKeyOffset } from '../providers/json-slices.js';
import { parseConfig, type Config } from './schema.js';

/** Reads a YAML or JSON config file (same keys) and validates it. */
export function loadConfigFile(file: string, env: NodeJS.ProcessEnv = process.env): Config {
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (err) {
    throw new ConfigError(file, `cannot read config file (${(err as NodeJS.ErrnoException).code ?? String(err)})`);
  }
  // A UTF-8 byte order mark (Windows editors) is not part of the document: the YAML reader skips
  // it, JSON.parse would refuse it at line 1, column 1.
  if (text.startsWith('\uFEFF')) text = text.slice(1);
  const json = file.endsWith('.json');
  // Nothing there (not saved yet, a wrong copy): "(root): must be an object" named neither.
  const empty = () => new ConfigError(file, 'is empty (no settings in it: is this the config file you meant?)');
  if (text.trim() === '') throw empty();
  let doc: unknown;
  try {
    doc = json ? JSON.parse(text) : readYaml(text);
  } catch (err) {
    throw new ConfigError(file, `not valid ${json ? 'JSON' : 'YAML'}${where(err, json, text)}`);
  }
  // JSON.parse keeps the last of two equal keys without a word; the YAML parser refuses them. The
  // same keys must give the same result in both, so a repeated key is an error in JSON too.
  const dup = json ? duplicateKeyOffset(text) : undefined;
  if (dup !== undefined) throw new ConfigError(file, `not valid JSON (DUPLICATE_KEY) at ${lineColumn(text, dup)}`);
  if (doc === null || doc === undefined) throw empty(); // only comments
  return parseConfig(doc, env);
}

/**
 * The YAML document as plain data. Its warnings are refused like its errors: an unknown tag
 * (`!vault whsec_…`) is only a warning to the parser, which then takes the value as a plain
 * string, and by default prints it with the source line (an inline secret) to stderr.
 * `logLevel: 'error'` prints nothing (the parser prints only at 'warn' and 'debug') and still
 * reports a second document (MULTIPLE_DOCS), which 'silent' let the parser drop without a word.
 */
function readYaml(text: string): unknown {
  const d = parseDocument(text, { logLevel: 'error' });
  const problem = d.errors[0] ?? d.warnings[0];
  if (problem) throw problem;
  try {
    return d.toJS({ maxAliasCount: MAX_ALIAS_EXPANSIONS });
  } catch (err) {
    if (err instanceof ReferenceError && /alias count/.test(err.message)) throw Object.assign(new Error('too many aliases'), { code: 'TOO_MANY_ALIASES' });
    throw err;
  }
}

/**
 * How many nodes aliases may expand to (the yaml package's guard against alias bombs, whose
 * default, 100, refused a config sharing one `secrets: *list` among 101 endpoints). Aliased
 * values load as one shared object; this bounds only what reading the config walks.
 */
const MAX_ALIAS_EXPANSIONS = 100_000;

/**
 * Where a parse failed, without the parser's message: both parsers quote the source around the
 * error, and the config may hold inline secrets.
 */
function where(err: unknown, json: boolean, text: string): string {
  if (!json) {
    const e = err as { code?: unknown; linePos?: { line: number; col: number }[] };
    const at = e.linePos?.[0];
    return `${typeof e.code === 'string' ? ` (${e.code})` : ''}${at ? ` at line ${at.line}, column ${at.col}` : ''}`;
  }
  return ` at ${lineColumn(text, jsonErrorOffset(text, (err as Error).message ?? ''))}`;
}

function lineColumn(text: string, at: number): string {
  const before = text.slice(0, at).split('\n');
  return `line ${before.length}, column ${before[before.length - 1]!.length + 1}`;
}

/** V8's JSON.parse message: "… at position N", or "Unexpected end of JSON input". */
function reportedOffset(message: string, length: number): number | undefined {
  const m = /position (\d+)/.exec(message);
  if (m) return Number(m[1]);
  return message.startsWith('Unexpected end of JSON input') ? length : undefined;
}

/**
 * The offset of a JSON syntax error. V8 gives it in most messages, but for an unexpected token
 * (`[1,]`, `{"a": whsec_…}`) it quotes the text instead. Then the place is found by parsing
 * prefixes: a prefix before the bad character fails only for ending early; from it on, every
 * prefix fails there. A binary search takes ~log2(size) parses of a small file.
 */
function jsonErrorOffset(text: string, message: string): number {
  const reported = reportedOffset(message, text.length);
  if (reported !== undefined) return reported;
  const failsBefore = (k: number): boolean => {
    try {
      JSON.parse(text.slice(0, k));
      return false;
    } catch (e) {
      return reportedOffset((e as Error).message, k) !== k;
    }
  };
  let lo = 0; // failsBefore(lo) is false (the empty prefix only ends early)
  let hi = text.length; // failsBefore(hi) is true (the whole text)
  while (hi - lo > 1) {
    const mid = (lo + hi) >>> 1;
    if (failsBefore(mid)) hi = mid;
    else lo = mid;
  }
  return hi - 1;
}
