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
  let doc: unknown;
  try {
    doc = file.endsWith('.json') ? JSON.parse(text) : parseYaml(text);
  } catch (err) {
    throw new ConfigError(file, `not valid ${file.endsWith('.json') ? 'JSON' : 'YAML'}: ${(err as Error).message}`);
  }
  return parseConfig(doc, env);
}
