/**
 * Whether a signed timestamp (Unix seconds) lies within ±tolerance of now, both directions.
 * Now counts in whole seconds, as the providers' own SDKs count it (stripe-node, standardwebhooks,
 * Slack's Bolt: `Math.floor(Date.now() / 1000)`). With fractional now, a request signed exactly
 * `tolerance` seconds ago was stale whenever the current millisecond was not 0, while one signed
 * `tolerance` seconds ahead was fresh: the window was lopsided by up to a second.
 */
export function isFresh(timestampSeconds: number, nowMs: number, toleranceSeconds: number): boolean {
  return Math.abs(Math.floor(nowMs / 1000) - timestampSeconds) <= toleranceSeconds;
}
