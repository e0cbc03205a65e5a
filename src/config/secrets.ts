import { readFileSync } from 'node:fs';
import { ConfigError } from '../errors.js';

/**
 * A secret is configured by reference — `${env:NAME}`, `${file:PATH}` — or inline (local demos).
 * References are resolved at load and on reload; the value never appears in logs or errors.
 */
export type SecretRef =
  | { readonly kind: 'env'; readonly name: string; readonly path: string }
  | { readonly kind: 'file'; readonly file: string; readonly path: string }
  | { readonly kind: 'inline'; readonly value: string; readonly path: string };

/** No white space at either end of the name or path: `${env: X}` is not the variable X (nor a file " /x" meant). */
const REF_RE = /^\$\{(env|file):([^}\s]|[^}\s][^}]*[^}\s])\}$/;

export function parseSecretRef(v: unknown, path: string): SecretRef {
  if (typeof v !== 'string' || v.length === 0) throw new ConfigError(path, 'must be a non-empty string (${env:NAME}, ${file:PATH} or an inline value)');
  const m = REF_RE.exec(v);
  // A reference written almost right (${ENV:X}, a space around it, ${vault:X}, text beside it)
  // must not become an inline secret: the key would be the reference text, known to anyone who
  // reads the config. The value is not echoed: it may be a secret.
  if (!m && v.includes('${')) throw new ConfigError(path, 'is not a valid reference: write exactly ${env:NAME} or ${file:PATH} (lower-case, no spaces inside, nothing around it); an inline value cannot contain "${"');
  if (!m && isBlank(v)) throw new ConfigError(path, 'is only white space (an inline value is the secret itself)');
  if (!m) return { kind: 'inline', value: v, path };
  return m[1] === 'env' ? { kind: 'env', name: m[2]!, path } : { kind: 'file', file: m[2]!, path };
}

/** How often a running process re-reads secrets that did not load (crypto/keyring.ts keepSecretsCurrent). */
export const SECRET_RETRY_MS = 10_000;

/** Thrown when a referenced secret cannot be read; the message names the config path, never the value. */
export class SecretUnavailableError extends Error {
  constructor(readonly path: string, readonly detail: string) {
    super(`${path}: ${detail}`);
    this.name = 'SecretUnavailableError';
  }
}

/** A secret file as read off the event loop (crypto/keyring.ts readFiles): its text, or the error code. */
export type FileRead = { readonly text: string } | { readonly code: string };

/**
 * A reference's value. A `${file:…}` one comes from `files` when it holds the file (a running
 * process reads its secret files off the event loop first: a read from a hung mount must not
 * stop the server), else it is read here (start-up, check-config).
 */
export function resolveSecret(ref: SecretRef, env: NodeJS.ProcessEnv = process.env, files?: ReadonlyMap<string, FileRead>): string {
  switch (ref.kind) {
    case 'inline':
      return ref.value;
    case 'env': {
      const raw = env[ref.name];
      // Set but empty (compose's `X: ${X}` with X unset on the host) is said as such: `env` shows it set.
      if (raw === undefined) throw new SecretUnavailableError(ref.path, `environment variable ${ref.name} is not set`);
      // Filled from the same secret a mount holds (a Kubernetes secretKeyRef), it ends with its newline
      // too; read by a shell from a CRLF env file, with the "\r" alone.
      const v = raw.replace(/\r?\n$|\r$/, '');
      const unusable = unusableBecause(v);
      if (unusable) throw new SecretUnavailableError(ref.path, `environment variable ${ref.name} ${unusable}`);
      return v;
    }
    case 'file': {
      let v: string;
      const read = files?.get(ref.file);
      try {
        if (read !== undefined && 'code' in read) throw Object.assign(new Error(read.code), { code: read.code });
        v = read?.text ?? readFileSync(ref.file, 'utf8');
      } catch (err) {
        throw new SecretUnavailableError(ref.path, `cannot read ${ref.file} (${(err as NodeJS.ErrnoException).code ?? 'error'})`);
      }
      // Mounted secret files usually end with a newline that is not part of the secret; one saved by
      // a Windows editor starts with a byte order mark, which is not either (as in config/load.ts).
      v = v.replace(/^\uFEFF/, '').replace(/\r?\n$/, '');
      const unusable = unusableBecause(v);
      if (unusable) throw new SecretUnavailableError(ref.path, `${ref.file} ${unusable}`);
      // Read as UTF-8, a byte that is not (raw key bytes, UTF-16 text) became U+FFFD: another key.
      if (v.includes('\uFFFD')) throw new SecretUnavailableError(ref.path, `${ref.file} is not UTF-8 text (raw key bytes? write the key as text, e.g. its base64)`);
      return v;
    }
  }
}

/**
 * Why a value read for a secret cannot be one, or null. White space alone is not a secret but
 * what a template or a mount leaves when the value is missing: as a key, anyone could sign with it.
 */
function unusableBecause(v: string): string | null {
  if (v === '') return 'is empty';
  return isBlank(v) ? 'holds only white space' : null;
}

function isBlank(v: string): boolean {
  return v.trim() === '';
}

/** What check-config and serve say of a secret that loaded with white space at an end (KeyRing.edgeSpaced), after its path. */
export const EDGE_SPACE = "the value has white space at an end, and is used as it is: unless the provider's secret has it too, every signature will fail (invalid_signature)";
