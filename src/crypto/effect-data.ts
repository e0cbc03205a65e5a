/**
 * An effect's data at rest. What a handler passes to `ctx.effect` is often what the downstream
 * call needs: a customer's email, a name, an amount. It is sealed as the webhook bodies are (AES-256-GCM
 * under the current payload key) and bound to the effect's idempotency key, which is unique per row,
 * so it cannot be moved onto another effect. Stored in the text column as
 * `sealed:<key id>.<nonce>.<ciphertext+tag>`, each part base64url (a key id may hold any
 * character; base64url has no `.`). Data stored before sealing began is plain JSON, which never
 * starts with `s`, and is read as it is.
 */
import { PayloadKeyMissingError, type PayloadCipher, type SealedPayload } from './payload-cipher.js';

export const SEALED_EFFECT_PREFIX = 'sealed:';

const aad = (idempotencyKey: string): Buffer => Buffer.from(JSON.stringify(['webhook-inbox/effect/v1', idempotencyKey]));

/** `json` sealed under the cipher's current key, as stored. */
export function sealEffectData(cipher: PayloadCipher, json: string, idempotencyKey: string): string {
  const s = cipher.sealData(Buffer.from(json), aad(idempotencyKey));
  return `${sealedEffectPrefix(s.keyId)}${s.nonce.toString('base64url')}.${s.ciphertext.toString('base64url')}`;
}

/** How every value sealed under `keyId` starts (keys reseal: what need not be sealed again). */
export function sealedEffectPrefix(keyId: string): string {
  return `${SEALED_EFFECT_PREFIX}${Buffer.from(keyId).toString('base64url')}.`;
}

/** The key id a stored value is sealed under; null for plain JSON (stored before sealing began). */
export function effectDataKeyId(stored: string): string | null {
  return stored.startsWith(SEALED_EFFECT_PREFIX) ? parse(stored).keyId : null;
}

/**
 * The JSON text. Throws PayloadKeyMissingError when its key is not loaded (no cipher at all
 * included), another error when it is not in the sealed form or does not authenticate.
 */
export function openEffectData(cipher: PayloadCipher | null, stored: string, idempotencyKey: string): string {
  if (!stored.startsWith(SEALED_EFFECT_PREFIX)) return stored;
  const sealed = parse(stored);
  if (!cipher) throw new PayloadKeyMissingError(sealed.keyId);
  return cipher.openData(sealed, aad(idempotencyKey)).toString();
}

/** Sealed again under the current key (keys reseal); plain JSON gets sealed for the first time. */
export function resealEffectData(cipher: PayloadCipher, stored: string, idempotencyKey: string): string {
  return sealEffectData(cipher, openEffectData(cipher, stored, idempotencyKey), idempotencyKey);
}

function parse(stored: string): SealedPayload {
  const parts = stored.slice(SEALED_EFFECT_PREFIX.length).split('.');
  if (parts.length !== 3 || parts.some((p) => !/^[A-Za-z0-9_-]*$/.test(p))) throw new Error('effect data is not in the sealed form');
  return { keyId: Buffer.from(parts[0]!, 'base64url').toString(), nonce: Buffer.from(parts[1]!, 'base64url'), ciphertext: Buffer.from(parts[2]!, 'base64url') };
}
