/**
 * `application/x-www-form-urlencoded` bodies (Twilio, Slack commands, Mollie classic, GitHub's form
 * deliveries). Decoding follows the WHATWG URL standard (`+` is a space, invalid percent escapes are
 * kept as-is), the same rules providers' own SDKs use.
 */

/** Every field in arrival order; a repeated name keeps each value. */
export function parseForm(body: Buffer | string): Map<string, string[]> {
  const fields = new Map<string, string[]>();
  for (const [k, v] of new URLSearchParams(typeof body === 'string' ? body : body.toString('utf8'))) {
    const list = fields.get(k);
    if (list) list.push(v);
    else fields.set(k, [v]);
  }
  return fields;
}

/** The fields as a plain object for handlers: a single value as a string, a repeated one as an array. */
export function formObject(body: Buffer | string): Record<string, string | string[]> {
  // fromEntries defines own properties, as JSON.parse does: a field named `__proto__` (anyone can
  // post one to an unsigned endpoint) stays a field instead of replacing the object's prototype.
  return Object.fromEntries([...parseForm(body)].map(([k, vs]) => [k, vs.length === 1 ? vs[0]! : vs]));
}

/** Whether stored bytes are JSON (first non-blank byte `{` or `[`) rather than a form. */
export function isJsonBytes(raw: Buffer): boolean {
  for (const b of raw) {
    if (b === 0x20 || b === 0x09 || b === 0x0a || b === 0x0d) continue;
    return b === 0x7b || b === 0x5b;
  }
  return false;
}
