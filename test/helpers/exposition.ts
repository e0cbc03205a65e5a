/**
 * A strict reader of the Prometheus text exposition format (version 0.0.4), as a scraper reads
 * it: every line must parse, each family has one HELP and one TYPE before its samples, its
 * samples are contiguous, label values use only the three escapes the format has, counters end
 * in _total, histograms have cumulative buckets ending in le="+Inf" equal to _count. Used for
 * serve's /metrics (test/http/metrics-exposition.test.ts) and work's (test/cli/work-metrics.test.ts).
 */
export interface Sample { readonly name: string; readonly labels: Record<string, string>; readonly value: number }
export interface Family { readonly name: string; help?: string; type?: string; readonly samples: Sample[] }

const METRIC_NAME = /^[a-zA-Z_:][a-zA-Z0-9_:]*$/;
const LABEL_NAME = /^[a-zA-Z_][a-zA-Z0-9_]*$/;
const FLOAT = /^(?:[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?|[+-]Inf|NaN)$/;

function parseFloatStrict(text: string, line: string): number {
  if (!FLOAT.test(text)) throw new Error(`not a Prometheus float: ${JSON.stringify(text)} in ${JSON.stringify(line)}`);
  return text === '+Inf' ? Infinity : text === '-Inf' ? -Infinity : Number(text);
}

/** `{a="x",b="y"}` starting at text[i] === '{'; returns the labels and the index after '}'. */
function parseLabels(text: string, start: number, line: string): { labels: Record<string, string>; end: number } {
  const labels: Record<string, string> = {};
  let i = start + 1;
  const fail = (why: string) => { throw new Error(`${why} at ${i} in ${JSON.stringify(line)}`); };
  for (;;) {
    if (text[i] === '}') return { labels, end: i + 1 };
    const eq = text.indexOf('=', i);
    if (eq < 0) fail('label without =');
    const name = text.slice(i, eq);
    if (!LABEL_NAME.test(name)) fail(`bad label name ${JSON.stringify(name)}`);
    if (Object.hasOwn(labels, name)) fail(`label ${name} repeated`);
    i = eq + 1;
    if (text[i] !== '"') fail('label value not quoted');
    i++;
    let value = '';
    for (;;) {
      const c = text[i];
      if (c === undefined) fail('unterminated label value');
      if (c === '"') break;
      if (c === '\\') {
        const n = text[i + 1];
        if (n === '\\') value += '\\';
        else if (n === '"') value += '"';
        else if (n === 'n') value += '\n';
        else fail(`invalid escape \\${n}`);
        i += 2;
        continue;
      }
      value += c;
      i++;
    }
    labels[name] = value;
    i++;
    if (text[i] === ',') i++;
    else if (text[i] !== '}') fail('expected , or }');
  }
}

function familyOf(sampleName: string, families: Map<string, Family>): Family | undefined {
  if (families.has(sampleName)) return families.get(sampleName);
  for (const suffix of ['_bucket', '_sum', '_count']) {
    if (sampleName.endsWith(suffix)) {
      const f = families.get(sampleName.slice(0, -suffix.length));
      if (f?.type === 'histogram' || f?.type === 'summary') return f;
    }
  }
  return undefined;
}

export function parseExposition(text: string): Map<string, Family> {
  if (!text.endsWith('\n')) throw new Error('exposition does not end with a newline');
  const families = new Map<string, Family>();
  const finished = new Set<string>();
  let current: Family | undefined;
  const seen = new Set<string>();
  for (const line of text.slice(0, -1).split('\n')) {
    if (line === '') throw new Error('empty line in exposition');
    if (line.startsWith('#')) {
      const m = /^# (HELP|TYPE) (\S+)(?: (.*))?$/.exec(line);
      if (!m) continue; // a plain comment
      const [, kind, name, rest = ''] = m;
      if (!METRIC_NAME.test(name!)) throw new Error(`bad metric name in ${JSON.stringify(line)}`);
      if (finished.has(name!)) throw new Error(`family ${name} continued after another family: ${JSON.stringify(line)}`);
      let f = families.get(name!);
      if (!f) families.set(name!, (f = { name: name!, samples: [] }));
      if (current && current !== f) finished.add(current.name);
      current = f;
      if (kind === 'HELP') {
        if (f.help !== undefined) throw new Error(`HELP twice for ${name}`);
        if (/\\(?![\\n])/.test(rest)) throw new Error(`invalid escape in HELP of ${name}`);
        f.help = rest;
      } else {
        if (f.type !== undefined) throw new Error(`TYPE twice for ${name}`);
        if (f.samples.length) throw new Error(`TYPE after samples for ${name}`);
        if (!['counter', 'gauge', 'histogram', 'summary', 'untyped'].includes(rest)) throw new Error(`bad TYPE ${rest} for ${name}`);
        f.type = rest;
      }
      continue;
    }
    const nameEnd = /^[a-zA-Z_:][a-zA-Z0-9_:]*/.exec(line)?.[0];
    if (!nameEnd) throw new Error(`bad sample line ${JSON.stringify(line)}`);
    let i = nameEnd.length;
    let labels: Record<string, string> = {};
    if (line[i] === '{') ({ labels, end: i } = parseLabels(line, i, line));
    if (line[i] !== ' ') throw new Error(`expected a space before the value in ${JSON.stringify(line)}`);
    const parts = line.slice(i + 1).split(' ');
    if (parts.length > 2 || (parts.length === 2 && !/^-?\d+$/.test(parts[1]!))) throw new Error(`bad value/timestamp in ${JSON.stringify(line)}`);
    const value = parseFloatStrict(parts[0]!, line);
    const f = familyOf(nameEnd, families);
    if (!f || f.type === undefined) throw new Error(`sample without a TYPE: ${JSON.stringify(line)}`);
    if (f !== current) throw new Error(`samples of ${f.name} not contiguous: ${JSON.stringify(line)}`);
    const key = `${nameEnd}${JSON.stringify(Object.entries(labels).sort())}`;
    if (seen.has(key)) throw new Error(`series twice: ${JSON.stringify(line)}`);
    seen.add(key);
    f.samples.push({ name: nameEnd, labels, value });
  }
  for (const f of families.values()) {
    if (f.type === undefined || f.help === undefined) throw new Error(`family ${f.name} lacks HELP or TYPE`);
    if (f.type === 'counter') {
      if (!f.name.endsWith('_total')) throw new Error(`counter ${f.name} does not end in _total`);
      for (const s of f.samples) {
        if (s.name !== f.name) throw new Error(`counter sample ${s.name} of ${f.name}`);
        if (!(s.value >= 0)) throw new Error(`counter ${f.name} negative or NaN: ${s.value}`);
      }
    }
    if (f.type === 'histogram') checkHistogram(f);
  }
  return families;
}

function checkHistogram(f: Family): void {
  const groups = new Map<string, { buckets: [number, number][]; sum?: number; count?: number }>();
  for (const s of f.samples) {
    const { le, ...rest } = s.labels;
    const key = JSON.stringify(Object.entries(rest).sort());
    let g = groups.get(key);
    if (!g) groups.set(key, (g = { buckets: [] }));
    if (s.name === `${f.name}_bucket`) {
      if (le === undefined) throw new Error(`${f.name}_bucket without le`);
      g.buckets.push([parseFloatStrict(le, `le of ${f.name}`), s.value]);
    } else if (s.name === `${f.name}_sum`) {
      if (le !== undefined) throw new Error(`${f.name}_sum with le`);
      g.sum = s.value;
    } else if (s.name === `${f.name}_count`) {
      if (le !== undefined) throw new Error(`${f.name}_count with le`);
      g.count = s.value;
    } else throw new Error(`histogram ${f.name} has sample ${s.name}`);
  }
  for (const [key, g] of groups) {
    if (g.sum === undefined || g.count === undefined) throw new Error(`histogram ${f.name}${key} lacks _sum or _count`);
    if (!Number.isFinite(g.sum)) throw new Error(`histogram ${f.name}${key} _sum is ${g.sum}`);
    const last = g.buckets[g.buckets.length - 1];
    if (!last || last[0] !== Infinity) throw new Error(`histogram ${f.name}${key} does not end with le="+Inf"`);
    for (let i = 1; i < g.buckets.length; i++) {
      if (!(g.buckets[i]![0] > g.buckets[i - 1]![0])) throw new Error(`histogram ${f.name}${key}: le not increasing`);
      if (g.buckets[i]![1] < g.buckets[i - 1]![1]) throw new Error(`histogram ${f.name}${key}: buckets not cumulative`);
    }
    if (last[1] !== g.count) throw new Error(`histogram ${f.name}${key}: +Inf bucket ${last[1]} != _count ${g.count}`);
  }
}

/** The one Content-Type of the text format 0.0.4 (a scraper picks its parser by it). */
export const EXPOSITION_CONTENT_TYPE = 'text/plain; version=0.0.4; charset=utf-8';
