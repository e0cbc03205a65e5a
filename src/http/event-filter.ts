/** Compiles `events` globs (`payment_intent.*`, `*`) into one matcher; undefined = allow all. */
export function eventMatcher(globs: readonly string[] | undefined): (type: string) => boolean {
  if (!globs) return () => true;
  const escaped = globs.map((g) => g.split('*').map((s) => s.replace(/[.+?^${}()|[\]\\]/g, '\\$&')).join('.*'));
  const re = new RegExp(`^(?:${escaped.join('|')})$`);
  return (type) => re.test(type);
}
