/**
 * Settles items in waves as they become ready: one wave at a time, each taking every item ready
 * when it starts (group commit). The inbox worker's events become ready as their HTTP forwards
 * finish, so a destination slow to answer holds back only its own events, and a batch whose
 * forwards answer together still settles in one or a few transactions.
 */
export class SettleWaves<T> {
  private ready: T[] = [];
  private running: Promise<void> | undefined;
  private failure: { readonly error: unknown } | undefined;

  constructor(private readonly settle: (items: T[]) => Promise<void>) {}

  add(item: T): void {
    this.ready.push(item);
    this.running ??= this.drain();
  }

  /** Waits until every item added so far is settled; the first failure, if a wave failed. */
  async idle(): Promise<{ readonly error: unknown } | undefined> {
    while (this.running) await this.running;
    return this.failure;
  }

  private async drain(): Promise<void> {
    await Promise.resolve(); // items added in the same tick share the first wave
    while (this.ready.length > 0) {
      const items = this.ready;
      this.ready = [];
      try {
        await this.settle(items);
      } catch (error) {
        // Reported by idle(); the next waves still run (each settle is guarded by its own leases).
        this.failure ??= { error };
      }
    }
    this.running = undefined;
  }
}
