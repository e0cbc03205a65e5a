/**
 * The bench's child processes (servers, references, `work` processes): started with their output
 * in a log file under RUN_DIR, stopped with SIGTERM then SIGKILL, and all killed if the bench
 * itself stops.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { closeSync, mkdtempSync, openSync, readFileSync, rmSync } from 'node:fs';
import os from 'node:os';
import { join } from 'node:path';

/** One temp directory per bench process: logs, configs and SQLite files of its children. */
export const RUN_DIR = mkdtempSync(join(os.tmpdir(), 'wi-bench-'));
let serial = 0;

const children = new Set<ChildProcess>();
export function track(c: ChildProcess): ChildProcess {
  children.add(c);
  c.once('exit', () => children.delete(c));
  return c;
}
/** SIGKILLs every child still running (the bench's end, or its own death). */
export function killAll(): void {
  for (const c of children) if (c.pid !== undefined && c.exitCode === null && c.signalCode === null) c.kill('SIGKILL');
}
process.on('exit', killAll);
for (const sig of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) {
  process.once(sig, () => {
    console.error(`\nbench: ${sig}, stopping children`);
    killAll();
    rmSync(RUN_DIR, { recursive: true, force: true });
    process.exit(130);
  });
}

function waitExit(c: ChildProcess, ms: number): Promise<boolean> {
  if (c.exitCode !== null || c.signalCode !== null) return Promise.resolve(true);
  return new Promise((res) => {
    const t = setTimeout(() => res(false), ms);
    c.once('exit', () => {
      clearTimeout(t);
      res(true);
    });
  });
}

export async function stopChild(c: ChildProcess, graceMs = 10_000): Promise<void> {
  if (c.exitCode !== null || c.signalCode !== null) return;
  c.kill('SIGTERM');
  if (!(await waitExit(c, graceMs))) {
    c.kill('SIGKILL');
    await waitExit(c, 5000);
  }
}

export interface Running {
  readonly pid: number;
  readonly url: string;
  readonly child: ChildProcess;
  readonly logFile: string;
  stop(): Promise<void>;
}

/**
 * Starts a child and waits until its output matches `ready` (whose first group, if any, is its
 * URL). The child writes stdout and stderr straight into its log file, as a server writing its
 * logs to a file would: no pipe through this process, whose CPU would sit in the "other" column
 * (with `--log-level info` the old pipe-and-rescan read cost ~45 % of a core at 5,000 req/s).
 */
export async function launch(cmd: string[], env: NodeJS.ProcessEnv, name: string, cleanup: () => Promise<void>, ready = /listening on (http:\/\/127\.0\.0\.1:\d+)/): Promise<Running> {
  const logFile = join(RUN_DIR, `${name}-${++serial}.log`);
  const fd = openSync(logFile, 'a');
  const child = track(spawn(process.execPath, cmd, { env: { ...process.env, ...env }, stdio: ['ignore', fd, fd] }));
  closeSync(fd); // the child holds its own copy
  const url = await new Promise<string>((res, rej) => {
    const timer = setTimeout(() => done(new Error(`${name}: not ready after 30 s (log: ${logFile})`)), 30_000);
    const poll = setInterval(() => {
      const m = ready.exec(readFileSync(logFile, 'utf8'));
      if (m) done(null, m[1] ?? '');
    }, 20);
    const onExit = (code: number | null, sig: string | null) =>
      done(new Error(`${name} exited before it was ready (code ${code}, signal ${sig}):\n${readFileSync(logFile, 'utf8').slice(-2000)}`));
    child.once('exit', onExit);
    function done(err: Error | null, value = ''): void {
      clearTimeout(timer);
      clearInterval(poll);
      child.off('exit', onExit);
      if (err) rej(err);
      else res(value);
    }
  }).catch(async (err: unknown) => {
    child.kill('SIGKILL');
    await cleanup();
    throw err;
  });
  let stopping: Promise<void> | undefined;
  return {
    pid: child.pid!,
    url,
    child,
    logFile,
    stop() {
      stopping ??= (async () => {
        await stopChild(child);
        await cleanup();
      })();
      return stopping;
    },
  };
}

