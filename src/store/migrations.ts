/**
 * Versioned schema migrations. Each version has the SQL for both stores side by side, so a
 * reviewer sees at once that the two schemas say the same thing. Applied in order, each in
 * its own transaction, recorded in `schema_migrations`. Never edit a released version: add one.
 */
import type { Logger } from 'pino';
import { SchemaOutdatedError } from '../errors.js';
import type { InboxStore } from './port.js';

export interface Migration {
  readonly version: number;
  readonly name: string;
  readonly sqlite: string;
  readonly postgres: string;
}

/** How a failed migration is named to the operator. */
export const migrationStep = (m: Migration): string => `migration ${m.version} (${m.name})`;

export const MIGRATIONS: readonly Migration[] = [
  {
    version: 1,
    name: 'inbox, outbox and encrypted payloads',
    sqlite: `
      CREATE TABLE webhook_payload (
        payload_id  TEXT PRIMARY KEY,
        key_id      TEXT NOT NULL,
        nonce       BLOB NOT NULL,
        ciphertext  BLOB NOT NULL,          -- AES-256-GCM ciphertext || 16-byte tag
        created_at  INTEGER NOT NULL        -- Unix ms
      ) STRICT;
      CREATE TABLE webhook_inbox (
        inbox_id               TEXT PRIMARY KEY,
        provider               TEXT NOT NULL,
        endpoint_id            TEXT NOT NULL,
        provider_event_id      TEXT NOT NULL,
        event_type             TEXT NOT NULL,
        object_id              TEXT,
        object_version         TEXT,
        provider_created_at    INTEGER,
        received_at            INTEGER NOT NULL,
        raw_payload_ref        TEXT REFERENCES webhook_payload (payload_id) ON DELETE SET NULL DEFERRABLE INITIALLY DEFERRED,
        payload_hash           BLOB NOT NULL,
        matched_secret_version TEXT,
        status                 TEXT NOT NULL DEFAULT 'PENDING'
                               CHECK (status IN ('PENDING', 'PROCESSING', 'PROCESSED', 'FAILED')),
        attempt_count          INTEGER NOT NULL DEFAULT 0,
        next_attempt_at        INTEGER,
        lease_until            INTEGER,
        last_error             TEXT,
        UNIQUE (provider, endpoint_id, provider_event_id)
      ) STRICT;
      CREATE INDEX webhook_inbox_due ON webhook_inbox (next_attempt_at) WHERE status IN ('PENDING', 'PROCESSING');
      -- Foreign-key lookups from the parent side (deferred-constraint bookkeeping on insert,
      -- SET NULL on payload purge) would otherwise scan the whole inbox for every payload.
      CREATE INDEX webhook_inbox_payload ON webhook_inbox (raw_payload_ref);
      CREATE TABLE webhook_outbox (
        outbox_id    TEXT PRIMARY KEY,
        inbox_id     TEXT NOT NULL REFERENCES webhook_inbox (inbox_id),
        topic        TEXT NOT NULL,
        created_at   INTEGER NOT NULL,
        published_at INTEGER
      ) STRICT;
      CREATE INDEX webhook_outbox_unpublished ON webhook_outbox (created_at) WHERE published_at IS NULL;
      CREATE INDEX webhook_outbox_inbox ON webhook_outbox (inbox_id);
    `,
    postgres: `
      CREATE TABLE webhook_payload (
        payload_id  uuid PRIMARY KEY,
        key_id      text NOT NULL,
        nonce       bytea NOT NULL,
        ciphertext  bytea NOT NULL,         -- AES-256-GCM ciphertext || 16-byte tag
        created_at  timestamptz NOT NULL
      );
      -- Ciphertext does not compress: store it out of line without trying (EXTERNAL = no pglz).
      ALTER TABLE webhook_payload ALTER COLUMN ciphertext SET STORAGE EXTERNAL;
      CREATE TABLE webhook_inbox (
        inbox_id               uuid PRIMARY KEY,
        provider               text NOT NULL,
        endpoint_id            text NOT NULL,
        provider_event_id      text NOT NULL,
        event_type             text NOT NULL,
        object_id              text,
        object_version         text,
        provider_created_at    timestamptz,
        received_at            timestamptz NOT NULL,
        raw_payload_ref        uuid REFERENCES webhook_payload (payload_id) ON DELETE SET NULL DEFERRABLE INITIALLY DEFERRED,
        payload_hash           bytea NOT NULL,
        matched_secret_version text,
        status                 text NOT NULL DEFAULT 'PENDING'
                               CHECK (status IN ('PENDING', 'PROCESSING', 'PROCESSED', 'FAILED')),
        attempt_count          integer NOT NULL DEFAULT 0,
        next_attempt_at        timestamptz,
        lease_until            timestamptz,
        last_error             text,
        UNIQUE (provider, endpoint_id, provider_event_id)
      );
      CREATE INDEX webhook_inbox_due ON webhook_inbox (next_attempt_at) WHERE status IN ('PENDING', 'PROCESSING');
      -- SET NULL on payload purge looks inbox rows up by raw_payload_ref.
      CREATE INDEX webhook_inbox_payload ON webhook_inbox (raw_payload_ref);
      CREATE TABLE webhook_outbox (
        outbox_id    uuid PRIMARY KEY,
        inbox_id     uuid NOT NULL REFERENCES webhook_inbox (inbox_id),
        topic        text NOT NULL,
        created_at   timestamptz NOT NULL,
        published_at timestamptz
      );
      CREATE INDEX webhook_outbox_unpublished ON webhook_outbox (created_at) WHERE published_at IS NULL;
      CREATE INDEX webhook_outbox_inbox ON webhook_outbox (inbox_id);
    `,
  },
  {
    version: 2,
    name: 'processing engine: leases, terminal states, processed events, effects, relay state',
    sqlite: `
      ALTER TABLE webhook_inbox ADD COLUMN lease_owner TEXT;
      ALTER TABLE webhook_inbox ADD COLUMN failure_reason TEXT;
      ALTER TABLE webhook_inbox ADD COLUMN handler_version TEXT;
      ALTER TABLE webhook_inbox ADD COLUMN processed_at INTEGER;
      CREATE INDEX webhook_inbox_failed ON webhook_inbox (failure_reason) WHERE status = 'FAILED';
      -- One row per (logical event, consumer) that has applied its effect: the handler's
      -- business mutation commits with this row, so a second run finds it and does nothing.
      CREATE TABLE processed_events (
        provider          TEXT NOT NULL,
        endpoint_id       TEXT NOT NULL,
        provider_event_id TEXT NOT NULL,
        consumer          TEXT NOT NULL,
        inbox_id          TEXT NOT NULL,
        handler_version   TEXT,
        processed_at      INTEGER NOT NULL,
        PRIMARY KEY (provider, endpoint_id, provider_event_id, consumer)
      ) STRICT;
      CREATE TABLE webhook_effects (
        effect_id       TEXT PRIMARY KEY,
        inbox_id        TEXT NOT NULL REFERENCES webhook_inbox (inbox_id),
        name            TEXT NOT NULL,
        idempotency_key TEXT NOT NULL UNIQUE,
        data            TEXT NOT NULL,
        status          TEXT NOT NULL DEFAULT 'PENDING' CHECK (status IN ('PENDING', 'PROCESSING', 'DONE', 'FAILED')),
        attempt_count   INTEGER NOT NULL DEFAULT 0,
        next_attempt_at INTEGER NOT NULL,
        lease_owner     TEXT,
        lease_until     INTEGER,
        last_error      TEXT,
        failure_reason  TEXT,
        created_at      INTEGER NOT NULL,
        done_at         INTEGER
      ) STRICT;
      CREATE INDEX webhook_effects_due ON webhook_effects (next_attempt_at) WHERE status IN ('PENDING', 'PROCESSING');
      CREATE INDEX webhook_effects_inbox ON webhook_effects (inbox_id);
      ALTER TABLE webhook_outbox ADD COLUMN attempt_count INTEGER NOT NULL DEFAULT 0;
      ALTER TABLE webhook_outbox ADD COLUMN next_attempt_at INTEGER;
      ALTER TABLE webhook_outbox ADD COLUMN lease_owner TEXT;
      ALTER TABLE webhook_outbox ADD COLUMN last_error TEXT;
      UPDATE webhook_outbox SET next_attempt_at = created_at WHERE published_at IS NULL;
      DROP INDEX webhook_outbox_unpublished;
      CREATE INDEX webhook_outbox_due ON webhook_outbox (next_attempt_at) WHERE published_at IS NULL;
    `,
    postgres: `
      ALTER TABLE webhook_inbox ADD COLUMN lease_owner text;
      ALTER TABLE webhook_inbox ADD COLUMN failure_reason text;
      ALTER TABLE webhook_inbox ADD COLUMN handler_version text;
      ALTER TABLE webhook_inbox ADD COLUMN processed_at timestamptz;
      CREATE INDEX webhook_inbox_failed ON webhook_inbox (failure_reason) WHERE status = 'FAILED';
      CREATE TABLE processed_events (
        provider          text NOT NULL,
        endpoint_id       text NOT NULL,
        provider_event_id text NOT NULL,
        consumer          text NOT NULL,
        inbox_id          uuid NOT NULL,
        handler_version   text,
        processed_at      timestamptz NOT NULL,
        PRIMARY KEY (provider, endpoint_id, provider_event_id, consumer)
      );
      CREATE TABLE webhook_effects (
        effect_id       uuid PRIMARY KEY,
        inbox_id        uuid NOT NULL REFERENCES webhook_inbox (inbox_id),
        name            text NOT NULL,
        idempotency_key text NOT NULL UNIQUE,
        data            text NOT NULL,
        status          text NOT NULL DEFAULT 'PENDING' CHECK (status IN ('PENDING', 'PROCESSING', 'DONE', 'FAILED')),
        attempt_count   integer NOT NULL DEFAULT 0,
        next_attempt_at timestamptz NOT NULL,
        lease_owner     text,
        lease_until     timestamptz,
        last_error      text,
        failure_reason  text,
        created_at      timestamptz NOT NULL,
        done_at         timestamptz
      );
      CREATE INDEX webhook_effects_due ON webhook_effects (next_attempt_at) WHERE status IN ('PENDING', 'PROCESSING');
      CREATE INDEX webhook_effects_inbox ON webhook_effects (inbox_id);
      ALTER TABLE webhook_outbox ADD COLUMN attempt_count integer NOT NULL DEFAULT 0;
      ALTER TABLE webhook_outbox ADD COLUMN next_attempt_at timestamptz;
      ALTER TABLE webhook_outbox ADD COLUMN lease_owner text;
      ALTER TABLE webhook_outbox ADD COLUMN last_error text;
      UPDATE webhook_outbox SET next_attempt_at = created_at WHERE published_at IS NULL;
      DROP INDEX webhook_outbox_unpublished;
      CREATE INDEX webhook_outbox_due ON webhook_outbox (next_attempt_at) WHERE published_at IS NULL;
    `,
  },
  {
    version: 3,
    name: 'unsigned "go fetch" notices: verification mode and coalescing key',
    sqlite: `
      ALTER TABLE webhook_inbox ADD COLUMN verification TEXT NOT NULL DEFAULT 'signature' CHECK (verification IN ('signature', 'fetch-required'));
      ALTER TABLE webhook_inbox ADD COLUMN coalesce_key TEXT;
      CREATE INDEX webhook_inbox_notice_pending ON webhook_inbox (provider, endpoint_id, coalesce_key)
        WHERE coalesce_key IS NOT NULL AND status = 'PENDING';
    `,
    postgres: `
      ALTER TABLE webhook_inbox ADD COLUMN verification text NOT NULL DEFAULT 'signature' CHECK (verification IN ('signature', 'fetch-required'));
      ALTER TABLE webhook_inbox ADD COLUMN coalesce_key text;
      CREATE INDEX webhook_inbox_notice_pending ON webhook_inbox (provider, endpoint_id, coalesce_key)
        WHERE coalesce_key IS NOT NULL AND status = 'PENDING';
    `,
  },
  {
    version: 4,
    name: 'PostgreSQL: keep sealed payloads up to ~8 KB in their row',
    sqlite: `
      -- Nothing to do: SQLite keeps a large value in overflow pages of its own row's b-tree.
    `,
    // By default a row over ~2 KB moves its bytea to the TOAST table in ~2 KB chunks: a 6 KB
    // body became 4 TOAST rows plus 4 TOAST index entries. Most webhook bodies are 1–8 KB, so
    // keep a row whole up to a page (8160 bytes); larger ones still go out of line, uncompressed
    // (EXTERNAL). Measured with the accept statement, 64-row batches of 1–13 KB bodies:
    // PostgreSQL CPU per accepted event 141 → 129 µs (mean of 5 alternating runs), TOAST 145 → 91 MB.
    postgres: `
      ALTER TABLE webhook_payload SET (toast_tuple_target = 8160);
    `,
  },
  {
    version: 5,
    name: 'effects: partial index of FAILED rows, for /metrics',
    // /metrics counted effects by status over the whole table, DONE included: a scan of every effect
    // ever recorded, on every scrape. It now counts only the rows still to do (webhook_effects_due)
    // and the FAILED ones (this index), as the inbox backlog does.
    sqlite: `
      CREATE INDEX webhook_effects_failed ON webhook_effects (failure_reason) WHERE status = 'FAILED';
    `,
    postgres: `
      CREATE INDEX webhook_effects_failed ON webhook_effects (failure_reason) WHERE status = 'FAILED';
    `,
  },
  {
    version: 6,
    name: 'compressed payloads: encoding and raw size',
    // A large body is compressed before it is sealed (crypto/payload-cipher.ts): encoding 'br'
    // and the raw size, both bound into the ciphertext's associated data. NULL = the raw bytes.
    // The raw size lets a worker count what a payload will hold once opened before it reads it.
    sqlite: `
      ALTER TABLE webhook_payload ADD COLUMN encoding TEXT CHECK (encoding IN ('br'));
      ALTER TABLE webhook_payload ADD COLUMN raw_bytes INTEGER CHECK ((encoding IS NULL) = (raw_bytes IS NULL));
    `,
    postgres: `
      ALTER TABLE webhook_payload ADD COLUMN encoding text CHECK (encoding IN ('br'));
      ALTER TABLE webhook_payload ADD COLUMN raw_bytes integer CHECK ((encoding IS NULL) = (raw_bytes IS NULL));
    `,
  },
  {
    version: 7,
    name: 'outbox: the broker destinations that already have the event',
    // A row routed to several brokers was retried whole when one of them failed: the others got
    // the event again on every retry (RabbitMQ has no de-duplication, JetStream only within its
    // duplicate window). The relay now records, with each settle, the destination ids that took
    // it (a JSON array, NULL = none), and a retry publishes only to the routes still owed.
    sqlite: `
      ALTER TABLE webhook_outbox ADD COLUMN published_to TEXT;
    `,
    postgres: `
      ALTER TABLE webhook_outbox ADD COLUMN published_to jsonb;
    `,
  },
  {
    version: 8,
    name: 'outbox: rows parked after a destination refused them for good',
    // A publish that can never succeed (a NeedsDecisionError from the destination: a routing key
    // over 255 bytes, a message over the server's max_payload) was retried for ever. Such a row is
    // now parked: failure_reason set, next_attempt_at NULL (never due), until an operator requeues
    // it. The partial index lets /metrics count parked rows and the CLI list them without a scan.
    sqlite: `
      ALTER TABLE webhook_outbox ADD COLUMN failure_reason TEXT;
      CREATE INDEX webhook_outbox_parked ON webhook_outbox (failure_reason) WHERE published_at IS NULL AND failure_reason IS NOT NULL;
    `,
    postgres: `
      ALTER TABLE webhook_outbox ADD COLUMN failure_reason text;
      CREATE INDEX webhook_outbox_parked ON webhook_outbox (failure_reason) WHERE published_at IS NULL AND failure_reason IS NOT NULL;
    `,
  },
  {
    version: 9,
    name: 'inbox (SQLite): the newest FAILED rows without a scan',
    // `events list --status failed` (newest first, LIMIT n) walked SQLite's primary key from the
    // newest row down until it had n FAILED ones: the whole inbox when fewer exist, as they
    // usually do. Only FAILED rows enter this index, so accepts and settles do not maintain it.
    // PostgreSQL already serves that list from webhook_inbox_failed (a top-n sort of the FAILED
    // rows), and an index built there would lock out accepts for the whole table's scan.
    sqlite: `
      CREATE INDEX webhook_inbox_failed_recent ON webhook_inbox (inbox_id) WHERE status = 'FAILED';
    `,
    postgres: `
      -- nothing to do on PostgreSQL (see the SQLite side)
    `,
  },
  {
    version: 10,
    name: 'transmissions: one body per signed transmission id',
    // PayPal signs a CRC-32 of the body, not a hash: anyone holding one captured request can make
    // other bytes (another event id, another amount) with the same CRC-32, and the signature then
    // verifies them for its whole freshness window (4 days). The defence is that a transmission
    // carries one body: the first verified request binds its transmission id to the SHA-256 of its
    // bytes, and other bytes under that id are refused, across restarts and server processes (an
    // in-memory record was neither). A table of its own, not an inbox column: a transmission is
    // bound whatever becomes of its event (a duplicate of an event another transmission carried,
    // a type the endpoint ignores), and adding it reads no existing table. Keyed per provider, not
    // per endpoint: a provider's transmission ids are its own global ids, and a captured request
    // replayed with other bytes to a second endpoint that trusts the same secret is refused too.
    sqlite: `
      CREATE TABLE webhook_transmission (
        provider        TEXT NOT NULL,
        endpoint_id     TEXT NOT NULL,
        transmission_id TEXT NOT NULL,
        payload_hash    BLOB NOT NULL,      -- SHA-256 of the one body this transmission verified
        received_at     INTEGER NOT NULL,   -- Unix ms of the first request that bound it (at endpoint_id)
        PRIMARY KEY (provider, transmission_id)
      ) STRICT, WITHOUT ROWID;
    `,
    postgres: `
      CREATE TABLE webhook_transmission (
        provider        text NOT NULL,
        endpoint_id     text NOT NULL,
        transmission_id text NOT NULL,
        payload_hash    bytea NOT NULL,     -- SHA-256 of the one body this transmission verified
        received_at     timestamptz NOT NULL,
        PRIMARY KEY (provider, transmission_id)
      );
    `,
  },
  {
    version: 11,
    name: 'transmissions: pruned once no request under them can be fresh',
    // The serving process deletes bindings older than twice the provider's widest freshness window
    // (http/transmission-pruner.ts), oldest first, a bounded batch at a time: this index finds
    // them without scanning the table. The build reads only this new table's rows, so a table of
    // many millions takes seconds here (its inserts wait meanwhile: the PayPal requests of that
    // moment answer 503 and are retried).
    sqlite: `
      CREATE INDEX webhook_transmission_received ON webhook_transmission (provider, received_at);
    `,
    postgres: `
      CREATE INDEX webhook_transmission_received ON webhook_transmission (provider, received_at);
    `,
  },
];

/** The schema version this build needs. */
export const LATEST_VERSION = MIGRATIONS[MIGRATIONS.length - 1]!.version;

/**
 * What to warn of when a database's schema (its highest applied version) is newer than this build
 * knows: a newer build migrated it and this one was rolled back to. Nothing is applied or undone;
 * this build works on it only while the newer migrations kept what it uses. Undefined otherwise.
 */
export function newerSchemaWarning(version: number | null): string | undefined {
  if (version === null || version <= LATEST_VERSION) return undefined;
  return `the database's schema is at version ${version}, newer than this build's ${LATEST_VERSION} (a newer webhook-inbox migrated it): nothing was applied or undone, and this build works on it only as long as those migrations kept what it uses`;
}

/** Logs newerSchemaWarning at a start that migrated; a read that fails says nothing (the migrate just worked). */
export async function warnIfSchemaNewer(store: Pick<InboxStore, 'schemaVersion'>, log: Logger): Promise<void> {
  const warning = newerSchemaWarning(await store.schemaVersion().catch(() => null));
  if (warning) log.warn(warning);
}

/**
 * Throws when a database's schema (its highest applied version; null = never migrated) is older
 * than this build needs: every accept would fail, so /readyz must not say ready.
 */
export function assertSchemaCurrent(version: number | null): void {
  if (version === null || version < LATEST_VERSION) {
    throw new SchemaOutdatedError(`schema at version ${version ?? 'none'}, this build needs ${LATEST_VERSION}: run webhook-inbox migrate (serve does unless --no-migrate)`);
  }
}
