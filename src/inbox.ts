import { startApp, type RunningApp, type StartOptions } from './app.js';
import type { Config } from './config/schema.js';
import { HandlerRegistry } from './engine/handlers.js';

/**
 * Library entry for in-process handlers:
 *
 *   const inbox = createInbox(loadConfigFile('inbox.yaml'));
 *   inbox.on('payment_intent.succeeded', async (event, ctx) => {
 *     await ctx.tx.query('UPDATE orders SET paid = true WHERE payment_intent = $1', [event.objectId]);
 *     ctx.effect('send-receipt', { orderId: … });
 *   }, { version: '3' });
 *   inbox.effect('send-receipt', async (data, { idempotencyKey }) => mailer.send(data, { idempotencyKey }));
 *   await inbox.start();
 */
export class Inbox extends HandlerRegistry {
  constructor(readonly config: Config) {
    super();
  }

  /** Serves ingress and (per `workers.enabled`, or `opts.workers`) runs the workers. */
  start(opts: Omit<StartOptions, 'handlers'> = {}): Promise<RunningApp> {
    return startApp(this.config, { ...opts, handlers: this });
  }
}

export function createInbox(config: Config): Inbox {
  return new Inbox(config);
}
