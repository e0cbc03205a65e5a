import { loadConfigFile } from '../config/load.js';
import type { Config } from '../config/schema.js';
import { allRetired } from '../config/retired.js';
import { EDGE_SPACE } from '../config/secrets.js';
import { KeyRing } from '../crypto/keyring.js';
import { closeAll, openDestinations } from '../destinations/registry.js';

/** Exit 0 when the config is valid and every secret resolves; 78 with one line per problem otherwise. */
export async function runCheckConfig(configFile: string): Promise<number> {
  const config = loadConfigFile(configFile);
  const keyring = new KeyRing(config);
  // Destination secrets are the keyring's (reported once, with the others).
  const opened = openDestinations(config.destinations, process.env, { keys: (id) => keyring.destinationKey(id) });
  await closeAll(opened.destinations.values());
  const problems = [...keyring.problems, ...opened.problems, ...allRetired(config, Date.now())];
  if (problems.length > 0) {
    for (const p of problems) console.error(`secret error: ${p}`);
    return 78;
  }
  console.log(`config OK: ${config.endpoints.length} endpoint(s), ${config.destinations.length} destination(s), database ${config.database.split(':')[0]}`);
  for (const ep of config.endpoints) {
    const trust = ep.adapter.unsigned ? 'UNSIGNED (notices stored as fetch-required)' : `${ep.secrets.length} secret version(s)`;
    const limit = ep.rateLimit ? `, rate limit ${ep.rateLimit.perSecond}/s burst ${ep.rateLimit.burst}` : '';
    console.log(`  ${ep.id}: ${ep.provider}, ${trust}, tolerance ${ep.toleranceSeconds ?? 'none signed'}, max body ${ep.maxBodyBytes} B${limit}`);
  }
  for (const path of keyring.edgeSpaced) console.error(`warning: ${path}: ${EDGE_SPACE}`);
  console.log(`  payloads: ${retentionSummary(config.retention)}`);
  return 0;
}

/** e.g. "deleted 30 day(s) after receipt once PROCESSED; kept while FAILED". */
export function retentionSummary(r: Config['retention']): string {
  if (r.processedPayloadDays === undefined && r.failedPayloadDays === undefined) return 'kept (no retention set)';
  const processed = r.processedPayloadDays === undefined ? 'kept once PROCESSED' : `deleted ${r.processedPayloadDays} day(s) after receipt once PROCESSED`;
  const failed = r.failedPayloadDays === undefined ? 'kept while FAILED' : `deleted ${r.failedPayloadDays} day(s) after receipt while FAILED`;
  return `${processed}; ${failed}`;
}
