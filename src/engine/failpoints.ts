/**
 * Crash points for the crash-recovery tests: `WEBHOOK_INBOX_FAILPOINTS=relay.after-publish`
 * makes the process SIGKILL itself right there, like a power cut — no finally blocks, no
 * flush. Read once at start; unset (always, in production) it costs one Set lookup.
 */
const armed = new Set((process.env.WEBHOOK_INBOX_FAILPOINTS ?? '').split(',').filter(Boolean));

export type Failpoint = 'worker.after-commit' | 'worker.after-forward' | 'relay.after-publish' | 'effects.after-execute';

export function failpoint(name: Failpoint): void {
  if (armed.size > 0 && armed.has(name)) process.kill(process.pid, 'SIGKILL');
}
