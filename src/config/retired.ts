import { isRetired } from '../crypto/hmac.js';
import type { Config } from './schema.js';

/** Endpoints whose every secret version has passed its retireAt: each request there is a 401. */
export function allRetired(config: Config, nowMs: number): string[] {
  return config.endpoints.flatMap((e, i) =>
    e.secrets.length > 0 && e.secrets.every((s) => isRetired(s, nowMs))
      ? [`endpoints[${i}].secrets: every version is retired (every request is refused)`]
      : []);
}
