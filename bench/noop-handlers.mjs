// The bench's in-process handler (`--handlers bench/noop-handlers.mjs`): takes every event and
// does nothing, so bench/engine.ts measures the engine's own cost per event. It reads no body, and
// says so (`readsPayload: false`), so the worker does not read or decrypt the stored payloads;
// `--handlers-read` (bench/reading-handlers.mjs) measures a handler that parses every body.
export default (inbox) => inbox.on('*', () => {}, { readsPayload: false });
