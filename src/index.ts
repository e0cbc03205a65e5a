/** Library entry: embed the receiver, or use its parts. */
export { startApp, type RunningApp, type StartOptions } from './app.js';
export { startWorkers, type RunningWorkers, type WorkersOptions } from './workers.js';
export { loadConfigFile } from './config/load.js';
export { parseConfig, type Config, type EndpointConfig } from './config/schema.js';
export { openStore } from './store/open.js';
export type { InboxStore, InboxRow, AcceptRecord, AcceptResult, TransmissionBinding } from './store/port.js';
export { PayloadCipher } from './crypto/payload-cipher.js';
export { PROVIDERS } from './providers/registry.js';
export type { ProviderAdapter, Envelope, RequestView } from './providers/contract.js';
export { IngressError, ConfigError, StorageUnavailableError, ListenError, SchemaOutdatedError, MigrationError, HandlerError, REASONS, type Reason, type Outcome } from './errors.js';
export { createInbox, Inbox } from './inbox.js';
export { HandlerRegistry, type InboxEvent, type HandlerContext, type HandlerTx, type Handler, type HandlerOptions, type EffectContext, type EffectExecutor } from './engine/handlers.js';
export { RetryableError, NeedsDecisionError } from './engine/failure.js';
export type { WorkStore, StoreTx, InboxDetail } from './store/work-port.js';
