import { resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { HandlerRegistry } from '../engine/handlers.js';

/**
 * `--handlers MODULE`: a module whose default export registers handlers and effect executors:
 * `export default (inbox) => { inbox.on('charge.refunded', …); inbox.effect('notify', …); }`.
 */
export async function loadHandlers(module: string | undefined): Promise<HandlerRegistry> {
  const registry = new HandlerRegistry();
  if (!module) return registry;
  const mod = (await import(pathToFileURL(resolve(module)).href)) as { default?: unknown };
  if (typeof mod.default !== 'function') throw new Error(`${module}: the default export must be a function (inbox) => void`);
  await (mod.default as (r: HandlerRegistry) => unknown)(registry);
  return registry;
}
