import { statSync, type BigIntStats } from 'node:fs';
import { readFile, stat } from 'node:fs/promises';
import type { Config } from '../config/schema.js';
import { resolveSecret, SECRET_RETRY_MS, SecretUnavailableError, type FileRead, type SecretRef } from '../config/secrets.js';
import type { TrustedKey } from './hmac.js';
import { decodeBase64, isRetired } from './hmac.js';
import { PayloadCipher } from './payload-cipher.js';
import { signingKeyAt } from '../destinations/signing-key.js';

/**
 * The resolved secrets of a running server: trusted verification keys per endpoint, the
 * payload cipher, and the signing keys of HTTP destinations. Anything that cannot be resolved is
 * absent — the ingress answers 503 for it, a forward waits and retries (fail closed) — instead of
 * guessing. `reload()` re-reads every reference: on SIGHUP, and (keepSecretsCurrent) every 10 s
 * while one is missing or a `${file:…}` secret's file has changed.
 */
export class KeyRing {
  private endpointKeys = new Map<string, readonly TrustedKey[]>();
  private payloadCipher: PayloadCipher | null = null;
  /** Every payload key's value as first loaded, by id: one it changes to is refused (see reload). */
  private readonly payloadKeyValues = new Map<string, Buffer>();
  private destinationKeys = new Map<string, Buffer>();
  /** Problems from the last load, each naming a config path (never a value). */
  problems: string[] = [];
  /**
   * Config paths of endpoint secrets that loaded with white space at an end (last load): used as
   * written, a chosen secret may hold any character, but unless the provider's has it too every
   * signature fails, so check-config and serve's start warn (EDGE_SPACE). One the adapter refused
   * is among the problems instead.
   */
  edgeSpaced: string[] = [];
  /** Every file a `${file:…}` reference names, each read on every reload. */
  private readonly files: readonly string[];
  /** The files' identity and times when last read (filesChanged compares with it). */
  private filesSeen = '';

  constructor(private readonly config: Config, private readonly env: NodeJS.ProcessEnv = process.env) {
    this.files = secretFiles(config);
    this.reload();
  }

  /**
   * Whether a secret file was replaced, rewritten or removed since the last reload: a rotated
   * mount (Kubernetes swaps a symlink) should take effect without a signal, and a withdrawn one
   * should stop being trusted. A stat per file, every 10 s, off the event loop.
   */
  async filesChanged(): Promise<boolean> {
    return this.files.length > 0 && (await this.fingerprintAsync()) !== this.filesSeen;
  }

  /** The secret file being stat'ed or read off the event loop now, if any (to name a hung one). */
  get fileInProgress(): string | undefined {
    return this.inProgress;
  }

  private inProgress: string | undefined;

  /**
   * Every secret file's fingerprint and contents, read off the event loop one file at a time (a
   * hung mount then holds one thread of libuv's pool, not the server), for `reload(read)`.
   */
  async readFiles(): Promise<SecretFiles> {
    // Taken before reading: a change during the read is seen by the next check, never missed.
    const seen = await this.fingerprintAsync();
    const texts = await this.eachFile((f) => readFile(f, 'utf8').then((text): FileRead => ({ text }), (err: NodeJS.ErrnoException) => ({ code: err.code ?? 'error' })));
    return { files: new Map(this.files.map((f, i) => [f, texts[i]!])), fingerprint: seen };
  }

  private async fingerprintAsync(): Promise<string> {
    const stamps = await this.eachFile((f) => stat(f, { bigint: true }).then(fileStamp, statFailure));
    return stamps.join('|');
  }

  /** `fn` over the secret files one at a time, each named in fileInProgress while it runs. */
  private async eachFile<T>(fn: (file: string) => Promise<T>): Promise<T[]> {
    const out: T[] = [];
    try {
      for (const f of this.files) {
        this.inProgress = f;
        out.push(await fn(f));
      }
    } finally {
      this.inProgress = undefined;
    }
    return out;
  }

  /**
   * Re-reads every reference. `read`: the secret files as readFiles read them (a running
   * process); without it they are read here, synchronously (start-up, tests).
   */
  reload(read?: SecretFiles): void {
    this.filesSeen = read?.fingerprint ?? fingerprint(this.files);
    const files = read?.files;
    const problems: string[] = [];
    const edgeSpaced: string[] = [];
    const endpointKeys = new Map<string, readonly TrustedKey[]>();
    const nowMs = Date.now();
    for (const ep of this.config.endpoints) {
      try {
        // A version past its retireAt verifies nothing, so it is not read: its file or variable
        // may be gone once the rotation is over without taking the endpoint offline.
        const keys = ep.secrets.filter((s) => !isRetired(s, nowMs)).map((s) => {
          const value = resolveSecret(s.ref, this.env, files);
          try {
            const key = ep.adapter.prepareSecret(value);
            if (value !== value.trim()) edgeSpaced.push(s.ref.path);
            return { version: s.version, key, retireAtMs: s.retireAtMs };
          } catch (err) {
            throw new SecretUnavailableError(s.ref.path, (err as Error).message);
          }
        });
        // Secrets inside the adapter's options (Checkout's Authorization keys, Adyen's Basic
        // credentials): without them the endpoint cannot check a request either.
        ep.adapter.optionSecrets?.reload(this.env, files);
        endpointKeys.set(ep.id, keys);
      } catch (err) {
        problems.push((err as Error).message);
      }
    }
    // Without the current key nothing can be sealed: no cipher, and the ingress answers 503. An
    // older key that cannot be read only stops the opening of payloads sealed under it (the
    // workers retry those, payload_key_unavailable): accepts go on, and /readyz names it.
    const keys = loadPayloadKeys(this.config, this.env, problems, files);
    // A payload key's value never changes under its id: what is stored under the id opens only
    // with the value it was sealed with. A file rewritten in place (a new key where a new id was
    // meant) would fail every payload and effect stored before as corrupt at its next attempt,
    // and seal new ones under a value the other processes do not have: keep the loaded one.
    for (const [id, key] of keys) {
      const loaded = this.payloadKeyValues.get(id);
      if (loaded === undefined) this.payloadKeyValues.set(id, key);
      else if (!loaded.equals(key)) {
        keys.set(id, loaded);
        problems.push(`${this.config.payloadKeys.keys.get(id)!.path}: its value changed since it was loaded; the loaded one is kept, as only it opens what is stored under this id. ` +
          'Put the old value back; a new key goes under a new id (README: Rotating the payload key). A restart would load the new value and leave what this id sealed unopenable');
      }
    }
    const destinationKeys = new Map<string, Buffer>();
    for (const d of this.config.destinations) {
      if (d.type !== 'http') continue;
      try {
        destinationKeys.set(d.id, signingKeyAt(resolveSecret(d.secret, this.env, files), d.secret.path));
      } catch (err) {
        problems.push((err as Error).message);
      }
    }
    this.endpointKeys = endpointKeys;
    this.destinationKeys = destinationKeys;
    this.payloadCipher = payloadCipherOf(this.config, keys);
    this.problems = problems;
    this.edgeSpaced = edgeSpaced;
  }

  keysFor(endpointId: string): readonly TrustedKey[] | undefined {
    return this.endpointKeys.get(endpointId);
  }

  /** The signing key of HTTP destination `id`, as last loaded. */
  destinationKey(id: string): Buffer | undefined {
    return this.destinationKeys.get(id);
  }

  get cipher(): PayloadCipher | null {
    return this.payloadCipher;
  }

  get ready(): boolean {
    return this.problems.length === 0;
  }
}

/** The payload keys that resolve, by id; each one that does not adds a problem naming its config path. */
export function loadPayloadKeys(config: Config, env: NodeJS.ProcessEnv, problems: string[], files?: ReadonlyMap<string, FileRead>): Map<string, Buffer> {
  const keys = new Map<string, Buffer>();
  for (const [id, ref] of config.payloadKeys.keys) {
    try {
      const key = decodeBase64(resolveSecret(ref, env, files));
      if (key === null || key.length !== 32) throw new SecretUnavailableError(ref.path, 'must be 32 bytes, base64-encoded (openssl rand -base64 32)');
      keys.set(id, key);
    } catch (err) {
      problems.push((err as Error).message);
    }
  }
  return keys;
}

/** The cipher over these keys, or null without the current one (nothing could be sealed). */
export function payloadCipherOf(config: Config, keys: ReadonlyMap<string, Buffer>): PayloadCipher | null {
  return keys.has(config.payloadKeys.current) ? new PayloadCipher(keys, config.payloadKeys.current, config.limits.compressBodyBytes) : null;
}

/** The files named by `${file:…}` references anywhere in the config, each once. */
function secretFiles(config: Config): string[] {
  const refs: SecretRef[] = [...config.payloadKeys.keys.values()];
  for (const ep of config.endpoints) refs.push(...ep.secrets.map((s) => s.ref), ...(ep.adapter.optionSecrets?.refs ?? []));
  for (const d of config.destinations) if (d.type === 'http') refs.push(d.secret);
  return [...new Set(refs.flatMap((r) => (r.kind === 'file' ? [r.file] : [])))];
}

/** Identity, size and times of each file (following symlinks), or that it is absent or why it cannot be statted. */
function fingerprint(files: readonly string[]): string {
  return files.map((f) => {
    try {
      return fileStamp(statSync(f, { bigint: true }));
    } catch (err) {
      return statFailure(err as NodeJS.ErrnoException);
    }
  }).join('|');
}

/**
 * A file that cannot be statted: absent, or another reason (a path component that is a file,
 * ENOTDIR; no permission, EACCES). Not thrown: its read fails too, and the KeyRing reports that by
 * config path, as for a missing file.
 */
function statFailure(err: NodeJS.ErrnoException): string {
  return err.code === 'ENOENT' ? '-' : `!${err.code ?? 'error'}`;
}

function fileStamp(s: BigIntStats): string {
  return `${s.dev}:${s.ino}:${s.size}:${s.mtimeNs}:${s.ctimeNs}`;
}

/** The secret files as a running process read them off the event loop (KeyRing.readFiles). */
export interface SecretFiles {
  readonly files: ReadonlyMap<string, FileRead>;
  readonly fingerprint: string;
}

/** How long a secret file may take to answer before a warning says so (a hung network mount). */
const FILE_ANSWER_MS = 2_000;

export interface SecretChecks {
  /** Re-reads every secret now (SIGHUP), off the event loop; resolves once it has. */
  reload(): Promise<void>;
  stop(): void;
}

type CheckLog = { info(obj: object, msg: string): void; warn(obj: object, msg: string): void; error(obj: object, msg: string): void };

/**
 * A caller's secret check interval (StartOptions / WorkersOptions `secretCheckMs`), checked before
 * a start opens anything: negative or NaN is a mistake to say at once (setInterval would take it as 1 ms).
 */
export function checkedSecretInterval(ms: number | undefined): number | undefined {
  if (ms !== undefined && !(ms >= 0)) throw new RangeError(`secretCheckMs must be ≥ 0 (0 = never, only reloadSecrets()), not ${ms}`);
  return ms;
}

/**
 * Every `everyMs`: re-reads the secrets while any failed to load (a late secret mount heals
 * without a restart), or when a secret file changed (a rotation applies, a removal takes its
 * endpoint offline). serve and work alike; `reload()` (SIGHUP) does the same at once.
 *
 * The files are stat'ed and read off the event loop, one at a time, and one check at a time: a
 * file on a mount that stopped answering (NFS, a FUSE secret store) holds one thread of libuv's
 * pool, never the server, which goes on with the secrets it has; after `answerMs` a warning names
 * the file, and no further check starts until it answers.
 */
export function keepSecretsCurrent(keyring: KeyRing, log: CheckLog, everyMs = SECRET_RETRY_MS, answerMs = FILE_ANSWER_MS): SecretChecks {
  let running: Promise<void> | undefined;
  let forcedAgain: Promise<void> | undefined;
  const check = async (forced: boolean): Promise<void> => {
    const slow = setTimeout(() => log.warn({ file: keyring.fileInProgress }, `a secret file has not answered for ${answerMs / 1000} s (a hung mount?): the secrets keep their last values, and no other check starts until it answers`), answerMs);
    try {
      if (!forced && keyring.ready && !(await keyring.filesChanged())) return;
      const wasReady = keyring.ready;
      keyring.reload(await keyring.readFiles());
      if (forced) log.info({ problems: keyring.problems }, 'secrets reloaded');
      else if (keyring.ready) log.info({}, wasReady ? 'a secret file changed: secrets reloaded' : 'all secrets loaded');
      else if (wasReady) log.warn({ problems: keyring.problems }, 'a secret file changed and a secret no longer loads; retried every 10 s and on SIGHUP');
    } catch (err) {
      log.error({ err }, 'secret check failed; retried at the next');
    } finally {
      clearTimeout(slow);
    }
  };
  const start = (forced: boolean): Promise<void> => {
    if (running) {
      // A SIGHUP during a check gets one full reload after it (several signals: still one).
      if (forced) forcedAgain ??= running.then(() => {
        forcedAgain = undefined;
        return start(true);
      });
      return forcedAgain ?? running;
    }
    running = check(forced).finally(() => {
      running = undefined;
    });
    return running;
  };
  // 0 (or Infinity) = no periodic checks, only reload(): setInterval would take 0 as 1 ms, a file
  // read every millisecond.
  const timer = everyMs > 0 && Number.isFinite(everyMs) ? setInterval(() => void start(false), everyMs) : undefined;
  timer?.unref();
  return { reload: () => start(true), stop: () => clearInterval(timer) };
}
