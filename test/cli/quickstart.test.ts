import { spawn, spawnSync } from 'node:child_process';
import { chmodSync, mkdirSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { stringify } from 'yaml';
import { describe, expect, it } from 'vitest';
import { configDoc, STRIPE_SECRET } from '../helpers/app.js';
import { CLI, runCli, spawnServer } from '../helpers/server-process.js';

/** A new user's first steps: serve --demo, the printed sample command, a rerun, the event list. */
describe('quick start', () => {
  const dir = mkdtempSync(join(tmpdir(), 'wi-quick-'));

  // The README promises "a duplicate of an accepted event gets 200 {"duplicate": true}", and a new
  // user tries it with the sample command: every run drew a new event id, so a rerun was always
  // duplicate:false and there was no way to send the same sample event again.
  it('send-sample says how to send the same event again, and that rerun is answered duplicate:true with the first row', async () => {
    const file = join(dir, 'dup.yaml');
    const server = await spawnServer(file, configDoc(`sqlite:${join(dir, 'dup.db')}`, {
      endpoints: [
        { id: 'stripe', provider: 'stripe', secrets: [{ version: 'v1', value: STRIPE_SECRET }] },
        { id: 'refunds', provider: 'stripe', secrets: [{ version: 'v1', value: STRIPE_SECRET }], events: ['charge.refunded'] },
      ],
    }));
    try {
      const first = await runCli(['send-sample', '--config', file, '--endpoint', 'stripe', '--url', server.url]);
      expect(first.out, first.err).toMatch(/→ 200\n\{"inbox_id":"[0-9a-f-]{36}","duplicate":false\}/);
      const again = /--id ([0-9a-f]{12})\b/.exec(first.err)?.[1];
      expect(again, `no rerun hint in: ${first.err}`).toBeDefined();
      const second = await runCli(['send-sample', '--config', file, '--endpoint', 'stripe', '--url', server.url, '--id', again!]);
      const inboxId = JSON.parse(first.out.split('\n')[1]!).inbox_id as string;
      expect(second.out, second.err).toContain(`→ 200\n{"inbox_id":"${inboxId}","duplicate":true}`);
      // A sample type the endpoint's events filter ignores stores nothing: no rerun hint then.
      const ignored = await runCli(['send-sample', '--config', file, '--endpoint', 'refunds', '--url', server.url]);
      expect(ignored.out).toMatch(/→ 200\n\{.*"ignored":"unsupported_event_type"\}/);
      expect(ignored.err).not.toContain('--id');
      // Something that is not such an id is a usage error, not a sample with an odd id.
      for (const bad of ['xyz', '0123456789abc', 'ABC']) {
        expect((await runCli(['send-sample', '--config', file, '--endpoint', 'stripe', '--url', server.url, '--id', bad])).code, bad).toBe(2);
      }
    } finally {
      server.child.kill('SIGTERM');
      await new Promise((done) => server.child.once('exit', done));
    }
  });

  // "npm start prints ... a ready-to-run command": with the config in a folder whose name has a
  // space (a home folder "My Projects"), the printed command split the path and failed to run.
  it('serve --demo prints a sample command that a shell runs as printed, whatever the config path holds', async () => {
    const sub = join(dir, "my project's configs");
    mkdirSync(sub);
    const file = join(sub, 'demo config.yaml');
    const server = await spawnServer(file, configDoc(`sqlite:${join(dir, 'space.db')}`), {}, ['--demo']);
    try {
      const printed = /npx webhook-inbox (send-sample .*)/.exec(server.stderr())?.[1];
      expect(printed).toBeDefined();
      const r = spawnSync('/bin/sh', ['-c', `"$0" "$1" ${printed!}`, process.execPath, CLI], { encoding: 'utf8', timeout: 30_000 });
      expect(r.stdout, r.stderr).toMatch(/→ 200\n\{"inbox_id":"[0-9a-f-]{36}","duplicate":false\}/);
    } finally {
      server.child.kill('SIGTERM');
      await new Promise((done) => server.child.once('exit', done));
    }
  });

  // A first run where ./data cannot be written (a checkout owned by another user, a read-only
  // mount): the one line said "unable to open database file", which names neither the cause nor
  // what to change.
  it('a database folder this user cannot write to is named as such, not "unable to open database file"', () => {
    const ro = join(dir, 'readonly');
    mkdirSync(ro);
    const file = join(dir, 'ro.yaml');
    writeFileSync(file, stringify(configDoc(`sqlite:${join(ro, 'inbox.db')}`)));
    // As root a mode does not stop us: run the CLI as nobody there, else make the folder read-only.
    const asRoot = process.getuid?.() === 0;
    if (asRoot) chmodSync(dir, 0o755);
    else chmodSync(ro, 0o555);
    try {
      const r = spawnSync(process.execPath, [CLI, 'migrate', '--config', file], { encoding: 'utf8', timeout: 30_000, ...(asRoot ? { uid: 65534, gid: 65534 } : {}) });
      expect(r.status, r.stderr).toBe(1);
      expect(r.stderr).toContain(`the folder ${ro} is not writable by this user`);
    } finally {
      chmodSync(ro, 0o755);
    }
  });

  // docs/providers/gitlab.md's legacy endpoint (mode: token): nothing time-related is signed, yet
  // check-config summed it up as "tolerance 300", as if replays outside 5 minutes were refused, and
  // took a toleranceSeconds there that nothing checks (Shopify, Square: a config error).
  it('check-config on a GitLab token-mode endpoint says no timestamp is signed, and refuses a toleranceSeconds there', async () => {
    const endpoint = { id: 'gitlab-legacy', provider: 'gitlab', options: { mode: 'token' }, secrets: [{ version: 't1', value: 'plain-token' }] };
    const file = join(dir, 'gitlab-token.yaml');
    writeFileSync(file, stringify(configDoc(`sqlite:${join(dir, 'gl.db')}`, { endpoints: [endpoint] })));
    const ok = await runCli(['check-config', '--config', file]);
    expect(ok.code, ok.err).toBe(0);
    expect(ok.out).toContain('gitlab-legacy: gitlab, 1 secret version(s), tolerance none signed,');
    writeFileSync(file, stringify(configDoc(`sqlite:${join(dir, 'gl.db')}`, { endpoints: [{ ...endpoint, toleranceSeconds: 60 }] })));
    const bad = await runCli(['check-config', '--config', file]);
    expect(bad.code).toBe(78);
    expect(bad.err).toContain('endpoints[0].toleranceSeconds: provider "gitlab" signs no timestamp');
  });

  // The README's config with one variable not exported: the banner listed the endpoint like any
  // other, and the only word of it was a JSON log line on the other stream, above the migrations:
  // the user's first request got 503 with nothing on screen saying which endpoint was down.
  it('serve names, in its endpoint list, an endpoint whose secret is not loaded (it answers 503)', async () => {
    const file = join(dir, 'missing.yaml');
    const server = await spawnServer(file, configDoc(`sqlite:${join(dir, 'missing.db')}`, {
      endpoints: [
        { id: 'stripe', provider: 'stripe', secrets: [{ version: 'v1', value: STRIPE_SECRET }] },
        { id: 'github', provider: 'github', secrets: [{ version: 'v1', value: '${env:WI_QUICK_UNSET_SECRET}' }] },
      ],
    }));
    try {
      const banner = server.stderr();
      expect(banner).toMatch(/POST \S+\/webhooks\/stripe +\(stripe\)\n/);
      expect(banner).toMatch(/POST \S+\/webhooks\/github +\(github\) +offline: 503 secrets_unavailable until endpoints\[1\]\.secrets\[0\]\.value loads/);
    } finally {
      server.child.kill('SIGTERM');
      await new Promise((done) => server.child.once('exit', done));
    }
  });

  // --config pointing at an empty file (a config not saved yet, a wrong copy) said
  // "(root): must be an object", naming neither the file nor that it is empty.
  it('an empty config file (or only comments) is named as such', async () => {
    for (const [name, text] of [['empty.yaml', ''], ['comments.yaml', '# listen: { port: 8080 }\n'], ['empty.json', '']] as const) {
      const file = join(dir, name);
      writeFileSync(file, text);
      const r = await runCli(['check-config', '--config', file]);
      expect(r.code, name).toBe(78);
      expect(r.err, name).toContain(`config error: ${file}: is empty`);
    }
  });

  // The first thing a bug report asks for: "webhook-inbox --version" was "unknown command" (exit 2).
  it('--version prints the package version', async () => {
    const { version } = JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { version: string };
    for (const arg of ['--version', '-V', 'version']) {
      const r = await runCli([arg]);
      expect([r.code, r.out], arg).toEqual([0, `${version}\n`]);
    }
    expect((await runCli(['--help'])).out).toContain('--version');
  });

  // "webhook-inbox work --config FILE" with --handlers forgotten, on a config without routes: it
  // started, claimed every due event and ended each FAILED unsupported_type without a word (serve
  // warns in that case), and `requeue` does not take that reason back: one `retry` per event.
  it('work with no handler and no route says, before it runs, that every event it claims will fail', async () => {
    const file = join(dir, 'work-nothing.yaml');
    writeFileSync(file, stringify(configDoc(`sqlite:${join(dir, 'work-nothing.db')}`)));
    const child = spawn(process.execPath, [CLI, 'work', '--config', file], { stdio: ['ignore', 'ignore', 'pipe'] });
    let err = '';
    child.stderr!.on('data', (d: Buffer) => {
      err += d.toString();
    });
    try {
      for (let i = 0; i < 300 && !err.includes('workers running') && child.exitCode === null; i++) await new Promise((r) => setTimeout(r, 50));
      expect(err).toContain('webhook-inbox work: warning: no handler and no route');
      expect(err.indexOf('warning'), 'said after the workers had started').toBeLessThan(err.indexOf('workers running'));
      // Its start line names the database, as serve's does (it said only "sqlite").
      expect(err).toContain(`workers running (sqlite ${join(dir, 'work-nothing.db')}, owner`);
    } finally {
      child.kill('SIGTERM');
      await new Promise((done) => (child.exitCode === null ? child.once('exit', done) : done(undefined)));
    }
  });

  // npm start with DATABASE_URL set in the shell (a backend team's usual setup) does not use the
  // demo's SQLite file but that database, and creates its tables there: the banner said only
  // "(postgres, …)" or "(sqlite, …)", not which database nor that DATABASE_URL chose it.
  it('serve names the database it uses (never its credentials) and says when DATABASE_URL chose it', async () => {
    const fromConfig = join(dir, 'named.db');
    const a = await spawnServer(join(dir, 'named.yaml'), configDoc(`sqlite:${fromConfig}`));
    a.child.kill('SIGTERM');
    await new Promise((done) => a.child.once('exit', done));
    expect(a.stderr()).toContain(`(sqlite ${fromConfig}, workers on`);
    const fromEnv = join(dir, 'from-env.db');
    const b = await spawnServer(join(dir, 'named.yaml'), configDoc(`sqlite:${fromConfig}`), { DATABASE_URL: `sqlite:${fromEnv}?txTimeoutMs=20000` });
    b.child.kill('SIGTERM');
    await new Promise((done) => b.child.once('exit', done));
    expect(b.stderr()).toContain(`(sqlite ${fromEnv} from DATABASE_URL, workers on`);
  });
});
