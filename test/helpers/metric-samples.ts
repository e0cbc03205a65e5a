import { post } from './http.js';

/** One /metrics scrape: each sample line's series (name and labels exactly as rendered) → its value. */
export type Samples = ReadonlyMap<string, number>;

/** GETs /metrics and parses every sample line (`name{labels} value`). */
export async function scrape(appUrl: string): Promise<Samples> {
  const r = await post(`${appUrl}/metrics`, '', {}, 'GET');
  if (r.status !== 200) throw new Error(`/metrics answered ${r.status}: ${r.text}`);
  const out = new Map<string, number>();
  for (const line of r.text.split('\n')) {
    if (line === '' || line.startsWith('#')) continue;
    const at = line.lastIndexOf(' ');
    const key = line.slice(0, at);
    if (out.has(key)) throw new Error(`series rendered twice: ${key}`);
    out.set(key, Number(line.slice(at + 1)));
  }
  return out;
}

/** The exact series text of a sample, labels in the order given (the order the registry renders them). */
export function series(name: string, labels: Record<string, string> = {}): string {
  const parts = Object.entries(labels).map(([k, v]) => `${k}="${v}"`);
  return parts.length ? `${name}{${parts.join(',')}}` : name;
}

/** A sample's value; a series not rendered (never incremented) reads 0. */
export function valueOf(s: Samples, key: string): number {
  return s.get(key) ?? 0;
}

/** The series of metric `name` whose value changed between two scrapes, by how much. */
export function changes(before: Samples, after: Samples, name: string): Record<string, number> {
  const out: Record<string, number> = {};
  const ofName = (k: string) => k === name || k.startsWith(`${name}{`);
  for (const k of new Set([...before.keys(), ...after.keys()])) {
    if (!ofName(k)) continue;
    const d = valueOf(after, k) - valueOf(before, k);
    if (d !== 0) out[k] = d;
  }
  return out;
}
