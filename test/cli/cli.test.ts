import { execFileSync, spawn, spawnSync } from 'node:child_process';
import { once } from 'node:events';
import { connect, createServer, type AddressInfo } from 'node:net';
import { closeSync, constants as fsConstants, existsSync, mkdtempSync, openSync, rmSync, writeFileSync, writeSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { stringify } from 'yaml';
import Database from 'better-sqlite3';
import pg from 'pg';
import { LATEST_VERSION } from '../../src/store/migrations.js';
import { configDoc, STRIPE_SECRET } from '../helpers/app.js';
import { waitFor } from '../helpers/engine.js';
import { stripeEvent, stripeHeaders } from '../helpers/events.js';
import { PG_ADMIN_URL, pgAvailable } from '../helpers/pg.js';
import { freshDatabase } from '../helpers/stores.js';
import { assertBuilt, CLI, spawnServer } from '../helpers/server-process.js';

const PG_UP = await pgAvailable();

function run(args: string[], env: NodeJS.ProcessEnv = {}) {
  assertBuilt();
  const r = spawnSync(process.execPath, [CLI, ...args], { env: { ...process.env, ...env }, encoding: 'utf8', timeout: 30_000 });
  return { code: r.status, out: r.stdout, err: r.stderr };
}

describe('webhook-inbox CLI', () => {
  const dir = mkdtempSync(join(tmpdir(), 'wi-cli-'));

  it.each(['serve', 'migrate', 'check-config', 'send-sample'])('%s --help prints usage and exits 0', (cmd) => {
    const r = run([cmd, '--help']);
    expect(r.code).toBe(0);
    expect(r.out).toContain(`Usage: webhook-inbox ${cmd}`);
  });

  it('an unknown command or option exits 2 with usage', () => {
    expect(run(['serv']).code).toBe(2);
    const r = run(['migrate', '--config', 'x', '--bogus']);
    expect(r.code).toBe(2);
    expect(r.err).toContain("Unknown option '--bogus'");
    expect(run(['migrate']).err).toContain('--config is required');
  });

  it('an argument past what the command takes is a usage error (2), not ignored; the top help names DATABASE_URL and the exit codes', () => {
    const file = join(dir, 'extra.yaml');
    writeFileSync(file, stringify(configDoc(`sqlite:${join(dir, 'extra.db')}`)));
    for (const args of [['retry', '-c', file, 'a', 'b'], ['keys', 'list', '-c', file, 'junk'], ['events', 'list', '-c', file, 'junk'], ['events', 'show', '-c', file, 'x', 'y']]) {
      const r = run(args);
      expect(r.code, args.join(' ')).toBe(2);
      expect(r.err).toMatch(/unexpected argument "(b|junk|y)"/);
    }
    const top = run(['--help']);
    expect(top.out).toContain('DATABASE_URL');
    expect(top.out).toContain('78 config error');
  });

  it('a number option takes decimal digits only: an empty --port= is a usage error (2), not port 0 (a random port)', () => {
    const missing = join(dir, 'never-read.yaml');
    for (const port of ['', ' ', '0x1F90', '1e3', '80.0']) {
      const r = run(['serve', '--config', missing, `--port=${port}`]);
      expect(r.code, JSON.stringify(port)).toBe(2);
      expect(r.err).toContain(port.trim() === '' ? '--port was given empty' : '--port must be an integer from 0 to 65535');
    }
    const limit = run(['events', 'list', '--config', missing, '--limit=']);
    expect(limit.code).toBe(2);
    expect(limit.err).toContain('--limit was given empty');
    expect(run(['events', 'list', '--config', missing, '--limit=0']).err).toContain('--limit must be an integer');
  });

  it('help COMMAND prints that command\'s usage; help of an unknown command exits 2 and says so (it printed the top help and exited 0)', () => {
    const r = run(['help', 'serve']);
    expect(r.code).toBe(0);
    expect(r.out).toContain('Usage: webhook-inbox serve');
    const unknown = run(['help', 'serv']);
    expect(unknown.code).toBe(2);
    expect(unknown.err).toContain('unknown command "serv"');
  });

  it('operator commands on a SQLite file that does not exist exit 1 and say so, without creating it (they made an empty database)', () => {
    const db = join(dir, 'typo.db');
    const file = join(dir, 'typo.yaml');
    writeFileSync(file, stringify(configDoc(`sqlite:${db}`)));
    for (const args of [['events', 'list'], ['events', 'show', '0190a1b2-0000-7000-8000-000000000000'], ['retry', '0190a1b2-0000-7000-8000-000000000000'], ['keys', 'list']]) {
      const r = run([...args, '--config', file]);
      expect(r.code, args.join(' ')).toBe(1);
      expect(r.err, args.join(' ')).toContain(`no SQLite database at ${db}`);
    }
    expect(existsSync(db)).toBe(false);
  });

  it('operator commands on a database that was never migrated, or is behind this build, say to run migrate in one line (it was a "no such table" stack trace)', () => {
    const db = join(dir, 'unmigrated.db');
    writeFileSync(db, ''); // an empty file is an empty SQLite database
    const file = join(dir, 'unmigrated.yaml');
    writeFileSync(file, stringify(configDoc(`sqlite:${db}`)));
    for (const args of [['events', 'list'], ['keys', 'list'], ['requeue', '--reason', 'technical']]) {
      const r = run([...args, '--config', file]);
      expect(r.code, args.join(' ')).toBe(1);
      expect(r.err, args.join(' ')).toMatch(/^webhook-inbox \w+: schema at version none, this build needs \d+: run webhook-inbox migrate/);
      expect(r.err, args.join(' ')).not.toContain('    at ');
    }
    expect(run(['migrate', '--config', file]).code).toBe(0);
    expect(run(['events', 'list', '--config', file]).code).toBe(0);
    const conn = new Database(db);
    conn.prepare('DELETE FROM schema_migrations WHERE version = ?').run(LATEST_VERSION);
    conn.close();
    const behind = run(['events', 'list', '--config', file]);
    expect(behind.code).toBe(1);
    expect(behind.err).toContain(`schema at version ${LATEST_VERSION - 1}, this build needs ${LATEST_VERSION}: run webhook-inbox migrate`);
  });

  it('an operator command on a SQLite file another process holds write-locked exits 1 with one line saying so (it was a stack trace)', () => {
    const db = join(dir, 'locked.db');
    const file = join(dir, 'locked.yaml');
    writeFileSync(file, stringify(configDoc(`sqlite:${db}?busyTimeoutMs=100`)));
    expect(run(['migrate', '--config', file]).code).toBe(0);
    const holder = new Database(db);
    holder.prepare('BEGIN IMMEDIATE').run();
    try {
      const r = run(['requeue', '--reason', 'technical', '--config', file]);
      expect(r.code).toBe(1);
      expect(r.err).toBe('webhook-inbox requeue: database unavailable: SQLite: database is locked (another process held its write lock past busyTimeoutMs)\n');
    } finally {
      holder.prepare('ROLLBACK').run();
      holder.close();
    }
  });

  it('an operator command the SQLite database refuses (a damaged file here; a file the operator may only read alike) exits 1 with one line, SQLite\'s own reason (it was a stack trace)', () => {
    const db = join(dir, 'damaged.db');
    const file = join(dir, 'damaged.yaml');
    writeFileSync(file, stringify(configDoc(`sqlite:${db}`)));
    expect(run(['migrate', '--config', file]).code).toBe(0);
    // The inbox table and its indexes overwritten: the file still opens and its schema version
    // reads (the command gets past its ping), the inbox does not.
    const conn = new Database(db);
    const pages = conn.prepare("SELECT rootpage FROM sqlite_master WHERE tbl_name = 'webhook_inbox' AND rootpage > 0").pluck().all() as number[];
    const pageSize = conn.pragma('page_size', { simple: true }) as number;
    conn.close(); // the last connection: the WAL is checkpointed into the file
    const fd = openSync(db, 'r+');
    for (const p of pages) writeSync(fd, Buffer.alloc(pageSize, 0xff), 0, pageSize, (p - 1) * pageSize);
    closeSync(fd);
    for (const args of [['events', 'list'], ['requeue', '--reason', 'technical']]) {
      const r = run([...args, '--config', file]);
      expect(r.code, args.join(' ')).toBe(1);
      expect(r.err, args.join(' ')).toBe(`webhook-inbox ${args[0]}: database error: SQLite: database disk image is malformed (SQLITE_CORRUPT)\n`);
    }
  });

  it('serve, migrate and events against a PostgreSQL server that is not there exit 1 with one line naming the reason, no stack trace', async () => {
    const closed = createServer();
    await new Promise<void>((r) => closed.listen(0, '127.0.0.1', r));
    const port = (closed.address() as AddressInfo).port;
    await new Promise((r) => closed.close(r)); // a port nothing listens on now
    const file = join(dir, 'pg-absent.yaml');
    writeFileSync(file, stringify(configDoc(`postgres://app:s3cret@127.0.0.1:${port}/inbox`)));
    for (const args of [['serve'], ['migrate'], ['events', 'list']]) {
      const r = run([...args, '--config', file]);
      expect(r.code, args[0]).toBe(1);
      expect(r.err, args[0]).toBe(`webhook-inbox ${args[0]}: database unavailable: PostgreSQL: connect ECONNREFUSED 127.0.0.1:${port}\n`);
    }
  });

  it('send-sample: an endpoint the config lacks is a usage error (2), a server that is not there a one-line error (1)', async () => {
    const file = join(dir, 'sample.yaml');
    writeFileSync(file, stringify(configDoc('sqlite:./x.db')));
    const nope = run(['send-sample', '--config', file, '--endpoint', 'nope']);
    expect(nope.code).toBe(2);
    expect(nope.err).toContain('no endpoint "nope"');
    const closed = createServer();
    await new Promise<void>((r) => closed.listen(0, '127.0.0.1', () => r()));
    const port = (closed.address() as AddressInfo).port;
    await new Promise((r) => closed.close(r)); // a port nothing listens on
    const down = run(['send-sample', '--config', file, '--endpoint', 'stripe', '--url', `http://127.0.0.1:${port}`]);
    expect(down.code).toBe(1);
    expect(down.err).toContain('ECONNREFUSED');
    expect(down.err).toContain('is the server running there?');
    expect(down.err).not.toMatch(/\n\s+at /); // no stack trace
  });

  it('check-config exits 78 naming the bad path, and 0 for a valid file', () => {
    const bad = join(dir, 'bad.yaml');
    writeFileSync(bad, stringify({ ...configDoc('sqlite:./x.db'), endpoints: [{ id: 'e', provider: 'stripe', secrets: [{ version: 'v1', value: 'whsec_x' }], maxBodyBytes: -1 }] }));
    const r = run(['check-config', '--config', bad]);
    expect(r.code).toBe(78);
    expect(r.err).toContain('endpoints[0].maxBodyBytes: must be an integer');
    const missing = join(dir, 'missing-secret.yaml');
    writeFileSync(missing, stringify({ ...configDoc('sqlite:./x.db'), endpoints: [{ id: 'e', provider: 'stripe', secrets: [{ version: 'v1', value: '${env:NOT_SET_ANYWHERE}' }] }] }));
    const m = run(['check-config', '--config', missing]);
    expect(m.code).toBe(78);
    expect(m.err).toContain('endpoints[0].secrets[0].value: environment variable NOT_SET_ANYWHERE is not set');
    // Every version retired: /readyz would say 503 and every request would be refused; so does check-config.
    const retired = join(dir, 'retired.yaml');
    writeFileSync(retired, stringify({ ...configDoc('sqlite:./x.db'), endpoints: [{ id: 'e', provider: 'stripe', secrets: [{ version: 'v1', value: 'whsec_x', retireAt: '2020-01-01T00:00:00Z' }] }] }));
    const rr = run(['check-config', '--config', retired]);
    expect(rr.code).toBe(78);
    expect(rr.err).toContain('endpoints[0].secrets: every version is retired');
    const good = join(dir, 'good.yaml');
    writeFileSync(good, stringify(configDoc('sqlite:./x.db')));
    const g = run(['check-config', '--config', good]);
    expect(g.code).toBe(0);
    expect(g.out).toContain('payloads: kept (no retention set)');
    // A secret with a space at an end is kept as written, with a warning naming its path (never its value).
    const spaced = join(dir, 'spaced.yaml');
    writeFileSync(spaced, stringify(configDoc('sqlite:./x.db', { endpoints: [{ id: 'gh', provider: 'github', secrets: [{ version: 'v1', value: 'typed-in secret ' }] }] })));
    const sp = run(['check-config', '--config', spaced]);
    expect(sp.code).toBe(0);
    expect(sp.err).toContain('warning: endpoints[0].secrets[0].value: the value has white space at an end');
    expect(sp.err + sp.out).not.toContain('typed-in');
    expect(g.err).not.toContain('warning');
    const retention = join(dir, 'retention.yaml');
    writeFileSync(retention, stringify(configDoc('sqlite:./x.db', { retention: { processedPayloadDays: 30 } })));
    expect(run(['check-config', '--config', retention]).out).toContain('payloads: deleted 30 day(s) after receipt once PROCESSED; kept while FAILED');
    writeFileSync(retention, stringify(configDoc('sqlite:./x.db', { retention: { failedPayloadDays: 90 } })));
    expect(run(['check-config', '--config', retention]).out).toContain('payloads: kept once PROCESSED; deleted 90 day(s) after receipt while FAILED');
    writeFileSync(retention, stringify(configDoc('sqlite:./x.db', { retention: { processedPayloadDays: 'forever' } })));
    const rb = run(['check-config', '--config', retention]);
    expect(rb.code).toBe(78);
    expect(rb.err).toContain('retention.processedPayloadDays');
    // An unsigned endpoint is called out as such, with the rate limit that guards it.
    const unsigned = join(dir, 'unsigned.yaml');
    writeFileSync(unsigned, stringify(configDoc('sqlite:./x.db', { endpoints: [{ id: 'm', provider: 'mollie', options: { mode: 'classic' } }] })));
    const u = run(['check-config', '--config', unsigned]);
    expect(u.code).toBe(0);
    expect(u.out).toContain('m: mollie, UNSIGNED (notices stored as fetch-required)');
    expect(u.out).toContain('rate limit 50/s burst 200');
  });

  it('migrate applies the schema once', () => {
    const file = join(dir, 'm.yaml');
    writeFileSync(file, stringify(configDoc(`sqlite:${join(dir, 'm.db')}`)));
    expect(run(['migrate', '--config', file]).out).toContain('applied migrations: 1');
    expect(run(['migrate', '--config', file]).out).toContain('schema is up to date');
  });

  it('work: SIGHUP re-reads the secrets and the workers keep running (it used to end the process)', async () => {
    const file = join(dir, 'work.yaml');
    writeFileSync(file, stringify(configDoc(`sqlite:${join(dir, 'work.db')}`)));
    const child = spawn(process.execPath, [CLI, 'work', '--config', file], { stdio: ['ignore', 'ignore', 'pipe'] });
    let stderr = '';
    child.stderr!.on('data', (c: Buffer) => { stderr += c.toString(); });
    const until = async (text: string) => {
      for (let i = 0; i < 100 && !stderr.includes(text); i++) await new Promise((r) => setTimeout(r, 100));
      expect(stderr).toContain(text);
    };
    try {
      await until('workers running');
      child.kill('SIGHUP');
      await until('secrets reloaded');
      expect(child.exitCode).toBeNull();
    } finally {
      child.kill('SIGTERM');
    }
    const [code] = child.exitCode !== null ? [child.exitCode] : await once(child, 'exit');
    expect(code).toBe(0);
  });

  /** Writes the secret into a FIFO that a reader has open (never waiting for one): whether one had. */
  const answer = (fifo: string): boolean => {
    let fd: number;
    try {
      fd = openSync(fifo, fsConstants.O_WRONLY | fsConstants.O_NONBLOCK);
    } catch {
      return false; // ENXIO: nobody is reading it
    }
    try {
      writeSync(fd, `${STRIPE_SECRET}\n`);
    } finally {
      closeSync(fd);
    }
    return true;
  };

  it('serve: a secret file that stops answering (a hung mount) does not stop the server: it goes on with the secrets it has, names the file, and reloads once the file answers', async () => {
    const secretFile = join(dir, 'hung-mount-stripe-secret');
    writeFileSync(secretFile, `${STRIPE_SECRET}\n`);
    const doc = configDoc(`sqlite:${join(dir, 'hung.db')}`, {
      endpoints: [{ id: 'stripe', provider: 'stripe', secrets: [{ version: 'v1', value: `\${file:${secretFile}}` }] }],
      log: { level: 'info' },
    });
    const server = await spawnServer(join(dir, 'hung.yaml'), doc);
    const post = (id: string) => {
      const body = stripeEvent(id);
      return fetch(`${server.url}/webhooks/stripe`, { method: 'POST', body, headers: stripeHeaders(body), signal: AbortSignal.timeout(3000) });
    };
    try {
      expect((await post('evt_before_hang')).status).toBe(200);
      // The mount stops answering: opening the file now blocks until someone writes (a FIFO with no writer).
      rmSync(secretFile);
      execFileSync('mkfifo', [secretFile]);
      server.child.kill('SIGHUP');
      await waitFor(() => server.stdout().includes('has not answered'), 6000, 'the warning about the file');
      const warning = server.stdout().split('\n').find((l) => l.includes('has not answered'))!;
      expect(JSON.parse(warning)).toMatchObject({ level: 'warn', file: secretFile });
      // The server answers all the while, with the secrets it had.
      expect((await post('evt_while_hung')).status).toBe(200);
      expect((await fetch(`${server.url}/healthz`, { signal: AbortSignal.timeout(3000) })).status).toBe(200);
      expect(server.stdout()).not.toContain('secrets reloaded');
      // The mount answers again (the FIFO gets its writer): the reload the SIGHUP asked for completes.
      expect(answer(secretFile), 'the server is reading the file').toBe(true);
      await waitFor(() => server.stdout().includes('secrets reloaded'), 6000, 'the reload');
      expect((await post('evt_after_hang')).status).toBe(200);
    } finally {
      answer(secretFile); // a read still waiting would keep the server from exiting
      server.child.kill('SIGTERM');
      if (server.child.exitCode === null) await once(server.child, 'exit');
    }
  });

  it.each([['SIGINT', 'SIGTERM'], ['SIGTERM', 'SIGINT']] as const)('serve: %s then %s ends the process at once, not after the shutdown grace (a second signal of the other kind was ignored)', async (first, second) => {
    const file = join(dir, `second-${first}.yaml`);
    const server = await spawnServer(file, configDoc(`sqlite:${join(dir, `second-${first}.db`)}`));
    // A sender that stalls mid-body holds the graceful shutdown for its 5 s grace period.
    const port = Number(new URL(server.url).port);
    const stalled = connect(port, '127.0.0.1');
    await once(stalled, 'connect');
    stalled.write('POST /webhooks/stripe HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{');
    try {
      await new Promise((r) => setTimeout(r, 200));
      const exited = once(server.child, 'exit');
      server.child.kill(first);
      for (let i = 0; i < 50 && !server.stderr().includes('shutting down'); i++) await new Promise((r) => setTimeout(r, 20));
      const t0 = Date.now();
      server.child.kill(second);
      const [code, signal] = await exited;
      expect(Date.now() - t0, 'waited for the shutdown grace').toBeLessThan(4000); // the grace is 5 s: well under it, with room for a loaded CI box
      expect({ code, signal }).toEqual({ code: null, signal: second });
    } finally {
      stalled.destroy();
    }
  });

  it('serve and events on a SQLite file that is not a database exit 1 and say why, naming the file (it said only "SQLite worker stopped")', () => {
    const db = join(dir, 'not-a-db.db');
    writeFileSync(db, Buffer.alloc(4096, 7));
    const file = join(dir, 'not-a-db.yaml');
    writeFileSync(file, stringify(configDoc(`sqlite:${db}`)));
    for (const args of [['serve', '--config', file], ['events', 'list', '--config', file]]) {
      const r = run(args);
      expect(r.code, args[0]).toBe(1);
      expect(r.err, args[0]).toContain(`cannot open SQLite database ${db}: file is not a database`);
    }
  });

  it('serve: a request in flight at SIGTERM is answered 200, then its keep-alive connection is closed and the process exits, not after the whole grace period', async () => {
    const file = join(dir, 'inflight.yaml');
    const server = await spawnServer(file, configDoc(`sqlite:${join(dir, 'inflight.db')}`));
    const body = stripeEvent('evt_inflight');
    const head = Object.entries(stripeHeaders(body)).map(([k, v]) => `${k}: ${v}\r\n`).join('');
    const sock = connect(Number(new URL(server.url).port), '127.0.0.1');
    await once(sock, 'connect');
    let answer = '';
    sock.on('data', (d: Buffer) => { answer += d.toString(); });
    const closed = once(sock, 'close');
    try {
      sock.write(`POST /webhooks/stripe HTTP/1.1\r\nHost: x\r\n${head}content-length: ${body.length}\r\n\r\n`);
      sock.write(body.subarray(0, 10));
      await new Promise((r) => setTimeout(r, 200));
      const exited = once(server.child, 'exit');
      server.child.kill('SIGTERM');
      await new Promise((r) => setTimeout(r, 300));
      sock.write(body.subarray(10));
      for (let i = 0; i < 100 && !answer.includes('inbox_id'); i++) await new Promise((r) => setTimeout(r, 20));
      expect(answer).toMatch(/^HTTP\/1\.1 200 /);
      const t0 = Date.now();
      await closed;
      const [code] = await exited;
      expect(Date.now() - t0, 'the idle keep-alive connection held the shutdown').toBeLessThan(3500); // the grace is 5 s
      expect(code).toBe(0);
    } finally {
      sock.destroy();
    }
  });

  it('serve: a connection that has sent nothing (pre-opened by a client or a proxy) does not hold the shutdown for the whole grace period', async () => {
    const file = join(dir, 'silent.yaml');
    const server = await spawnServer(file, configDoc(`sqlite:${join(dir, 'silent.db')}`));
    const sock = connect(Number(new URL(server.url).port), '127.0.0.1');
    sock.on('error', () => undefined);
    await once(sock, 'connect');
    try {
      const exited = once(server.child, 'exit');
      const t0 = Date.now();
      server.child.kill('SIGTERM');
      const [code] = await exited;
      expect(Date.now() - t0, 'the silent connection held the shutdown').toBeLessThan(3500); // the grace is 5 s
      expect(code).toBe(0);
    } finally {
      sock.destroy();
    }
  });

  it.each(['serve', 'work'])('%s: a SIGHUP while it starts does not end the process (its default action did), and is acted on once up', async (cmd) => {
    const slow = join(dir, `slow-${cmd}.mjs`);
    const loading = join(dir, `loading-${cmd}`);
    // The marker says the handlers are loading, so the process is past its start (a fixed delay
    // could land before Node ran any of our code on a loaded box: a SIGHUP then no one can catch).
    writeFileSync(slow, `import { writeFileSync } from 'node:fs';\nexport default async () => { writeFileSync(${JSON.stringify(loading)}, ''); await new Promise((r) => setTimeout(r, 1500)); };\n`);
    const file = join(dir, `hup-${cmd}.yaml`);
    // serve logs the reload as a JSON line on stdout: at level info, and read, so that it can be checked.
    writeFileSync(file, stringify(configDoc(`sqlite:${join(dir, `hup-${cmd}.db`)}`, cmd === 'serve' ? { log: { level: 'info' } } : {})));
    const child = spawn(process.execPath, [CLI, cmd, '--config', file, '--handlers', slow], { stdio: ['ignore', 'pipe', 'pipe'] });
    let stderr = '';
    let stdout = '';
    child.stderr!.on('data', (c: Buffer) => { stderr += c.toString(); });
    child.stdout!.on('data', (c: Buffer) => { stdout += c.toString(); });
    try {
      for (let i = 0; i < 200 && !existsSync(loading); i++) await new Promise((r) => setTimeout(r, 50));
      expect(existsSync(loading), stderr).toBe(true);
      child.kill('SIGHUP');
      for (let i = 0; i < 100 && !/listening on|workers running/.test(stderr) && child.exitCode === null && child.signalCode === null; i++) await new Promise((r) => setTimeout(r, 50));
      expect(child.signalCode, stderr).toBeNull();
      expect(stderr).toMatch(/listening on|workers running/);
      // work says it on stderr, serve logs it as JSON on stdout (flushed within 250 ms); the reload
      // reads the files off the event loop, so it may follow the start line.
      const reloaded = () => (cmd === 'work' ? stderr.includes('secrets reloaded') : stdout.includes('"msg":"secrets reloaded"'));
      for (let i = 0; i < 100 && !reloaded(); i++) await new Promise((r) => setTimeout(r, 50));
      expect(reloaded(), `${cmd}: the SIGHUP was not acted on once up\n${stderr}\n${stdout}`).toBe(true);
    } finally {
      child.kill('SIGTERM');
    }
    const [code, signal] = child.exitCode !== null || child.signalCode !== null ? [child.exitCode, child.signalCode] : await once(child, 'exit');
    expect({ code, signal }, stderr).toEqual({ code: 0, signal: null });
  });

  it.runIf(PG_UP)('serve, work and migrate exit 1 with one line naming the failed step, not hang, when the migration fails (PostgreSQL: a role that may not create tables)', async () => {
    const db = await freshDatabase('postgres');
    const admin = new pg.Client({ connectionString: PG_ADMIN_URL });
    await admin.connect();
    try {
      await admin.query("DO $$ BEGIN IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'wi_test_noddl') THEN CREATE ROLE wi_test_noddl LOGIN; END IF; END $$");
      const url = new URL(db.url);
      url.username = 'wi_test_noddl';
      const file = join(dir, 'noddl.yaml');
      writeFileSync(file, stringify(configDoc(url.toString(), { listen: { host: '127.0.0.1', port: 0 } })));
      for (const cmd of ['serve', 'work', 'migrate']) {
        const r = spawnSync(process.execPath, [CLI, cmd, '--config', file], { encoding: 'utf8', timeout: 20_000 });
        expect(r.signal, `${cmd} still running after 20 s`).toBeNull();
        expect(r.status, cmd).toBe(1);
        // One line naming the step and the database's reason (it was a driver stack trace).
        expect(r.stderr, cmd).toContain(`webhook-inbox ${cmd}: PostgreSQL: the schema_migrations table failed: permission denied for schema public; nothing was applied`);
        expect(r.stderr, `${cmd}: a stack trace`).not.toMatch(/\n\s+at /);
      }
    } finally {
      await admin.end();
      await db.cleanup();
    }
  });

  it('serve on a port already in use exits 1 with one line that says so, instead of hanging with its store open; --port moves it', async () => {
    const taken = createServer();
    await new Promise<void>((r) => taken.listen(0, '127.0.0.1', r));
    try {
      const port = (taken.address() as AddressInfo).port;
      const file = join(dir, 'taken.yaml');
      const doc = configDoc(`sqlite:${join(dir, 'taken.db')}`, { listen: { host: '127.0.0.1', port } });
      writeFileSync(file, stringify(doc));
      const r = spawnSync(process.execPath, [CLI, 'serve', '--config', file], { encoding: 'utf8', timeout: 20_000 });
      expect(r.signal, 'still running after 20 s').toBeNull();
      expect(r.status).toBe(1);
      expect(r.stderr).toContain(`webhook-inbox serve: cannot listen on 127.0.0.1:${port}: the address is already in use`);
      expect(r.stderr, 'a stack trace').not.toMatch(/\n\s+at /);
      expect(run(['serve', '--config', file, '--port', '70000']).code).toBe(2);
      // An empty --host (`--host=$HOST`, HOST unset) is a usage error, not a listen on every interface.
      for (const host of ['--host=', '--host= ']) expect(run(['serve', '--config', file, host, '--port', '0']).code, host).toBe(2);
      // --port 0 takes any free port; the printed sample command carries the URL it really has.
      const server = await spawnServer(file, doc, {}, ['--port', '0', '--demo']);
      try {
        expect(server.url).not.toBe(`http://127.0.0.1:${port}`);
        const printed = /npx webhook-inbox (send-sample .*)/.exec(server.stderr())?.[1];
        expect(printed).toContain(`--url ${server.url}`);
        const sent = run(printed!.split(' '));
        expect(sent.out, sent.err).toMatch(/→ 200\n\{"inbox_id":"[0-9a-f-]{36}","duplicate":false\}/);
      } finally {
        server.child.kill('SIGTERM');
        await new Promise((done) => server.child.once('exit', done));
      }
    } finally {
      taken.close();
    }
  });

  it('serve --demo with listen.port 0 in the config prints a sample command that carries --url (it sent to port 0)', async () => {
    const file = join(dir, 'port0.yaml');
    const server = await spawnServer(file, configDoc(`sqlite:${join(dir, 'port0.db')}`), {}, ['--demo']);
    try {
      const printed = /npx webhook-inbox (send-sample .*)/.exec(server.stderr())?.[1];
      expect(printed).toContain(`--url ${server.url}`);
      const sent = run(printed!.split(' '));
      expect(sent.out, sent.err).toMatch(/→ 200\n/);
    } finally {
      server.child.kill('SIGTERM');
      await new Promise((done) => server.child.once('exit', done));
    }
  });

  it('serve + send-sample: the sample event of every adapter that can sign is signed correctly and accepted', async () => {
    const file = join(dir, 's.yaml');
    const secret = (value: string) => [{ version: 'v1', value }];
    const doc = configDoc(`sqlite:${join(dir, 's.db')}`, {
      endpoints: [
        // The first version listed is retired: the sample must be signed with the one still trusted.
        { id: 'stripe', provider: 'stripe', secrets: [{ version: 'v0', value: 'whsec_old', retireAt: '2020-01-01T00:00:00Z' }, { version: 'v1', value: 'whsec_cli' }] },
        { id: 'gh', provider: 'github', secrets: secret('gh-secret') },
        { id: 'sw', provider: 'standard-webhooks', secrets: secret('whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw') },
        { id: 'adyen', provider: 'adyen', secrets: secret('DFB1EB5485895CFA84146406857104ABB4CBCABDC8AAF103A624C8F6A3EAAB00') },
        { id: 'shopify', provider: 'shopify', secrets: secret('shpss_cli') },
        { id: 'slack', provider: 'slack', secrets: secret('8f742231b10e8888abcd99yyyzzz85a5') },
        { id: 'twilio', provider: 'twilio', secrets: secret('twilio-auth-token'), options: { publicUrl: 'https://hooks.example.com/twilio' } },
        { id: 'square', provider: 'square', secrets: secret('square-key'), options: { publicUrl: 'https://hooks.example.com/square' } },
        { id: 'paddle', provider: 'paddle', secrets: secret('pdl_ntfset_cli') },
        { id: 'razorpay', provider: 'razorpay', secrets: secret('razorpay-secret') },
        { id: 'checkout', provider: 'checkout', secrets: secret('checkout-secret') },
        { id: 'gitlab', provider: 'gitlab', secrets: secret('gitlab-token') },
        { id: 'mollie', provider: 'mollie', secrets: secret('mollie-secret') },
        { id: 'mollie-classic', provider: 'mollie', options: { mode: 'classic' } },
      ],
      log: { level: 'info' },
    });
    const server = await spawnServer(file, doc);
    try {
      for (const ep of ['stripe', 'gh', 'sw', 'shopify', 'twilio', 'square', 'paddle', 'razorpay', 'checkout', 'gitlab', 'mollie', 'mollie-classic']) {
        const r = run(['send-sample', '--config', file, '--endpoint', ep, '--url', server.url]);
        expect(r.out, `${ep}: ${r.err}`).toMatch(/→ 200\n\{"inbox_id":"[0-9a-f-]{36}","duplicate":false\}/);
      }
      // Adyen answers what Adyen expects; Slack's sample is an Events API event (the usual JSON).
      expect(run(['send-sample', '--config', file, '--endpoint', 'adyen', '--url', server.url]).out).toMatch(/→ 200\n\[accepted\]/);
      expect(run(['send-sample', '--config', file, '--endpoint', 'slack', '--url', server.url]).out).toMatch(/→ 200\n\{"inbox_id":"[0-9a-f-]{36}","duplicate":false\}/);
      // The request log reaches stdout while the server runs (it once waited for 4 KiB or the exit).
      await new Promise((r) => setTimeout(r, 1000));
      const lines = server.stdout().split('\n').filter(Boolean).map((l) => JSON.parse(l) as { endpoint?: string; outcome?: string });
      expect(lines.filter((l) => l.outcome === 'accepted').map((l) => l.endpoint)).toEqual(expect.arrayContaining(['stripe', 'gh', 'adyen', 'slack']));
    } finally {
      server.child.kill('SIGTERM');
      await new Promise((r) => server.child.once('exit', r));
    }
    expect(server.stderr()).toContain('shutting down');
  });
});
