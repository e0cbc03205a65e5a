import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Logger } from 'pino';

/**
 * Listens on host:port and resolves with the server's `http://host:port` (rejects with the
 * listen's own error: a port in use, an address not here). Once listening, the server's errors
 * are those of accepting connections (EMFILE: out of file descriptors): the server goes on, and
 * the operator must hear of it, so each is logged with `errorMessage`. Left to the listen's
 * one-off listener they were swallowed; with none at all, one would end the process.
 */
export async function listenOn(server: Server, port: number, host: string, log: Logger, errorMessage: string): Promise<string> {
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => {
      server.off('error', reject);
      resolve();
    });
  });
  server.on('error', (err) => log.error({ err }, errorMessage));
  const addr = server.address() as AddressInfo;
  return `http://${addr.family === 'IPv6' ? `[${addr.address}]` : addr.address}:${addr.port}`;
}
