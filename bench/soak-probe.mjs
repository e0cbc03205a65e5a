// Loaded into the soak's server with `node --import bench/soak-probe.mjs dist/cli/main.js serve …`
// (bench/soak.ts; `--no-probe` leaves it out). Not product code: every SOAK_PROBE_MS (2 s) the
// main thread appends one JSON line to SOAK_PROBE_FILE with what /proc cannot show — the V8 heap
// (process.memoryUsage) and the live libuv handles and requests by type
// (process.getActiveResourcesInfo: timers as "Timeout", sockets as "TCPSocketWrap", …). Its own
// interval is one of the "Timeout"s, a constant. Worker threads are left alone.
import { appendFileSync } from 'node:fs';
import { isMainThread } from 'node:worker_threads';

const file = process.env.SOAK_PROBE_FILE;
if (file && isMainThread) {
  const tick = () => {
    const m = process.memoryUsage();
    const resources = {};
    for (const r of process.getActiveResourcesInfo()) resources[r] = (resources[r] ?? 0) + 1;
    appendFileSync(file, JSON.stringify({ t: Date.now(), heapUsed: m.heapUsed, heapTotal: m.heapTotal, external: m.external, arrayBuffers: m.arrayBuffers, resources }) + '\n');
  };
  setInterval(tick, Number(process.env.SOAK_PROBE_MS ?? 2000)).unref();
}
