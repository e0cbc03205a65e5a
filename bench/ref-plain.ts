/**
 * Reference 1 — the ceiling of HTTP + load generator on this machine: a plain node:http server
 * that reads the whole body, discards it, and answers 200. No verification, no storage.
 */
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';

const reply = '{"received":true}';
const server = createServer((req, res) => {
  req.on('data', () => undefined);
  req.on('end', () => {
    res.writeHead(200, { 'content-type': 'application/json', 'content-length': reply.length });
    res.end(reply);
  });
});
server.keepAliveTimeout = 65_000;
server.listen(0, '127.0.0.1', () => {
  console.log(`listening on http://127.0.0.1:${(server.address() as AddressInfo).port}`);
});
process.on('SIGTERM', () => server.close(() => process.exit(0)));
