/**
 * A timer sleep that can be cut short: `sleep(ms)` resolves after ms, or at once when `wake()`
 * is called meanwhile (the claim loop's poll and the NOTIFY pacer each run one sleep at a time;
 * should two overlap, `wake()` ends the later one and the earlier still ends on its own timer).
 */
export class Sleeper {
  private pending: (() => void) | undefined;

  sleep(ms: number): Promise<void> {
    return new Promise<void>((resolve) => {
      const done = () => {
        clearTimeout(timer);
        if (this.pending === done) this.pending = undefined;
        resolve();
      };
      const timer = setTimeout(done, ms);
      this.pending = done;
    });
  }

  /** Ends the sleep in progress, if any. */
  wake(): void {
    this.pending?.();
  }
}
