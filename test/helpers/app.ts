import type { HandlerRegistry } from '../../src/engine/handlers.js';
import pino, { type Logger } from 'pino';
import { startApp, type RunningApp } from '../../src/app.js';
import { parseConfig } from '../../src/config/schema.js';
import type { PruneSchedule } from '../../src/store/pruner.js';
import type { PayloadBinding } from '../../src/crypto/payload-cipher.js';
import { freshDatabase, type TestDatabase } from './stores.js';

export const PAYLOAD_KEY = Buffer.alloc(32, 7).toString('base64');
export const STRIPE_SECRET = 'whsec_test_secret_for_webhook_inbox';

/** Minimal valid config document; tests override endpoints and limits. */
export function configDoc(database: string, over: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    listen: { host: '127.0.0.1', port: 0 },
    database,
    payloadKeys: { current: 'k1', keys: { k1: PAYLOAD_KEY } },
    endpoints: [{ id: 'stripe', provider: 'stripe', secrets: [{ version: 'v1', value: STRIPE_SECRET }] }],
    log: { level: 'silent' },
    ...over,
  };
}

export interface TestApp extends RunningApp {
  readonly db: TestDatabase;
  stop(): Promise<void>;
}

export interface TestAppOptions {
  /** Where the app logs (default: nowhere). */
  readonly logger?: Logger;
  /** Appended to the fresh database URL, e.g. `?busyTimeoutMs=100`. */
  readonly urlSuffix?: string;
  /** Run the processing workers (default false: ingress tests look at rows before any worker does). */
  readonly workers?: boolean;
  readonly handlers?: HandlerRegistry;
  /** Migrate at start (default true, as `serve`; false = `serve --no-migrate`). */
  readonly migrate?: boolean;
  /** How often secrets are re-checked (default 10 s, as `serve`). */
  readonly secretCheckMs?: number;
  /** /metrics and /readyz on an address of their own (`serve --metrics-port`). */
  readonly metricsListen?: { readonly host: string; readonly port: number };
  /** When the prune tasks run (default: a minute after start, then hourly). */
  readonly pruneSchedule?: PruneSchedule;
}

/** Starts a real server on an ephemeral port against a fresh database of the given kind. */
export async function startTestApp(
  kind: 'sqlite' | 'postgres',
  over: Record<string, unknown> = {},
  env: NodeJS.ProcessEnv = {},
  opts: TestAppOptions = {},
): Promise<TestApp> {
  const db = await freshDatabase(kind);
  const config = parseConfig(configDoc(db.url + (opts.urlSuffix ?? ''), over), env);
  const app = await startApp(config, { logger: opts.logger ?? pino({ level: 'silent' }), env, shutdownGraceMs: 500, workers: opts.workers ?? false, handlers: opts.handlers, migrate: opts.migrate, secretCheckMs: opts.secretCheckMs, metricsListen: opts.metricsListen, pruneSchedule: opts.pruneSchedule });
  return Object.assign(app, {
    db,
    async stop() {
      await app.close();
      await db.cleanup();
    },
  });
}

/**
 * A row's stored payload, opened under `binding` (by default the row's own key). Pass the binding
 * the event should have, not the row, where the row's key is itself under test: a ciphertext
 * opens under its own binding only.
 */
export async function storedBytes(
  app: Pick<RunningApp, 'store' | 'keyring'>,
  row: { readonly rawPayloadRef: string | null } & PayloadBinding,
  binding: PayloadBinding = row,
): Promise<Buffer> {
  const sealed = await app.store.getPayload(row.rawPayloadRef!);
  if (!sealed) throw new Error(`no stored payload for ${row.providerEventId}`);
  return app.keyring.cipher!.open(sealed, binding);
}
