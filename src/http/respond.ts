import type { IncomingMessage, ServerResponse } from 'node:http';
import type { IngressError, Reason } from '../errors.js';
import type { Reply } from '../providers/contract.js';
import { afterRefusal } from './linger.js';

export function sendJson(res: ServerResponse, status: number, json: string, headers: Record<string, string | number> = {}): void {
  if (res.headersSent) return;
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(json), ...headers });
  res.end(json);
}

/** A provider-specific answer (Adyen `[accepted]`, Slack's challenge echo). */
export function sendReply(res: ServerResponse, r: Reply): void {
  if (res.headersSent) return;
  res.writeHead(r.status, { 'content-type': r.contentType, 'content-length': Buffer.byteLength(r.body) });
  res.end(r.body);
}

/**
 * Refusals that come before the body is read and do not ask the sender to stop sending it: after
 * one, a small body still to come is read and dropped and the connection kept (linger.ts
 * afterRefusal). Every other refusal of a request whose body has not all arrived closes.
 */
const REFUSED_BEFORE_BODY: ReadonlySet<Reason> = new Set<Reason>([
  'method_not_allowed', 'unknown_endpoint', 'rate_limited', 'too_many_headers', 'headers_too_large',
  'unsupported_media_type', 'unsupported_content_encoding', 'secrets_unavailable',
]);

/**
 * Answers a rejection with `{"error": reason}`. If the request body has not all arrived, the
 * connection is closed after the answer (a lingering close, so a sender still writing reads the
 * answer), unless the refusal came before the body and what is left of it is small: then it is
 * dropped and the connection kept (linger.ts).
 */
export function sendError(req: IncomingMessage, res: ServerResponse, e: IngressError): void {
  if (res.headersSent) return; // answered already: nothing is sent, so the connection is not marked closing either
  const headers: Record<string, string | number> = { ...e.headers };
  if (e.retryAfter !== undefined) headers['retry-after'] = e.retryAfter;
  afterRefusal(req, res, REFUSED_BEFORE_BODY.has(e.reason));
  const body = e.detail ? JSON.stringify({ error: e.reason, detail: e.detail }) : `{"error":"${e.reason}"}`;
  sendJson(res, e.status, body, headers);
}

/**
 * Answers whose sender waits for `100 Continue` before sending the body: Node routes a request
 * here through 'checkContinue' only for HTTP/1.1 and an Expect naming 100-continue (RFC 9110
 * §10.1.1: an HTTP/1.0 sender's Expect is ignored).
 */
const awaitingContinue = new WeakSet<ServerResponse>();

export function markAwaitingContinue(res: ServerResponse): void {
  awaitingContinue.add(res);
}

export function isAwaitingContinue(res: ServerResponse): boolean {
  return awaitingContinue.has(res);
}

/**
 * Requests whose connection was answered by server.ts clientError while their body was still
 * arriving (a request timeout, bytes the HTTP parser refused): that raw answer is what the sender
 * got, so it is what the ingress logs and counts for them, not the failure it then sees itself.
 */
const answeredRaw = new WeakMap<IncomingMessage, Reason>();

export function markAnsweredRaw(req: IncomingMessage, reason: Reason): void {
  answeredRaw.set(req, reason);
}

export function rawAnswerOf(req: IncomingMessage): Reason | undefined {
  return answeredRaw.get(req);
}
