/**
 * What the bench reads from /proc about other processes (process.cpuUsage only sees itself):
 * CPU = utime+stime of /proc/<pid>/stat (all threads, so the SQLite writer thread counts),
 * peak RSS = VmHWM of /proc/<pid>/status, reset per step through /proc/<pid>/clear_refs.
 */
import { createHmac } from 'node:crypto';
import { readFileSync, readdirSync, writeFileSync } from 'node:fs';
import { execFileSync } from 'node:child_process';
import os from 'node:os';

const CLK_TCK = (() => {
  try {
    return Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).trim()) || 100;
  } catch {
    return 100;
  }
})();

/**
 * The fields of a `/proc/…/stat` file after "(comm)" (a command may hold spaces and parentheses),
 * or null if the process or thread is gone. 0-based here: state is [0], minflt [7], utime [11],
 * stime [12] (fields 3, 10, 14 and 15 of proc(5)).
 */
function statAfterComm(path: string): string[] | null {
  try {
    const s = readFileSync(path, 'utf8');
    return s.slice(s.lastIndexOf(')') + 2).split(' ');
  } catch {
    return null;
  }
}

const cpuMsOf = (rest: readonly string[]): number => ((Number(rest[11]) + Number(rest[12])) * 1000) / CLK_TCK;

/**
 * A process's utime+stime in ms and its minor page faults so far (its first touches of memory,
 * among others), from one read of its stat file; null if it is gone.
 */
export function procUsage(pid: number): { cpuMs: number; minorFaults: number } | null {
  const rest = statAfterComm(`/proc/${pid}/stat`);
  return rest ? { cpuMs: cpuMsOf(rest), minorFaults: Number(rest[7]) } : null;
}

/** utime+stime of a process in ms; null if it is gone. */
export function procCpuMs(pid: number): number | null {
  return procUsage(pid)?.cpuMs ?? null;
}

function statusField(pid: number, field: string): number | null {
  try {
    const m = new RegExp(`^${field}:\\s+(\\d+) kB`, 'm').exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
    return m ? Number(m[1]) * 1024 : null;
  } catch {
    return null;
  }
}

export const rssBytes = (pid: number) => statusField(pid, 'VmRSS');
export const peakRssBytes = (pid: number) => statusField(pid, 'VmHWM');

/** Resets VmHWM to the current RSS (Linux ≥ 4.0); false if not permitted. */
export function resetPeakRss(pid: number): boolean {
  try {
    writeFileSync(`/proc/${pid}/clear_refs`, '5');
    return true;
  } catch {
    return false;
  }
}

/** Sum of CPU ms of every process whose command is `comm` (e.g. all PostgreSQL backends), or matches it. */
export function cpuOfCommand(comm: string | RegExp): Map<number, number> {
  return cpuOfCommands(comm)[0];
}

/** cpuOfCommand for several commands in one walk of /proc (a window's edge reads it once). */
export function cpuOfCommands<C extends (string | RegExp)[]>(...comms: C): { [K in keyof C]: Map<number, number> } {
  const out = comms.map(() => new Map<number, number>());
  for (const d of readdirSync('/proc')) {
    if (!/^\d+$/.test(d)) continue;
    let name: string;
    try {
      name = readFileSync(`/proc/${d}/comm`, 'utf8').trim();
    } catch {
      continue;
    }
    const i = comms.findIndex((comm) => (typeof comm === 'string' ? name === comm : comm.test(name)));
    if (i < 0) continue;
    const c = procCpuMs(Number(d));
    if (c !== null) out[i]!.set(Number(d), c);
  }
  return out as { [K in keyof C]: Map<number, number> };
}

/** CPU ms used between two cpuOfCommand snapshots (processes born in between count from 0). */
export function cpuDelta(before: Map<number, number>, after: Map<number, number>): number {
  let sum = 0;
  for (const [pid, c] of after) sum += c - (before.get(pid) ?? 0);
  return sum;
}

/** CPU time the whole machine has been busy so far, all cores, in ms (/proc/stat). */
export const machineBusyMs = (): number => (machineJiffies()[0] * 1000) / CLK_TCK;

/** Whole-machine jiffies: [busy, total], for an idle% over an interval. */
export function machineJiffies(): [number, number] {
  const line = readFileSync('/proc/stat', 'utf8').split('\n')[0]!.trim().split(/\s+/).slice(1).map(Number);
  const total = line.reduce((a, b) => a + b, 0);
  const idle = (line[3] ?? 0) + (line[4] ?? 0);
  return [total - idle, total];
}

export interface MachineInfo {
  readonly cores: number;
  readonly model: string;
  readonly ramGiB: number;
  readonly node: string;
  readonly postgres: string;
  readonly kernel: string;
  /** µs per operation, measured at the run's start (cpuSpeed). */
  readonly speed: { readonly hmacUs: number; readonly parseUs: number; readonly parseBytes: number; readonly freshPageUs: number };
  /** The kernel's own memory-access scanners (DAMON kdamonds) that are on, e.g. "1 (sampling every 500 ms)"; "none". */
  readonly damon: string;
  /** Where the SQLite files go: the filesystem type (`stat -f`), " — NOT durable …" on a RAM filesystem. */
  readonly sqliteFs: string;
}

/**
 * How fast the box is right now, in two things every request pays: HMAC-SHA256 over 10 KiB and
 * JSON.parse of a bench event (µs each; the median of 7 rounds). Boxes of the same kind have
 * measured 9-15 µs and 25-127 µs here, and every absolute result moves with them, while ratios
 * to the references move less: this line says which kind of box a run had.
 * Plus what a page fault costs (freshPageUs): on some of these VMs ~12 µs per 4 KiB page, many
 * times bare metal's, which the CPU figures above do not show.
 */
export function cpuSpeed(sampleJson: Buffer): MachineInfo['speed'] {
  const key = Buffer.alloc(32, 7);
  const body = Buffer.alloc(10 * 1024, 0x61);
  const text = sampleJson.toString('utf8');
  const median = (op: () => void, n: number): number => {
    const rounds: number[] = [];
    for (let r = 0; r < 7; r++) {
      const t = performance.now();
      for (let i = 0; i < n; i++) op();
      rounds.push(((performance.now() - t) * 1000) / n);
    }
    return rounds.sort((a, b) => a - b)[3]!;
  };
  const hmacUs = median(() => createHmac('sha256', key).update(body).digest(), 2000);
  const parseUs = median(() => JSON.parse(text), 1000);
  return { hmacUs: Math.round(hmacUs * 10) / 10, parseUs: Math.round(parseUs * 10) / 10, parseBytes: sampleJson.length, freshPageUs: freshPageUs() };
}

/**
 * µs per 4 KiB page to write memory the process has never touched, beyond writing warm memory:
 * a 40 MiB buffer is mmap-ed untouched (past glibc's largest mmap threshold, 32 MiB), so its
 * first fill takes a page fault per page and its second does not. The median of 5 buffers.
 */
function freshPageUs(): number {
  const bytes = 40 * 1024 * 1024;
  const rounds: number[] = [];
  for (let r = 0; r < 5; r++) {
    const buf = Buffer.allocUnsafeSlow(bytes);
    let t = performance.now();
    buf.fill(r + 1);
    const fresh = performance.now() - t;
    t = performance.now();
    buf.fill(r + 2);
    const warm = performance.now() - t;
    rounds.push(((fresh - warm) * 1000) / (bytes / 4096));
  }
  return Math.round(rounds.sort((a, b) => a - b)[2]! * 100) / 100;
}

/** The command names of DAMON's kernel threads (kdamond.0, …), for cpuOfCommand. */
export const KDAMOND = /^kdamond\./;

/**
 * DAMON kdamonds that are on: the kernel sampling which pages are in use, e.g. for a host that
 * reclaims a VM's idle memory. On one of these VMs its passes (every ~0.5 s, tens of ms each
 * under load) lined up with the slowest 100 ms windows of a step (bench/RESULTS.md).
 */
export function damonScanners(): string {
  const root = '/sys/kernel/mm/damon/admin/kdamonds';
  const on: string[] = [];
  try {
    for (const d of readdirSync(root)) {
      if (!/^\d+$/.test(d)) continue;
      try {
        if (readFileSync(`${root}/${d}/state`, 'utf8').trim() !== 'on') continue;
        const us = Number(readFileSync(`${root}/${d}/contexts/0/monitoring_attrs/intervals/sample_us`, 'utf8'));
        on.push(Number.isFinite(us) ? `sampling every ${Math.round(us / 1000)} ms` : 'on');
      } catch {
        on.push('on');
      }
    }
  } catch {
    return 'none';
  }
  return on.length === 0 ? 'none' : `${on.length} (${on.join('; ')})`;
}

/**
 * The type of the filesystem holding `path`, as mounted (`df --output=fstype`: "ext4", "xfs",
 * "tmpfs", …; `stat -f` can only say "ext2/ext3" for all of ext2-4, one magic number); "unknown"
 * if it cannot tell.
 */
export function fsTypeOf(path: string): string {
  try {
    const lines = execFileSync('df', ['--output=fstype', path], { encoding: 'utf8' }).trim().split('\n');
    return lines[1]?.trim() || 'unknown';
  } catch {
    return 'unknown';
  }
}

/**
 * The SQLite steps' files live under the bench's temp directory (os.tmpdir()). Where that is a
 * RAM filesystem (tmpfs: /tmp on many distributions) fsync reaches no disk, so the steps are not
 * the fsync-durable runs the targets ask for, however fast: the report must say so.
 */
export function sqliteFsLine(dir: string): string {
  const fs = fsTypeOf(dir);
  return /^(tmpfs|ramfs)$/.test(fs) ? `${fs} (${dir}) — NOT durable: fsync reaches no disk; set TMPDIR to a disk-backed directory` : `${fs} (${dir})`;
}

export function machineInfo(postgresVersion: string, sampleJson: Buffer, sqliteDir: string): MachineInfo {
  let model = os.cpus()[0]?.model ?? 'unknown';
  try {
    const m = /^model name\s*:\s*(.+)$/m.exec(readFileSync('/proc/cpuinfo', 'utf8'));
    if (m) model = m[1]!.trim();
  } catch {
    /* keep os.cpus() */
  }
  let cores = os.cpus().length;
  try {
    cores = Number(execFileSync('nproc', { encoding: 'utf8' }).trim()) || cores;
  } catch {
    /* keep */
  }
  return {
    cores,
    model,
    ramGiB: Math.round((os.totalmem() / 1024 ** 3) * 10) / 10,
    node: process.version,
    postgres: postgresVersion,
    kernel: os.release(),
    speed: cpuSpeed(sampleJson),
    damon: damonScanners(),
    sqliteFs: sqliteFsLine(sqliteDir),
  };
}

/** CPU ms per thread of a process (tid → ms); the main thread's tid is the pid. */
export function threadCpuMs(pid: number): Map<number, number> {
  const out = new Map<number, number>();
  try {
    for (const t of readdirSync(`/proc/${pid}/task`)) {
      const rest = statAfterComm(`/proc/${pid}/task/${t}/stat`);
      if (rest) out.set(Number(t), cpuMsOf(rest)); // else the thread is gone
    }
  } catch {
    /* process gone */
  }
  return out;
}

/**
 * How long a thread has waited in the run queue, runnable but not on a core (ms; the second
 * field of /proc/<pid>/task/<tid>/schedstat). Over a window it tells a busy box from a busy
 * thread: an event loop that waits for a core adds that wait to every request it holds.
 * NaN if the kernel does not keep schedstats.
 */
export function threadRunQueueWaitMs(pid: number, tid: number): number {
  try {
    return Number(readFileSync(`/proc/${pid}/task/${tid}/schedstat`, 'latin1').split(' ')[1]) / 1e6;
  } catch {
    return NaN;
  }
}

/**
 * Whole-disk write counters from /proc/diskstats, summed over the machine's disks (partitions,
 * loop and ram devices left out): sectors are 512 bytes; flushes = completed flush requests
 * (fsync/fdatasync reaching the device).
 */
export function diskWrites(): { bytes: number; writes: number; flushes: number } {
  const out = { bytes: 0, writes: 0, flushes: 0 };
  try {
    const rows = readFileSync('/proc/diskstats', 'utf8').trim().split('\n').map((l) => l.trim().split(/\s+/));
    const names = rows.map((r) => r[2]!).filter((n) => !/^(loop|ram|zram|dm-)/.test(n));
    for (const r of rows) {
      const name = r[2]!;
      if (!names.includes(name) || names.some((other) => other !== name && name.startsWith(other))) continue;
      out.writes += Number(r[7]);
      out.bytes += Number(r[9]) * 512;
      out.flushes += Number(r[18] ?? 0);
    }
  } catch {
    /* no /proc/diskstats */
  }
  return out;
}
