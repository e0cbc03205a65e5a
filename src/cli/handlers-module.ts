import { existsSync } from 'node:fs';
import { resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { HandlerRegistry } from '../engine/handlers.js';
import { UsageError } from './usage-error.js';

/**
 * `--handlers MODULE`: a module whose default export registers handlers and effect executors:
 * `export default (inbox) => { inbox.on('charge.refunded', …); inbox.effect('notify', …); }`.
 */
export async function loadHandlers(module: string | undefined): Promise<HandlerRegistry> {
  const registry = new HandlerRegistry();
  if (!module) return registry;
  const file = resolve(module);
  let mod: { default?: unknown };
  try {
    mod = (await import(pathToFileURL(file).href)) as { default?: unknown };
  } catch (err) {
    // The module itself missing is a bad argument. One that exists but whose own imports fail
    // (also ERR_MODULE_NOT_FOUND) or that throws while loading stays that error, as it was.
    if ((err as NodeJS.ErrnoException).code === 'ERR_MODULE_NOT_FOUND' && !existsSync(file)) {
      throw new UsageError(`cannot load --handlers ${module}: no such file (${file})`);
    }
    throw err;
  }
  // A bad argument, as a missing module is (exit 2, one line), not a stack trace.
  if (typeof mod.default !== 'function') throw new UsageError(`--handlers ${module}: the default export must be a function (inbox) => void`);
  await (mod.default as (r: HandlerRegistry) => unknown)(registry);
  return registry;
}
