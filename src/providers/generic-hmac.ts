import { hmac, matchHmac, decodeDigest, decodeBase64, decodeHex, type HmacAlgorithm } from '../crypto/hmac.js';
import { ConfigError, IngressError } from '../errors.js';
import { asObject, child, optBool, optEnum, optInt, optString, optStringArray, reqString } from '../config/read.js';
import type { AdapterFactory, ProviderAdapter, RequestView, SignatureMetadata } from './contract.js';
import { envelope, jsonFields, parseJsonObject, pathValue, idString, requireEventId, requireEventType, toEpochMs, parseUnixSeconds } from './json.js';

/**
 * A configurable HMAC adapter for providers without a dedicated one:
 *
 *   options:
 *     signatureHeader: x-signature        # required
 *     algorithm: sha256                   # sha1 | sha256 | sha512
 *     encoding: hex                       # hex | base64
 *     prefix: "sha256="                   # stripped before decoding (optional)
 *     separator: ","                      # several signatures in one header (optional)
 *     secretEncoding: utf8                # utf8 | base64 | hex
 *     signedContent: "{timestamp}.{body}" # placeholders {id} {timestamp} {type} {body}; default "{body}"
 *     timestampHeader: x-timestamp        # Unix seconds; must appear in signedContent
 *     idHeader: x-event-id                # or idPath: id (JSON path in the body)
 *     typeHeader: x-event-type            # or typePath: type (default typePath "type"); must appear
 *                                         # as {type} unless unsignedTypeHeader: true
 *     objectIdPath, objectVersionPath, createdAtPath
 *     contentTypes: [application/json]
 *
 * Header values used for the key, the type or freshness must be covered by the signature,
 * otherwise an attacker could replay a captured body under a new id, another type (past the
 * endpoint's `events` filter, to other handlers) or a fresh timestamp: config refuses that. A
 * sender that does not sign its type header can only be taken with `unsignedTypeHeader: true`.
 */
const KEYS = [
  'signatureHeader', 'algorithm', 'encoding', 'prefix', 'separator', 'secretEncoding', 'signedContent',
  'timestampHeader', 'idHeader', 'idPath', 'typeHeader', 'unsignedTypeHeader', 'typePath', 'objectIdPath', 'objectVersionPath',
  'createdAtPath', 'contentTypes', 'toleranceSeconds',
] as const;

type Part = { literal: string } | { field: 'id' | 'timestamp' | 'type' | 'body' };

interface GenericSignature extends SignatureMetadata {
  readonly candidates: readonly Buffer[];
  readonly id: string | undefined;
  readonly timestampText: string | undefined;
  /** The type header's value when it is signed ({type}). */
  readonly type: string | undefined;
}

function parseTemplate(t: string, path: string): Part[] {
  const parts: Part[] = [];
  const re = /\{(\w+)\}/g;
  let last = 0;
  for (let m = re.exec(t); m; m = re.exec(t)) {
    if (m.index > last) parts.push({ literal: t.slice(last, m.index) });
    const f = m[1];
    if (f !== 'id' && f !== 'timestamp' && f !== 'type' && f !== 'body') throw new ConfigError(path, `unknown placeholder {${f}} (use {id}, {timestamp}, {type}, {body})`);
    parts.push({ field: f });
    last = m.index + m[0].length;
  }
  if (last < t.length) parts.push({ literal: t.slice(last) });
  if (parts.filter((p) => 'field' in p && p.field === 'body').length !== 1) throw new ConfigError(path, 'must contain {body} exactly once');
  return parts;
}

/** RFC 9110 §5.1: a field name is a token. Any other name (`X-Signature:`, `x sig`) no request carries. */
const TOKEN_RE = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/;

function headerName(name: string | undefined, path: string): string | undefined {
  if (name !== undefined && !TOKEN_RE.test(name)) throw new ConfigError(path, 'must be a header name alone (letters, digits, "-"; no ":", spaces or value), so a request can carry it');
  return name?.toLowerCase();
}

/** `contentTypes` are compared with a request's bare media type, lower-cased, parameters dropped. */
function mediaType(t: string, path: string): string {
  const [type, subtype, ...rest] = t.split('/');
  if (rest.length > 0 || !type || !subtype || !TOKEN_RE.test(type) || !TOKEN_RE.test(subtype) || type === '*' || subtype === '*') {
    throw new ConfigError(path, 'must be a media type alone, e.g. application/json (no parameters such as "; charset=…", no wildcards): it is compared with the request\'s media type');
  }
  return t.toLowerCase();
}

/** A dotted path of member names (`data.object.id`, an array index as `items.0.id`); pathValue reads no other syntax. */
function jsonPath(p: string | undefined, path: string): string | undefined {
  if (p !== undefined && (p.split('.').some((k) => k === '') || p === '$' || p.startsWith('$.') || /\[.*\]/.test(p))) {
    throw new ConfigError(path, 'must be a dotted path of member names, e.g. data.object.id (an array index as a name: items.0.id), not JSONPath');
  }
  return p;
}

export const createGenericHmac: AdapterFactory = (options, path) => {
  const o = asObject(options ?? {}, path, KEYS);
  const signatureHeader = headerName(reqString(o, 'signatureHeader', path), child(path, 'signatureHeader'))!;
  const algorithm: HmacAlgorithm = optEnum(o, 'algorithm', path, ['sha1', 'sha256', 'sha512'] as const) ?? 'sha256';
  const encoding = optEnum(o, 'encoding', path, ['hex', 'base64'] as const) ?? 'hex';
  const prefix = optString(o, 'prefix', path) ?? '';
  const separator = optString(o, 'separator', path);
  const secretEncoding = optEnum(o, 'secretEncoding', path, ['utf8', 'base64', 'hex'] as const) ?? 'utf8';
  const template = parseTemplate(optString(o, 'signedContent', path) ?? '{body}', child(path, 'signedContent'));
  const timestampHeader = headerName(optString(o, 'timestampHeader', path), child(path, 'timestampHeader'));
  const idHeader = headerName(optString(o, 'idHeader', path), child(path, 'idHeader'));
  const idPath = jsonPath(optString(o, 'idPath', path), child(path, 'idPath'));
  const typeHeader = headerName(optString(o, 'typeHeader', path), child(path, 'typeHeader'));
  const unsignedTypeHeader = optBool(o, 'unsignedTypeHeader', path) ?? false;
  const typePath = jsonPath(optString(o, 'typePath', path), child(path, 'typePath')) ?? (typeHeader ? undefined : 'type');
  const objectIdPath = jsonPath(optString(o, 'objectIdPath', path), child(path, 'objectIdPath'));
  const objectVersionPath = jsonPath(optString(o, 'objectVersionPath', path), child(path, 'objectVersionPath'));
  const createdAtPath = jsonPath(optString(o, 'createdAtPath', path), child(path, 'createdAtPath'));
  const contentTypes = optStringArray(o, 'contentTypes', path)?.map((s, i) => mediaType(s, child(child(path, 'contentTypes'), i))) ?? ['application/json'];
  if (contentTypes.length === 0) throw new ConfigError(child(path, 'contentTypes'), 'is empty, so every request would be refused (415); omit it to accept application/json');
  const tolerance = optInt(o, 'toleranceSeconds', path, 1, 86_400);
  const digestBytes = { sha1: 20, sha256: 32, sha512: 64 }[algorithm];
  const uses = (f: string) => template.some((p) => 'field' in p && p.field === f);
  const signsType = uses('type'); // decided once here, not on every request

  if ((idHeader === undefined) === (idPath === undefined)) throw new ConfigError(path, 'set exactly one of idHeader or idPath');
  if (idHeader && !uses('id')) throw new ConfigError(child(path, 'idHeader'), 'the id header must be signed: add {id} to signedContent');
  if (uses('id') && !idHeader) throw new ConfigError(child(path, 'signedContent'), '{id} needs idHeader');
  if (timestampHeader && !uses('timestamp')) throw new ConfigError(child(path, 'timestampHeader'), 'the timestamp must be signed: add {timestamp} to signedContent');
  if (typeHeader && !signsType && !unsignedTypeHeader) {
    throw new ConfigError(child(path, 'typeHeader'), 'the type header must be signed: add {type} to signedContent (or, if the sender does not sign it, set unsignedTypeHeader: true and accept that a replay can claim another type)');
  }
  if (signsType && !typeHeader) throw new ConfigError(child(path, 'signedContent'), '{type} needs typeHeader');
  if (unsignedTypeHeader && (!typeHeader || signsType)) throw new ConfigError(child(path, 'unsignedTypeHeader'), typeHeader ? 'contradicts {type} in signedContent' : 'needs typeHeader');
  if (uses('timestamp') && !timestampHeader) throw new ConfigError(child(path, 'signedContent'), '{timestamp} needs timestampHeader');
  if (tolerance !== undefined && !timestampHeader) throw new ConfigError(child(path, 'toleranceSeconds'), 'needs timestampHeader');

  function signedParts(m: { id?: string | undefined; timestampText?: string | undefined; type?: string | undefined }, body: Buffer): (Buffer | string)[] {
    return template.map((p) => ('literal' in p ? p.literal : p.field === 'body' ? body : p.field === 'id' ? m.id! : p.field === 'type' ? m.type! : m.timestampText!));
  }

  function decodeSecret(value: string): Buffer {
    const key = secretEncoding === 'utf8' ? Buffer.from(value, 'utf8') : secretEncoding === 'hex' ? decodeHex(value) : decodeBase64(value);
    if (key === null || key.length === 0) throw new Error(`secret is not valid ${secretEncoding}`);
    return key;
  }

  const readPaths = pathReader([idPath, typePath, objectIdPath, objectVersionPath, createdAtPath]);

  const adapter: ProviderAdapter = {
    name: 'generic-hmac',
    contentTypes,
    defaultToleranceSeconds: timestampHeader ? tolerance ?? 300 : null,
    // unknown: whatever the sender does.
    redeliveryWindowSeconds: null,
    prepareSecret: decodeSecret,
    parseSignature(req: RequestView): GenericSignature {
      const header = req.single(signatureHeader);
      if (header === undefined || header === '') throw new IngressError('missing_signature', `${signatureHeader} header is absent`);
      const candidates: Buffer[] = [];
      for (const raw of separator ? header.split(separator) : [header]) {
        const s = raw.trim();
        if (!s.startsWith(prefix)) throw new IngressError('malformed_signature', `${signatureHeader} must start with "${prefix}"`);
        const d = decodeDigest(s.slice(prefix.length), encoding);
        if (d === null || d.length !== digestBytes) throw new IngressError('malformed_signature', `${signatureHeader} is not a ${encoding} ${algorithm} digest`);
        candidates.push(d);
      }
      let timestamp: number | null = null;
      let timestampText: string | undefined;
      if (timestampHeader) {
        timestampText = req.single(timestampHeader);
        timestamp = parseUnixSeconds(timestampText);
        if (timestamp === null) throw new IngressError('malformed_signature', `${timestampHeader} is absent or not Unix seconds`);
      }
      const id = idHeader ? req.single(idHeader) : undefined;
      if (idHeader && !id) throw new IngressError('malformed_signature', `${idHeader} header is absent`);
      const type = signsType ? req.single(typeHeader!) : undefined;
      if (signsType && !type) throw new IngressError('malformed_signature', `${typeHeader} header is absent`);
      return { timestamp, timestampText, id, type, candidates };
    },
    verify(meta, body, keys, nowMs) {
      const m = meta as GenericSignature;
      return matchHmac(algorithm, signedParts(m, body), m.candidates, keys, nowMs);
    },
    envelope(body, req, meta) {
      const at = readPaths(body);
      const m = meta as GenericSignature;
      return envelope({
        eventId: idHeader ? requireEventId(m.id, `${idHeader} header`) : requireEventId(at(idPath), idPath!),
        eventType: typeHeader ? requireEventType(m.type ?? req.single(typeHeader, 'ambiguous_header'), `${typeHeader} header`) : requireEventType(at(typePath), typePath!),
        objectId: objectIdPath ? idString(at(objectIdPath)) : null,
        objectVersion: objectVersionPath ? idString(at(objectVersionPath)) : null,
        providerCreatedAtMs: createdAtPath ? toEpochMs(at(createdAtPath)) : null,
      });
    },
    sign(body, secret, opts) {
      const timestampText = String(opts.timestamp ?? Math.floor(Date.now() / 1000));
      const id = opts.id ?? `evt_${Date.now().toString(36)}`;
      const type = opts.type ?? (signsType ? 'sample.event' : undefined);
      const digest = hmac(algorithm, decodeSecret(secret), signedParts({ id, timestampText, type }, body));
      const headers: Record<string, string> = { [signatureHeader]: prefix + digest.toString(encoding) };
      if (timestampHeader) headers[timestampHeader] = timestampText;
      if (idHeader) headers[idHeader] = id;
      if (typeHeader && type) headers[typeHeader] = type;
      return headers;
    },
    sample(seq) {
      const doc: Record<string, unknown> = { data: { id: `obj_sample_${seq}` } };
      const setPath = (path: string, v: unknown) => {
        const keys = path.split('.');
        let cur = doc;
        for (const k of keys.slice(0, -1)) cur = (cur[k] ??= {}) as Record<string, unknown>;
        cur[keys[keys.length - 1]!] = v;
      };
      if (idPath) setPath(idPath, `evt_sample_${seq}`);
      if (typePath) setPath(typePath, 'sample.event');
      return {
        body: Buffer.from(JSON.stringify(doc)),
        headers: { 'content-type': contentTypes[0]! },
        signOptions: { id: `evt_sample_${seq}`, type: 'sample.event' },
      };
    },
  };
  return adapter;
};

/**
 * Reads the configured JSON paths of a verified body. Paths through objects only (the usual
 * case) go through the scanner (json-scan.ts): no tree is built, and an integer id past ±2^53
 * keeps its exact digits. A path that indexes an array (`items.0.id`) needs the parsed tree,
 * where such an id would be rounded: it is then refused as not a usable id (400), never stored
 * under a neighbour's key.
 */
function pathReader(configured: readonly (string | undefined)[]): (body: Buffer) => (path: string | undefined) => unknown {
  const paths = [...new Set(configured.filter((p): p is string => p !== undefined))];
  const scan = scannerFor(paths);
  if (scan) {
    return (body) => {
      const values = scan(body);
      return (path) => (path === undefined ? undefined : values[paths.indexOf(path)]);
    };
  }
  return (body) => {
    const e = parseJsonObject(body);
    return (path) => (path === undefined ? undefined : pathValue(e, path));
  };
}

/** The scanner for `paths`, or undefined where one indexes an array or reads `length` (compilePaths refuses those). */
function scannerFor(paths: readonly string[]): ((body: Buffer) => unknown[]) | undefined {
  try {
    return jsonFields(paths);
  } catch {
    return undefined;
  }
}
