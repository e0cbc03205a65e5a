/** Number formats, markdown tables and the /metrics reader shared by the bench's reports (run.ts, engine.ts, soak.ts). */

export const f0 = (n: number) => (Number.isFinite(n) ? Math.round(n).toLocaleString('en-US') : '–');
export const f1 = (n: number) => (Number.isFinite(n) ? n.toFixed(1) : '–');
export const ms = (n: number) => (!Number.isFinite(n) ? '–' : n < 10 ? n.toFixed(2) : n < 100 ? n.toFixed(1) : Math.round(n).toLocaleString('en-US'));

export function table(head: string[], rows: string[][]): string {
  const w = head.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? '').length)));
  const line = (cells: string[]) => `| ${cells.map((c, i) => (i === 0 ? c.padEnd(w[i]!) : c.padStart(w[i]!))).join(' | ')} |`;
  return [line(head), `|${w.map((n, i) => (i === 0 ? ':' : '') + '-'.repeat(n + 1) + (i === 0 ? '' : ':')).join('|')}|`, ...rows.map(line)].join('\n');
}

/**
 * One scrape of a server's /metrics: a reader of unlabelled series by name (a pattern: escape
 * `{` for a labelled one, e.g. `webhook_event_loop_delay_seconds\{stat="p99"\}`). NaN when absent.
 */
export async function readMetrics(url: string): Promise<(name: string) => number> {
  const text = await (await fetch(`${url}/metrics`)).text();
  return (name) => Number(new RegExp(`^${name} (\\S+)$`, 'm').exec(text)?.[1] ?? NaN);
}
