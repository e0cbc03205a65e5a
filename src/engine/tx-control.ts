/**
 * A handler's `ctx.tx` runs inside the engine's settle transaction, in a savepoint of its own.
 * Transaction control there breaks exactly-once: a COMMIT commits the handler's writes (and
 * those of the handlers before it) without their processed markers, so a retry applies them
 * again; a ROLLBACK undoes the earlier handlers' writes while the rest of the batch would run in
 * autocommit; a RELEASE or ROLLBACK TO of the engine's savepoint ends the handler's isolation.
 * So such statements are refused before they reach the database. One statement per query is
 * what makes the first word decisive: SQLite prepares one statement only, and the PostgreSQL
 * store sends a handler's SQL with the extended protocol, which refuses several.
 */
const CONTROL = new Set(['BEGIN', 'START', 'COMMIT', 'END', 'ROLLBACK', 'ABORT', 'SAVEPOINT', 'RELEASE']);

/**
 * PostgreSQL settings (`SET search_path`, `SET LOCAL statement_timeout`, `SET ROLE`, `RESET`,
 * `DISCARD`) outlive the handler: a released savepoint keeps them for the batch's other events'
 * handlers and the engine's settle, and a session one for the pooled connection's later batches
 * (one tenant's search_path took other tenants' writes). Refused the same way. What this word
 * cannot see (`SELECT set_config(…)`, a function that sets something) is reset as the handler's
 * savepoint is released (StoreTx.releaseSavepoint).
 */
export const SETTINGS = new Set(['SET', 'RESET', 'DISCARD']);

/**
 * SQLite's counterpart: a PRAGMA sets the one writer connection every accept and batch shares,
 * for the process's life (`PRAGMA query_only = 1` failed every later write, accepts included;
 * `busy_timeout` and `synchronous` are the writer's own to set: sqlite/tx-gate.ts).
 */
const SQLITE_SETTINGS = new Set(['PRAGMA']);

/** Whether a statement transactionControl named is a setting (SETTINGS, SQLITE_SETTINGS) rather than transaction control proper. */
export const isSetting = (control: string): boolean => SETTINGS.has(control) || SQLITE_SETTINGS.has(control);

/**
 * The transaction-control statement `sql` is, by its first words (`COMMIT`, `PREPARE
 * TRANSACTION`…), or undefined. Skips what both databases skip before a statement: white
 * space, empty statements (`;`) and comments (PostgreSQL's block comments nest and its `--`
 * comments end at a carriage return too, SQLite's not).
 */
export function transactionControl(sql: string, kind: 'sqlite' | 'postgres'): string | undefined {
  let i = skipToWord(sql, 0, kind);
  const first = wordAt(sql, i);
  if (CONTROL.has(first) || (kind === 'postgres' ? SETTINGS : SQLITE_SETTINGS).has(first)) return first;
  if (first !== 'PREPARE' || kind !== 'postgres') return undefined;
  i = skipToWord(sql, i + first.length, kind);
  return wordAt(sql, i) === 'TRANSACTION' ? 'PREPARE TRANSACTION' : undefined;
}

/**
 * The word at `i`, upper-cased (ASCII only, as both databases match keywords). It runs on as an
 * identifier does in both (digits, `$`, non-ASCII): `transaction1` is a name, not TRANSACTION.
 */
function wordAt(sql: string, i: number): string {
  const m = /^[A-Za-z_][A-Za-z0-9_$\u0080-\uffff]*/.exec(sql.slice(i, i + 64));
  return m ? m[0].replace(/[a-z]+/g, (w) => w.toUpperCase()) : '';
}

function skipToWord(sql: string, from: number, kind: 'sqlite' | 'postgres'): number {
  let i = from;
  while (i < sql.length) {
    const c = sql[i]!;
    if (c === ';' || /\s/.test(c)) {
      i++;
    } else if (sql.startsWith('--', i)) {
      // PostgreSQL's lexer ends a -- comment at \n or \r, SQLite's at \n only.
      const nl = sql.slice(i).search(kind === 'postgres' ? /[\n\r]/ : /\n/);
      i = nl < 0 ? sql.length : i + nl + 1;
    } else if (sql.startsWith('/*', i)) {
      i = blockCommentEnd(sql, i, kind);
    } else {
      break;
    }
  }
  return i;
}

/** The index just past the block comment that starts at `i` (the end of `sql` if unterminated). */
function blockCommentEnd(sql: string, i: number, kind: 'sqlite' | 'postgres'): number {
  let depth = 0;
  while (i < sql.length) {
    if (sql.startsWith('/*', i) && (depth === 0 || kind === 'postgres')) {
      depth++;
      i += 2;
    } else if (sql.startsWith('*/', i)) {
      i += 2;
      if (--depth === 0) return i;
    } else {
      i++;
    }
  }
  return sql.length;
}
