import { randomBytes } from 'node:crypto';
import { loadConfigFile } from '../config/load.js';
import { ConfigError } from '../errors.js';
import { UsageError } from './usage-error.js';
import { resolveSecret } from '../config/secrets.js';
import { isRetired } from '../crypto/hmac.js';

/** Signs the adapter's sample event with the endpoint's first secret not yet retired and POSTs it. */
export async function runSendSample(configFile: string, endpointId: string, baseUrl?: string): Promise<number> {
  const config = loadConfigFile(configFile);
  const ep = config.endpoints.find((e) => e.id === endpointId);
  if (!ep) throw new UsageError(`no endpoint "${endpointId}" in ${configFile} (have: ${config.endpoints.map((e) => e.id).join(', ')})`);
  // An unsigned endpoint (Mollie classic) has no secret: its sample goes out as is.
  const now = Date.now();
  const version = ep.secrets.find((s) => !isRetired(s, now));
  if (ep.secrets.length > 0 && !version) throw new ConfigError(`endpoints[${config.endpoints.indexOf(ep)}].secrets`, 'every version is retired: nothing could sign a sample the endpoint accepts');
  const host = config.listen.host.includes(':') ? `[${config.listen.host}]` : config.listen.host; // IPv6
  const url = webhookUrl(baseUrl ?? `http://${host}:${config.listen.port}`, ep.id);
  const secret = version ? resolveSecret(version.ref) : '';
  const sample = ep.adapter.sample(randomBytes(6).toString('hex'));
  const body = ep.adapter.signBody ? ep.adapter.signBody(sample.body, secret) : sample.body;
  const headers = { ...sample.headers, ...ep.adapter.sign(body, secret, sample.signOptions) };
  let res: Response;
  try {
    res = await fetch(url, { method: 'POST', headers, body });
  } catch (err) {
    const cause = (err as { cause?: { code?: string; message?: string } }).cause;
    console.error(`POST ${url} failed: ${cause?.code ?? cause?.message ?? (err as Error).message} (is the server running there?)`);
    return 1;
  }
  console.log(`POST ${url} → ${res.status}\n${await res.text()}`);
  return res.ok ? 0 : 1;
}

/**
 * BASE/webhooks/ID, BASE's own path kept (a proxy's prefix) and its query too: a trailing "/" (as
 * copied from a browser) made //webhooks/ID, and text appended after a query went into the query.
 */
function webhookUrl(base: string, endpointId: string): string {
  const u = URL.canParse(base) ? new URL(base) : undefined;
  if (!u || (u.protocol !== 'http:' && u.protocol !== 'https:')) throw new UsageError('--url must be an http(s) URL, e.g. http://127.0.0.1:8080');
  u.pathname = `${u.pathname.replace(/\/+$/, '')}/webhooks/${endpointId}`;
  u.hash = '';
  return u.href;
}
