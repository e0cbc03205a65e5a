/**
 * Summarises V8 .cpuprofile files (from `node --cpu-prof`): self time per function and per
 * coarse category (HTTP parser/sockets, crypto, JSON, logging, GC, SQLite/pg, …).
 * Usable alone: `node --import tsx bench/profile-summary.ts DIR_OR_FILE…`
 */
import { readFileSync, readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';

interface CpuNode {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number };
  hitCount?: number;
  children?: number[];
}
interface CpuProfile {
  nodes: CpuNode[];
  startTime: number;
  endTime: number;
  samples?: number[];
  timeDeltas?: number[];
}

export interface ProfileSummary {
  readonly file: string;
  readonly totalMs: number;
  readonly idleMs: number;
  readonly top: { name: string; selfMs: number; pct: number }[];
  readonly categories: { name: string; selfMs: number; pct: number }[];
}

function shortUrl(url: string): string {
  if (!url) return '';
  const nm = url.lastIndexOf('node_modules/');
  if (nm >= 0) return url.slice(nm + 'node_modules/'.length);
  const d = url.indexOf('/dist/');
  if (d >= 0) return url.slice(d + 1);
  return url.replace(/^file:\/\//, '');
}

function category(fn: string, url: string): string {
  if (fn === '(idle)') return 'idle';
  if (fn === '(garbage collector)') return 'GC';
  if (fn === '(program)') return 'program (native, unattributed)';
  if (url.includes('pino') || url.includes('sonic-boom')) return 'logging (pino)';
  if (url.includes('/pg') || url.includes('pg-protocol') || url.includes('pg-pool')) return 'pg driver';
  if (url.includes('better-sqlite3') || url.includes('/store/sqlite/')) return 'SQLite';
  if (url.includes('/crypto/') || url.startsWith('node:crypto') || url.includes('internal/crypto') || /Hmac|Hash|Cipher|digest|update|final|timingSafeEqual|randomFill/.test(fn) && url.startsWith('node:')) return 'crypto';
  if (fn === 'parse' && url === '') return 'JSON.parse';
  if (url.includes('_http_') || url.includes('internal/http') || url.includes('/http/') || fn === 'parserOnHeadersComplete' || fn === 'parserOnBody' || fn === 'parserOnMessageComplete') return 'HTTP (node:http + ingress)';
  if (url.includes('internal/streams') || url.includes('net') || url.includes('stream_base') || fn === 'writev' || fn === 'writeUtf8String' || fn === 'writeBuffer') return 'streams/sockets';
  if (url.includes('internal/worker') || fn === 'postMessage' || url.includes('internal/per_context/messageport')) return 'worker messaging';
  if (url.includes('/dist/')) return 'webhook-inbox (other)';
  if (url === '') return `native: ${fn || '(anonymous)'}`;
  return 'other JS';
}

export function summarizeProfile(file: string, topN = 20): ProfileSummary {
  const p = JSON.parse(readFileSync(file, 'utf8')) as CpuProfile;
  const byId = new Map(p.nodes.map((n) => [n.id, n]));
  const self = new Map<number, number>();
  if (p.samples && p.timeDeltas) {
    // Each sample's time is the delta to the NEXT sample.
    for (let i = 0; i < p.samples.length; i++) {
      const dt = p.timeDeltas[i + 1] ?? 0;
      self.set(p.samples[i]!, (self.get(p.samples[i]!) ?? 0) + dt / 1000);
    }
  } else {
    const interval = (p.endTime - p.startTime) / 1000 / Math.max(1, p.nodes.reduce((a, n) => a + (n.hitCount ?? 0), 0));
    for (const n of p.nodes) self.set(n.id, (n.hitCount ?? 0) * interval);
  }
  const fns = new Map<string, number>();
  const cats = new Map<string, number>();
  let total = 0;
  let idle = 0;
  for (const [id, ms] of self) {
    const n = byId.get(id);
    if (!n) continue;
    const { functionName, url, lineNumber } = n.callFrame;
    total += ms;
    if (functionName === '(idle)') {
      idle += ms;
      continue;
    }
    const key = `${functionName || '(anonymous)'} ${shortUrl(url)}${url ? `:${lineNumber + 1}` : ''}`;
    fns.set(key, (fns.get(key) ?? 0) + ms);
    const c = category(functionName, url);
    cats.set(c, (cats.get(c) ?? 0) + ms);
  }
  const busy = total - idle;
  const rank = (m: Map<string, number>, n: number) =>
    [...m].sort((a, b) => b[1] - a[1]).slice(0, n).map(([name, selfMs]) => ({ name, selfMs, pct: busy > 0 ? (100 * selfMs) / busy : 0 }));
  return { file, totalMs: total, idleMs: idle, top: rank(fns, topN), categories: rank(cats, 12) };
}

export function formatSummary(s: ProfileSummary): string {
  const lines = [`profile ${s.file}: ${(s.totalMs / 1000).toFixed(1)} s sampled, busy ${((s.totalMs - s.idleMs) / 1000).toFixed(1)} s`];
  lines.push('  by category (% of busy):');
  for (const c of s.categories) lines.push(`    ${c.pct.toFixed(1).padStart(5)}%  ${c.name}`);
  lines.push('  top functions by self time (% of busy):');
  for (const t of s.top) lines.push(`    ${t.pct.toFixed(1).padStart(5)}%  ${t.name}`);
  return lines.join('\n');
}

export function profileFiles(dirOrFile: string): string[] {
  if (statSync(dirOrFile).isFile()) return [dirOrFile];
  return readdirSync(dirOrFile).filter((f) => f.endsWith('.cpuprofile')).sort().map((f) => join(dirOrFile, f));
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  for (const arg of process.argv.slice(2)) for (const f of profileFiles(arg)) console.log(formatSummary(summarizeProfile(f)));
}
