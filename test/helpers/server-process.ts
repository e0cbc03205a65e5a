import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { existsSync, writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { stringify } from 'yaml';

export const CLI = fileURLToPath(new URL('../../dist/cli/main.js', import.meta.url));

/** The shipped CLI (dist/) as a separate process — `npm test` builds it before the tests run. */
export function assertBuilt(): void {
  if (!existsSync(CLI)) throw new Error(`${CLI} is missing: run "npm test" (it builds first) or "npm run build"`);
}

/** The shipped CLI (dist/), as an operator runs it (with `env` added), without blocking the test's event loop: exit code, stdout, stderr. */
export function runCli(args: string[], timeoutMs = 30_000, env: NodeJS.ProcessEnv = {}): Promise<{ code: number | null; out: string; err: string }> {
  assertBuilt();
  return new Promise((resolve) => {
    execFile(process.execPath, [CLI, ...args], { env: { ...process.env, ...env }, encoding: 'utf8', timeout: timeoutMs }, (error, out, err) => {
      resolve({ code: error ? (typeof error.code === 'number' ? error.code : null) : 0, out, err });
    });
  });
}

export interface ServerProcess {
  readonly child: ChildProcess;
  readonly url: string;
  stderr(): string;
  /** What it has written to stdout so far (its JSON log lines). */
  stdout(): string;
}

/** Starts `webhook-inbox serve` with a config document (and more `args`) and waits until it listens. */
export async function spawnServer(configFile: string, doc: Record<string, unknown>, env: NodeJS.ProcessEnv = {}, args: string[] = []): Promise<ServerProcess> {
  assertBuilt();
  writeFileSync(configFile, stringify(doc));
  const child = spawn(process.execPath, [CLI, 'serve', '--config', configFile, ...args], {
    env: { ...process.env, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let err = '';
  let out = ''; // always read: a full pipe would block the server's writes
  child.stdout!.on('data', (d: Buffer) => {
    out += d.toString();
  });
  const url = await new Promise<string>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`server did not start:\n${err}`)), 15_000);
    child.stderr!.on('data', (d: Buffer) => {
      err += d.toString();
      const m = /listening on (http:\/\/[^\s]+)/.exec(err);
      if (m) {
        clearTimeout(timer);
        resolve(m[1]!);
      }
    });
    child.once('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`server exited with ${code}:\n${err}`));
    });
  });
  return { child, url, stderr: () => err, stdout: () => out };
}

/** Starts `webhook-inbox work` (workers only) and waits until its workers run. */
export async function spawnWork(configFile: string, doc: Record<string, unknown>, handlersModule: string, env: NodeJS.ProcessEnv = {}): Promise<ServerProcess> {
  assertBuilt();
  writeFileSync(configFile, stringify(doc));
  const child = spawn(process.execPath, [CLI, 'work', '--config', configFile, '--handlers', handlersModule], {
    env: { ...process.env, ...env },
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  let err = '';
  await new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`workers did not start:\n${err}`)), 15_000);
    child.stderr!.on('data', (d: Buffer) => {
      err += d.toString();
      if (err.includes('workers running')) {
        clearTimeout(timer);
        resolve();
      }
    });
    child.once('exit', (code, signal) => {
      clearTimeout(timer);
      // A failpoint may kill it before the banner is read; that is still a start.
      if (signal === 'SIGKILL') resolve();
      else reject(new Error(`workers exited with ${code}:\n${err}`));
    });
  });
  return { child, url: '', stderr: () => err, stdout: () => '' };
}

/** Resolves with the signal (or exit code) when the process ends. */
export function exited(p: ServerProcess): Promise<string> {
  if (p.child.exitCode !== null || p.child.signalCode !== null) return Promise.resolve(String(p.child.signalCode ?? p.child.exitCode));
  return new Promise((resolve) => p.child.once('exit', (code, signal) => resolve(String(signal ?? code))));
}
