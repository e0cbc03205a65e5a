import { DAY, withoutOptions } from './contract.js';
import { digestHeader, utf8Secret } from './signature.js';
import { hmac, matchHmac } from '../crypto/hmac.js';
import { IngressError } from '../errors.js';
import type { AdapterFactory, ProviderAdapter, RequestView, SignatureMetadata } from './contract.js';
import { isJsonBytes, parseForm } from './form.js';
import { envelope, jsonFields, idString, requireEventId, requireEventType } from './json.js';

/**
 * GitHub: `X-Hub-Signature-256: sha256=<hex>` = HMAC-SHA256(secret, raw body). Nothing else is
 * signed — no timestamp (so no freshness check) and not the delivery GUID. Key =
 * (X-GitHub-Hook-ID, X-GitHub-Delivery): redelivery keeps the GUID, and one GUID can reach two hooks.
 */
interface GithubSignature extends SignatureMetadata {
  readonly digest: Buffer;
}

const HEADER = 'x-hub-signature-256';
const PREFIX = 'sha256=';

function formPayload(body: Buffer): Buffer {
  // Form-encoded deliveries carry the JSON in the `payload` field.
  const payload = parseForm(body).get('payload');
  if (payload?.length !== 1) throw new IngressError('malformed_payload', 'form body needs exactly one payload field');
  return Buffer.from(payload[0]!, 'utf8');
}

const readFields = jsonFields(['repository.full_name']);

const adapter: ProviderAdapter = {
  name: 'github',
  contentTypes: ['application/json', 'application/x-www-form-urlencoded'],
  defaultToleranceSeconds: null,
  // no automatic retries; manual redelivery of the past 3 days (same GUID).
  redeliveryWindowSeconds: 3 * DAY,
  // GitHub caps payloads at 25 MB and never retries on its own: a 413 would lose the delivery.
  defaultMaxBodyBytes: 25 * 1024 * 1024,
  prepareSecret: utf8Secret,
  parseSignature(req) {
    return { timestamp: null, digest: digestHeader(req, HEADER, 'hex', { prefix: PREFIX }) } satisfies GithubSignature;
  },
  verify(meta, body, keys, nowMs) {
    return matchHmac('sha256', [body], [(meta as GithubSignature).digest], keys, nowMs);
  },
  envelope(body: Buffer, req: RequestView) {
    const delivery = requireEventId(req.single('x-github-delivery', 'ambiguous_header'), 'X-GitHub-Delivery header');
    const hookId = req.single('x-github-hook-id', 'ambiguous_header');
    const [repository] = readFields(req.mediaType === 'application/x-www-form-urlencoded' ? formPayload(body) : body);
    return envelope({
      eventId: hookId ? `${hookId}:${delivery}` : delivery,
      eventType: requireEventType(req.single('x-github-event', 'ambiguous_header'), 'X-GitHub-Event header'),
      objectId: idString(repository),
    });
  },
  // Form deliveries are stored as received; the handler gets the JSON inside their `payload` field.
  parsePayload: (raw) => JSON.parse((isJsonBytes(raw) ? raw : formPayload(raw)).toString('utf8')),
  sign(body, secret) {
    return { [HEADER]: PREFIX + hmac('sha256', Buffer.from(secret, 'utf8'), [body]).toString('hex') };
  },
  sample(seq) {
    const body = JSON.stringify({ zen: 'Design for failure.', hook_id: 1, repository: { id: 1, full_name: 'octo-org/octo-repo' } });
    return {
      body: Buffer.from(body),
      headers: { 'content-type': 'application/json', 'x-github-event': 'ping', 'x-github-delivery': `00000000-0000-4000-8000-${seq.padStart(12, '0').slice(-12)}`, 'x-github-hook-id': '1' },
      signOptions: {},
    };
  },
};

export const createGithub: AdapterFactory = withoutOptions(adapter);
