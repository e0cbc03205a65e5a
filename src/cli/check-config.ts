import { loadConfigFile } from '../config/load.js';
import { KeyRing } from '../crypto/keyring.js';
import { closeAll, openDestinations } from '../destinations/registry.js';

/** Exit 0 when the config is valid and every secret resolves; 78 with one line per problem otherwise. */
export async function runCheckConfig(configFile: string): Promise<number> {
  const config = loadConfigFile(configFile);
  const keyring = new KeyRing(config);
  const opened = openDestinations(config.destinations);
  await closeAll(opened.destinations.values());
  const problems = [...keyring.problems, ...opened.problems];
  if (problems.length > 0) {
    for (const p of problems) console.error(`secret error: ${p}`);
    return 78;
  }
  console.log(`config OK: ${config.endpoints.length} endpoint(s), ${config.destinations.length} destination(s), database ${config.database.split(':')[0]}`);
  for (const ep of config.endpoints) {
    console.log(`  ${ep.id}: ${ep.provider}, ${ep.secrets.length} secret version(s), tolerance ${ep.toleranceSeconds ?? 'none signed'}, max body ${ep.maxBodyBytes} B`);
  }
  return 0;
}
