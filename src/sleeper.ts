/**
 * A timer sleep that can be cut short: `sleep(ms)` resolves after ms, or at once when `wake()`
 * is called meanwhile. One sleep at a time (the claim loop and the NOTIFY pacer each run one).
 */
export class Sleeper {
  private timer: NodeJS.Timeout | undefined;
  private pending: (() => void) | undefined;

  sleep(ms: number): Promise<void> {
    return new Promise<void>((resolve) => {
      const done = () => {
        clearTimeout(this.timer);
        this.pending = undefined;
        resolve();
      };
      this.pending = done;
      this.timer = setTimeout(done, ms);
    });
  }

  /** Ends the sleep in progress, if any. */
  wake(): void {
    this.pending?.();
  }
}
