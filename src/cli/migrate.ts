import { loadConfigFile } from '../config/load.js';
import { newerSchemaWarning } from '../store/migrations.js';
import { openStore } from '../store/open.js';

export async function runMigrate(configFile: string): Promise<number> {
  const config = loadConfigFile(configFile);
  const store = openStore(config.database);
  try {
    const applied = await store.migrate();
    const newer = newerSchemaWarning(await store.schemaVersion());
    // Exit 0: rolling a deployment back to an older build runs its migrate step too.
    if (newer) console.error(`webhook-inbox migrate: warning: ${newer}`);
    else console.log(applied.length ? `applied migrations: ${applied.join(', ')}` : 'schema is up to date');
    return 0;
  } finally {
    await store.close();
  }
}
