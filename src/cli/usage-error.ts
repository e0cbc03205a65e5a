/** A command line that asks for something that does not exist: exit 2 with the usage. */
export class UsageError extends Error {}

/** A failure the command explains in one line (exit 1, no stack): a missing database file, say. */
export class CommandError extends Error {}
