/** Compiles `events` globs (`payment_intent.*`, `*`) into one matcher; undefined = allow all. */
export function eventMatcher(globs: readonly string[] | undefined): (type: string) => boolean {
  if (!globs) return () => true;
  const escaped = globs.map((g) => g.split('*').map((s) => s.replace(/[.+?^${}()|[\]\\]/g, '\\$&')).join('.*'));
  // `s` (dotAll): `*` stands for any characters; without it `.` skips line terminators, and a
  // verified type holding one (\n, U+2028) was ignored (200, no row) under `*`.
  const re = new RegExp(`^(?:${escaped.join('|')})$`, 's');
  return (type) => re.test(type);
}

/**
 * A glob with surrounding whitespace or a control character (a quoting slip: ' payment_intent.*',
 * a trailing newline) matches no provider's event type: the config's `events` and a handler's
 * type pattern refuse it rather than let every event meant for it be ignored.
 */
export function isUnmatchableGlob(glob: string): boolean {
  return glob.trim() !== glob || /[\u0000-\u001f\u007f]/.test(glob);
}
