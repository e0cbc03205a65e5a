/**
 * A first-come-first-served budget of units (bytes, connections) shared by concurrent users:
 * `reserve(n)` waits until n more fit, `release(n)` gives them back. A waiter holds nothing
 * while it waits, and one reservation always proceeds when nothing is held, so a request larger
 * than the whole budget cannot deadlock.
 *
 * Uses: the stored body bytes the inbox worker holds (`workers.maxInFlightBodyBytes`: a claim of
 * 256 one-MiB bodies would otherwise be read at once, times the batches in flight), and the
 * requests an HTTP destination has open (`maxConnections`).
 */
export class Budget {
  private held = 0;
  private readonly waiting: { readonly n: number; readonly resolve: () => void }[] = [];

  constructor(readonly max: number, private readonly onChange?: (held: number) => void) {}

  get heldUnits(): number {
    return this.held;
  }

  /** Waits until `n` more units fit (or nothing is held), then holds them. First come, first served. */
  reserve(n: number): Promise<void> {
    if (this.waiting.length === 0 && this.fits(n)) {
      this.add(n);
      return Promise.resolve();
    }
    return new Promise<void>((resolve) => this.waiting.push({ n, resolve }));
  }

  /** Gives back `n` units; a negative `n` holds more without waiting (a read that returned past its reservation). */
  release(n: number): void {
    this.add(-n);
    // The units are held for a waiter before it resumes, so nobody can slip in between.
    while (this.waiting.length > 0 && this.fits(this.waiting[0]!.n)) {
      const w = this.waiting.shift()!;
      this.add(w.n);
      w.resolve();
    }
  }

  private fits(n: number): boolean {
    return this.held <= 0 || this.held + n <= this.max;
  }

  private add(n: number): void {
    this.held += n;
    this.onChange?.(this.held);
  }
}
