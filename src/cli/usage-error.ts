/** A command line that asks for something that does not exist: exit 2 with the usage. */
export class UsageError extends Error {}
