// The bench's in-process handler (`--handlers bench/noop-handlers.mjs`): takes every event and
// does nothing, so bench/engine.ts measures the engine's own cost per event.
export default (inbox) => inbox.on('*', () => {});
