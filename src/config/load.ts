import { readFileSync } from 'node:fs';
import { parse as parseYaml } from 'yaml';
import { ConfigError } from '../errors.js';
import { parseConfig, type Config } from './schema.js';

/** Reads a YAML or JSON config file (same keys) and validates it. */
export function loadConfigFile(file: string, env: NodeJS.ProcessEnv = process.env): Config {
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (err) {
    throw new ConfigError(file, `cannot read config file (${(err as NodeJS.ErrnoException).code ?? String(err)})`);
  }
  const json = file.endsWith('.json');
  let doc: unknown;
  try {
    doc = json ? JSON.parse(text) : parseYaml(text);
  } catch (err) {
    throw new ConfigError(file, `not valid ${json ? 'JSON' : 'YAML'}${where(err, json, text)}`);
  }
  return parseConfig(doc, env);
}

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
  const m = /position (\d+)/.exec((err as Error).message ?? '');
  if (!m) return '';
  const before = text.slice(0, Number(m[1])).split('\n');
  return ` at line ${before.length}, column ${before[before.length - 1]!.length + 1}`;
}
