import { loadConfigFile } from '../config/load.js';
import { openStore } from '../store/open.js';

export async function runMigrate(configFile: string): Promise<number> {
  const config = loadConfigFile(configFile);
  const store = openStore(config.database);
  try {
    const applied = await store.migrate();
    console.log(applied.length ? `applied migrations: ${applied.join(', ')}` : 'schema is up to date');
    return 0;
  } finally {
    await store.close();
  }
}
