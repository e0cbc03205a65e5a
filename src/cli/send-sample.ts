import { randomBytes } from 'node:crypto';
import { loadConfigFile } from '../config/load.js';
import { ConfigError } from '../errors.js';
import { UsageError } from './usage-error.js';
import { resolveSecret } from '../config/secrets.js';
import { isRetired } from '../crypto/hmac.js';

/** What `--id` takes: the random part of a sample event's ids, as a run prints it. */
const SAMPLE_ID_RE = /^[0-9a-f]{1,12}$/;

/**
 * Signs the adapter's sample event with the endpoint's first secret not yet retired and POSTs it.
 * `sampleId` sends the sample of an earlier run again (same event id, fresh signature and
 * timestamp, as a provider's retry): without it every run is a new event, so a user trying the
 * README's "a duplicate gets duplicate: true" had no way to see it.
 */
export async function runSendSample(configFile: string, endpointId: string, baseUrl?: string, sampleId?: string): Promise<number> {
  if (sampleId !== undefined && !SAMPLE_ID_RE.test(sampleId)) throw new UsageError(`--id takes the 1-12 lowercase hex digits an earlier send-sample printed, not "${sampleId}"`);
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
  const seq = sampleId ?? randomBytes(6).toString('hex');
  const sample = ep.adapter.sample(seq);
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
  const answer = await res.text();
  console.log(`POST ${url} → ${res.status}\n${answer}`);
  // Not for an unsigned endpoint (Mollie classic): each of its notices is a row of its own; nor
  // for a type the endpoint's events filter ignores ({"ignored": …}): nothing was stored to repeat.
  if (res.ok && sampleId === undefined && ep.secrets.length > 0 && !isIgnored(answer)) console.error(`(sample ${seq}: add --id ${seq} to send the same event again; it is taken as a duplicate)`);
  return res.ok ? 0 : 1;
}

function isIgnored(answer: string): boolean {
  try {
    const a: unknown = JSON.parse(answer);
    return a !== null && typeof a === 'object' && 'ignored' in a;
  } catch {
    return false; // Adyen's "[accepted]", an empty 200
  }
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
