/**
 * The load generator as a child process of its own (bench/loadgen.ts): its build, and one run of
 * it. Shared by the ladder (run.ts), the engine scenarios and bench/reseal-under-load.ts.
 */
import { fork } from 'node:child_process';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import ts from 'typescript';
import { track } from './children.js';
import type { FloodSpec, LoadMessage, LoadResult, RateSpec } from './loadgen.js';

export const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '..');
export const BUILD = join(ROOT, 'dist-bench', 'bench');

/** The children run as plain JavaScript (no tsx loader thread in their CPU/RSS): transpile bench/*.ts. */
export function buildChildren(): void {
  mkdirSync(BUILD, { recursive: true });
  for (const f of ['events', 'h1-client', 'rank', 'loadgen', 'soak-load', 'ref-plain', 'ref-express']) {
    const src = readFileSync(join(ROOT, 'bench', `${f}.ts`), 'utf8');
    const out = ts.transpileModule(src, {
      compilerOptions: { module: ts.ModuleKind.ES2022, target: ts.ScriptTarget.ES2022, sourceMap: false },
      fileName: `${f}.ts`,
    });
    writeFileSync(join(BUILD, `${f}.js`), out.outputText);
  }
  // dist-bench/ is under the repo root, whose package.json says "type": "module".
}

/** Forks the load generator on `spec`; `on` is called once it is forked (with its pid) and at the edges of its measured window. Resolves with its result. */
export function runLoad<R extends LoadResult>(spec: RateSpec | FloodSpec, on: { loadStarts?(loadgenPid: number): void; windowStart(): void; windowEnd(): void }): Promise<R> {
  const lg = track(fork(join(BUILD, 'loadgen.js'), [JSON.stringify(spec)], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'], execArgv: [] }));
  on.loadStarts?.(lg.pid!);
  return new Promise<R>((res, rej) => {
    let got: R | undefined;
    lg.on('message', (m: LoadMessage) => {
      if (m.type === 'window-start') on.windowStart();
      else if (m.type === 'window-end') on.windowEnd();
      else if (m.type === 'result') got = m.result as R;
      else if (m.type === 'error') rej(new Error(`loadgen: ${m.message}`));
    });
    lg.once('exit', (code) => (got ? res(got) : rej(new Error(`loadgen exited with code ${code} without a result`))));
  });
}
