/**
 * Bodies this process has just accepted, kept for its own workers (`serve` with the workers on):
 * the verified bytes. An event claimed here moments later then skips reading its payload back
 * and decrypting it (in a CPU profile at 2,000 req/s with handlers that read every body, that
 * work and a second parse were ~17 % of the event loop; the ingress no longer builds a parse
 * tree (json-scan.ts), so a handler that reads the payload parses it once, in the worker).
 * Bounded by raw bytes, oldest out first; each entry is taken once, so a retry reads the stored
 * bytes. A taken body stays within the bound until the worker gives it back (`giveBack`, when its
 * attempt is over), so the bodies kept here and those the workers hold from here are bounded
 * together, and no worker ever waits for them. A miss (evicted, not kept, another process claimed
 * it, a restart) only means the worker reads the store, as it always can.
 */
/** Whether a worker of this process would open the body of such an event (a reading handler, an HTTP forward). */
export type OpensBody = (provider: string, endpointId: string, eventType: string) => boolean;

export class FreshBodies {
  private readonly entries = new Map<string, Buffer>();
  /** Raw bytes of the entries kept here. */
  private bytes = 0;
  /** Raw bytes taken by workers and not yet given back. */
  private lent = 0;
  private readonly opens = new Map<string, boolean>();

  constructor(private readonly maxBytes: number, private readonly opensBody: OpensBody) {}

  /** Keeps the body unless no target here would open it: holding it would only cost GC time. */
  put(inboxId: string, provider: string, endpointId: string, eventType: string, raw: Buffer): void {
    if (raw.length > this.maxBytes / 16) return; // a few large bodies must not flush the rest
    if (this.lent + raw.length > this.maxBytes) return; // the workers hold the whole bound
    const key = `${endpointId}\u0000${eventType}`;
    let opens = this.opens.get(key);
    if (opens === undefined) {
      if (this.opens.size >= 1000) this.opens.clear(); // event types are the providers' words: bound the memo
      this.opens.set(key, (opens = this.opensBody(provider, endpointId, eventType)));
    }
    if (!opens) return;
    this.entries.set(inboxId, raw);
    this.bytes += raw.length;
    // Map iteration is insertion order: the oldest go first.
    for (const [id, e] of this.entries) {
      if (this.bytes + this.lent <= this.maxBytes) break;
      this.entries.delete(id);
      this.bytes -= e.length;
    }
  }

  /** The entry, once; its bytes count as lent until `giveBack`. */
  take(inboxId: string): Buffer | undefined {
    const e = this.entries.get(inboxId);
    if (e) {
      this.entries.delete(inboxId);
      this.bytes -= e.length;
      this.lent += e.length;
    }
    return e;
  }

  /** Drops the entry without lending it: its accept made no row of its own (a duplicate, a failed commit). */
  discard(inboxId: string): void {
    const e = this.entries.get(inboxId);
    if (e) {
      this.entries.delete(inboxId);
      this.bytes -= e.length;
    }
  }

  /** The worker is done with taken bodies of `bytes` raw bytes in all. */
  giveBack(bytes: number): void {
    this.lent -= bytes;
  }

  /** Raw bytes kept here and lent to workers. */
  get heldBytes(): number {
    return this.bytes + this.lent;
  }

  get size(): number {
    return this.entries.size;
  }
}
