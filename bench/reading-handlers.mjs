// `npm run bench -- --handlers-read`: like noop-handlers.mjs, but every event's body is read,
// decrypted and parsed (the handler touches `event.payload`), as most real handlers do.
export default (inbox) => inbox.on('*', (event) => void event.payload);
