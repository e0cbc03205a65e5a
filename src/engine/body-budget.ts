/**
 * The bytes of stored event bodies the inbox worker of one process holds at once (read back
 * and opened), shared by every batch in flight. A slice of a batch reserves its share before it
 * reads, keeps what it actually read, and gives it back when it has settled; a slice that finds
 * the budget spent waits, holding none of it (so nobody waits on a waiter). One reader always
 * proceeds when nothing is held, so one body larger than the whole budget cannot deadlock.
 * Without it a claim of 256 one-MiB bodies would read 256 MiB at once, times the batches in
 * flight. (Bodies taken from FreshBodies are bounded there.)
 */
export class BodyBudget {
  private held = 0;
  private readonly waiting: { readonly n: number; readonly resolve: () => void }[] = [];

  /** @param maxBytes the budget; one slice of a batch reads up to a quarter of it. */
  constructor(readonly maxBytes: number, private readonly onChange?: (held: number) => void) {}

  /** Bytes one slice of a batch reads before it settles (the store read's `maxBytes`). */
  get sliceBytes(): number {
    return Math.max(1, Math.floor(this.maxBytes / 4));
  }

  get heldBytes(): number {
    return this.held;
  }

  /** Waits until `n` more bytes fit (or nothing is held), then holds them. First come, first served. */
  reserve(n: number): Promise<void> {
    if (this.waiting.length === 0 && this.fits(n)) {
      this.add(n);
      return Promise.resolve();
    }
    return new Promise<void>((resolve) => this.waiting.push({ n, resolve }));
  }

  /** Gives back `n` bytes; a negative `n` holds more without waiting (a read that returned past its reservation). */
  release(n: number): void {
    this.add(-n);
    // The bytes are held for a waiter before it resumes, so nobody can slip in between.
    while (this.waiting.length > 0 && this.fits(this.waiting[0]!.n)) {
      const w = this.waiting.shift()!;
      this.add(w.n);
      w.resolve();
    }
  }

  private fits(n: number): boolean {
    return this.held <= 0 || this.held + n <= this.maxBytes;
  }

  private add(n: number): void {
    this.held += n;
    this.onChange?.(this.held);
  }
}
