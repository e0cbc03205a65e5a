/** Compiles `events` globs (`payment_intent.*`, `*`) into one matcher; undefined = allow all. */
export function eventMatcher(globs: readonly string[] | undefined): (type: string) => boolean {
  if (!globs) return () => true;
  const escaped = globs.map((g) => g.split('*').map((s) => s.replace(/[.+?^${}()|[\]\\]/g, '\\$&')).join('.*'));
  // `s` (dotAll): `*` stands for any characters; without it `.` skips line terminators, and a
  // verified type holding one (\n, U+2028) was ignored (200, no row) under `*`.
  const re = new RegExp(`^(?:${escaped.join('|')})$`, 's');
  return (type) => re.test(type);
}
