// Demo handlers for `npm start`: every event of the demo endpoints is "processed" by logging
// one line (no body). Real handlers write their business change through ctx.tx in the same
// transaction that marks the event PROCESSED — see README "Processing events".
export default (inbox) => {
  inbox.on('*', (event) => {
    console.error(`processed ${event.provider} ${event.type} ${event.providerEventId} (inbox ${event.inboxId}, attempt ${event.attempt})`);
  }, { name: 'demo-log', version: '1' });
};
