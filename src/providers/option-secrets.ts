import { resolveSecret, SecretUnavailableError, type FileRead, type SecretRef } from '../config/secrets.js';
import { ConfigError } from '../errors.js';

/**
 * Secret values inside an adapter's `options` (Checkout's Authorization keys, Adyen's Basic
 * credentials), and what the adapter derives from them (digests to compare in constant time).
 *
 * Read when the config loads: a missing one is a config error naming its path, as before. Read
 * again with the endpoint's signing secrets (`KeyRing.reload`: SIGHUP, and every 10 s while one is
 * missing): a value that cannot be read then throws SecretUnavailableError, and the KeyRing takes
 * the endpoint offline (503 `secrets_unavailable`, `/readyz` names the path) until it can, so a
 * request is never checked against values the operator has withdrawn.
 */
export class OptionSecrets<T> {
  private current: T;

  /**
   * `check` may reject a value (a ConfigError naming its path): a format the adapter cannot use.
   * `index` is the value's position in `refs`, which the adapter laid out. `env` is the one the
   * config is parsed with (parseConfig's), as the endpoint's own secrets are read from.
   */
  constructor(
    readonly refs: readonly SecretRef[],
    private readonly derive: (values: readonly string[]) => T,
    private readonly check: (value: string, ref: SecretRef, index: number) => void = () => undefined,
    env: NodeJS.ProcessEnv = process.env,
  ) {
    try {
      this.current = this.readAll(env);
    } catch (err) {
      if (err instanceof SecretUnavailableError) throw new ConfigError(err.path, err.message.slice(err.path.length + 2));
      throw err;
    }
  }

  get value(): T {
    return this.current;
  }

  /** Re-reads every reference; all or nothing (throws SecretUnavailableError, keeping nothing new). */
  reload(env: NodeJS.ProcessEnv, files?: ReadonlyMap<string, FileRead>): void {
    try {
      this.current = this.readAll(env, files);
    } catch (err) {
      if (err instanceof ConfigError) throw new SecretUnavailableError(err.path, err.message.slice(err.path.length + 2));
      throw err;
    }
  }

  private readAll(env: NodeJS.ProcessEnv, files?: ReadonlyMap<string, FileRead>): T {
    return this.derive(this.refs.map((ref, i) => this.read(ref, i, env, files)));
  }

  private read(ref: SecretRef, index: number, env: NodeJS.ProcessEnv, files?: ReadonlyMap<string, FileRead>): string {
    const value = resolveSecret(ref, env, files);
    this.check(value, ref, index);
    return value;
  }
}
