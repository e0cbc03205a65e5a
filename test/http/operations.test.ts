import { createHmac } from 'node:crypto';
import { captureLog } from '../helpers/log.js';
import { mkdtempSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { afterAll, describe, expect, it, vi } from 'vitest';
import { PAYLOAD_KEY, startTestApp, STRIPE_SECRET } from '../helpers/app.js';
import { post, rawExchange, statusOf } from '../helpers/http.js';
import { stripeEvent, stripeHeaders } from '../helpers/events.js';

/** Starts an app on SQLite whose log lines are captured. */
async function appWithLog(over: Record<string, unknown>, env: NodeJS.ProcessEnv = {}, urlSuffix = '', secretCheckMs?: number) {
  const lines: string[] = [];
  const app = await startTestApp('sqlite', over, env, { logger: captureLog(lines), urlSuffix, secretCheckMs });
  return { app, lines, file: app.db.url.slice('sqlite:'.length), stop: () => app.stop() };
}

describe('secrets unavailable → fail closed', () => {
  const stops: (() => Promise<void>)[] = [];
  afterAll(async () => { for (const s of stops) await s(); });

  it('an endpoint whose secret cannot be resolved answers 503; others keep working; /readyz names the path', async () => {
    const t = await appWithLog({
      endpoints: [
        { id: 'stripe', provider: 'stripe', secrets: [{ version: 'v1', value: STRIPE_SECRET }] },
        { id: 'broken', provider: 'stripe', secrets: [{ version: 'v1', value: '${env:MISSING_SECRET}' }] },
      ],
    });
    stops.push(t.stop);
    const body = stripeEvent('evt_sec');
    const broken = await post(`${t.app.url}/webhooks/broken`, body, stripeHeaders(body));
    expect(broken.status).toBe(503);
    expect(broken.json().error).toBe('secrets_unavailable');
    expect(broken.headers['retry-after']).toBe('10');
    expect((await post(`${t.app.url}/webhooks/stripe`, body, stripeHeaders(body))).status).toBe(200);
    const ready = await post(`${t.app.url}/readyz`, '', {}, 'GET');
    expect(ready.status).toBe(503);
    expect(ready.json().problems).toEqual(['endpoints[1].secrets[0].value: environment variable MISSING_SECRET is not set']);
  });

  it('/readyz is not ready while every secret version of an endpoint is retired', async () => {
    const t = await appWithLog({
      endpoints: [{ id: 'stripe', provider: 'stripe', secrets: [{ version: 'v1', value: STRIPE_SECRET, retireAt: '2020-01-01T00:00:00Z' }] }],
    });
    stops.push(t.stop);
    const ready = await post(`${t.app.url}/readyz`, '', {}, 'GET');
    expect(ready.status).toBe(503);
    expect(ready.json().problems).toEqual(['endpoints[0].secrets: every version is retired (every request is refused)']);
  });

  it('a retired secret version that no longer resolves does not take its endpoint offline', async () => {
    // The rotation is over and the old secret's file is gone: the endpoint runs on the current one.
    const t = await appWithLog({
      endpoints: [{ id: 'stripe', provider: 'stripe', secrets: [
        { version: 'v2', value: STRIPE_SECRET },
        { version: 'v1', value: '${file:/nonexistent/stripe_v1}', retireAt: '2020-01-01T00:00:00Z' },
      ] }],
    });
    stops.push(t.stop);
    const body = stripeEvent('evt_retired_gone');
    const r = await post(`${t.app.url}/webhooks/stripe`, body, stripeHeaders(body));
    expect(r.status).toBe(200);
    const ready = await post(`${t.app.url}/readyz`, '', {}, 'GET');
    expect(ready.status).toBe(200);
  });

  // A secret that is only white space (an env var templated from an unset value with a space
  // around it, a secret file of blank lines) was taken as the HMAC key: anyone could sign with
  // " " or "\n" and be accepted, while /readyz and check-config said all secrets were loaded.
  it('a secret that is only white space is refused by path: 503, never verified with it', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'wi-blank-secret-'));
    const file = join(dir, 'gh_secret');
    writeFileSync(file, '\n\n');
    const t = await appWithLog({
      endpoints: [
        { id: 'gh-env', provider: 'github', secrets: [{ version: 'v1', value: '${env:GH_SECRET}' }] },
        { id: 'gh-file', provider: 'github', secrets: [{ version: 'v1', value: `\${file:${file}}` }] },
      ],
    }, { GH_SECRET: ' \n' });
    stops.push(t.stop);
    let n = 0;
    const forge = (endpoint: string, key: string) => {
      const body = Buffer.from(JSON.stringify({ zen: 'forged', repository: { full_name: 'o/r' } }));
      const sig = createHmac('sha256', key).update(body).digest('hex');
      return post(`${t.app.url}/webhooks/${endpoint}`, body, {
        'content-type': 'application/json', 'x-hub-signature-256': `sha256=${sig}`, 'x-github-event': 'push', 'x-github-delivery': `blank-${++n}`,
      });
    };
    for (const [endpoint, key] of [['gh-env', ' '], ['gh-file', '\n']] as const) {
      const r = await forge(endpoint, key);
      expect(r.status, `${endpoint}: ${r.text}`).toBe(503);
      expect(r.json().error).toBe('secrets_unavailable');
    }
    expect((await t.app.store.countRows()).inbox).toBe(0);
    const ready = await post(`${t.app.url}/readyz`, '', {}, 'GET');
    expect(ready.status).toBe(503);
    expect(ready.json().problems).toEqual([
      'endpoints[0].secrets[0].value: environment variable GH_SECRET holds only white space',
      `endpoints[1].secrets[0].value: ${file} holds only white space`,
    ]);

    // The file gets its real secret: the endpoint heals, and only that secret verifies.
    writeFileSync(file, 'gh-real-secret\n');
    await t.app.reloadSecrets();
    expect((await forge('gh-file', '\n')).status).toBe(401);
    expect((await forge('gh-file', 'gh-real-secret')).status).toBe(200);
    rmSync(dir, { recursive: true, force: true });
  });

  // A Stripe secret file ending in two newlines (an editor's final newline after the pasted one)
  // lost only the last: the key was "whsec_…\n", every genuine delivery 401 while /readyz said
  // ready and check-config OK. A Stripe secret has no white space: the path is named instead.
  it('a Stripe secret with white space in it (a file ending in a blank line) is refused by path, not a silent 401 for every delivery', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'wi-stripe-ws-'));
    const file = join(dir, 'stripe_whsec');
    writeFileSync(file, `${STRIPE_SECRET}\n\n`);
    const t = await appWithLog({ endpoints: [{ id: 'stripe', provider: 'stripe', secrets: [{ version: 'v1', value: `\${file:${file}}` }] }] });
    stops.push(t.stop);
    const body = stripeEvent('evt_ws_secret');
    const r = await post(`${t.app.url}/webhooks/stripe`, body, stripeHeaders(body));
    expect(r.status, r.text).toBe(503);
    expect(r.json().error).toBe('secrets_unavailable');
    const ready = await post(`${t.app.url}/readyz`, '', {}, 'GET');
    expect(ready.status).toBe(503);
    expect(ready.json().problems).toEqual(['endpoints[0].secrets[0].value: a Stripe endpoint secret has no white space (a blank line or a space in its file or variable?)']);
    // Said once, as unavailable: not also as a secret used with its white space.
    expect(t.lines.filter((l) => l.includes('white space at an end'))).toEqual([]);

    writeFileSync(file, `${STRIPE_SECRET}\n`);
    await t.app.reloadSecrets();
    expect((await post(`${t.app.url}/webhooks/stripe`, body, stripeHeaders(body))).status).toBe(200);
    rmSync(dir, { recursive: true, force: true });
  });

  // A secret the user chose (GitHub's, generic HMAC's) may hold any character, so a space at an end
  // is kept; but pasted by mistake it fails every delivery, so serve says so at start.
  it('a typed-in secret with a space at an end is used as written, and serve warns at start naming its path, never its value', async () => {
    const t = await appWithLog({ endpoints: [
      { id: 'gh', provider: 'github', secrets: [{ version: 'v1', value: 'typed-in secret ' }] },
      { id: 'gh2', provider: 'github', secrets: [{ version: 'v1', value: 'no-space-secret' }] },
    ] });
    stops.push(t.stop);
    const warned = t.lines.map((l) => JSON.parse(l)).filter((l) => l.level === 40 && String(l.msg).includes('white space at an end'));
    expect(warned.map((l) => l.path)).toEqual(['endpoints[0].secrets[0].value']);
    expect(t.lines.join('\n')).not.toContain('typed-in');
    let n = 0;
    const deliver = (key: string) => {
      const body = Buffer.from(JSON.stringify({ zen: 'spaced', repository: { full_name: 'o/r' } }));
      return post(`${t.app.url}/webhooks/gh`, body, {
        'content-type': 'application/json', 'x-hub-signature-256': `sha256=${createHmac('sha256', key).update(body).digest('hex')}`, 'x-github-event': 'push', 'x-github-delivery': `spaced-${++n}`,
      });
    };
    expect((await deliver('typed-in secret')).status).toBe(401);
    expect((await deliver('typed-in secret ')).status).toBe(200);
  });

  it('without the payload key nothing is accepted (no unencrypted fallback)', async () => {
    const t = await appWithLog({ payloadKeys: { current: 'k1', keys: { k1: '${env:MISSING_KEY}' } } });
    stops.push(t.stop);
    const body = stripeEvent('evt_nokey');
    const r = await post(`${t.app.url}/webhooks/stripe`, body, stripeHeaders(body));
    expect(r.status).toBe(503);
    expect(r.json().error).toBe('secrets_unavailable');
    expect((await t.app.store.countRows()).inbox).toBe(0);
  });

  it('an older payload key that cannot be read does not stop accepts (sealing needs only the current one); /readyz names it', async () => {
    const t = await appWithLog({ payloadKeys: { current: 'k2', keys: { k1: '${env:MISSING_OLD_KEY}', k2: PAYLOAD_KEY } } });
    stops.push(t.stop);
    const body = stripeEvent('evt_oldkey');
    const r = await post(`${t.app.url}/webhooks/stripe`, body, stripeHeaders(body));
    expect(r.status, r.text).toBe(200);
    const row = (await t.app.store.getInbox(r.json().inbox_id))!;
    const sealed = (await t.app.store.getPayload(row.rawPayloadRef!))!;
    expect(sealed.keyId).toBe('k2');
    expect(t.app.keyring.cipher!.open(sealed, row).equals(body)).toBe(true);
    const ready = await post(`${t.app.url}/readyz`, '', {}, 'GET');
    expect(ready.status).toBe(503);
    expect(ready.json().problems).toEqual(['payloadKeys.keys.k1: environment variable MISSING_OLD_KEY is not set']);
  });
  it("secrets inside provider options are re-read with the others: a rotated Checkout Authorization key applies at once, a withdrawn one takes the endpoint offline", async () => {
    const dir = mkdtempSync(join(tmpdir(), 'wi-opt-secret-'));
    const file = join(dir, 'cko-auth');
    writeFileSync(file, 'auth-old');
    const t = await appWithLog({
      endpoints: [{ id: 'cko', provider: 'checkout', secrets: [{ version: 'v1', value: 'cko-signing-key' }], options: { authorization: `\${file:${file}}` } }],
    });
    stops.push(t.stop);
    let n = 0;
    const send = (authorization: string) => {
      const body = Buffer.from(JSON.stringify({ id: `evt_cko_rot_${++n}`, type: 'payment_approved', data: { id: `pay_${n}` } }));
      const sig = createHmac('sha256', 'cko-signing-key').update(body).digest('hex');
      return post(`${t.app.url}/webhooks/cko`, body, { 'content-type': 'application/json', 'cko-signature': sig, authorization });
    };
    expect((await send('auth-old')).status).toBe(200);

    writeFileSync(file, 'auth-new');
    t.app.keyring.reload(); // what SIGHUP does
    expect((await send('auth-new')).status).toBe(200);
    const old = await send('auth-old');
    expect(old.status).toBe(401);
    expect(old.json().error).toBe('invalid_signature');

    rmSync(file);
    t.app.keyring.reload();
    const offline = await send('auth-new');
    expect(offline.status).toBe(503);
    expect(offline.json().error).toBe('secrets_unavailable');
    const ready = await post(`${t.app.url}/readyz`, '', {}, 'GET');
    expect(ready.status).toBe(503);
    expect(JSON.stringify(ready.json().problems)).toContain('endpoints[0].options.authorization');
    expect(JSON.stringify(ready.json().problems)).not.toContain('auth-new');

    writeFileSync(file, 'auth-new');
    t.app.keyring.reload();
    expect((await send('auth-new')).status).toBe(200);
  });
});

/**
 * An app whose one Stripe endpoint reads its secret from a file holding `whsec_before_rotation`;
 * `rotate` replaces the file as Kubernetes rotates a mounted secret (a new file renamed over it).
 */
async function fileSecretApp(secretCheckMs: number) {
  const dir = mkdtempSync(join(tmpdir(), 'wi-secret-file-'));
  const file = join(dir, 'stripe_whsec');
  writeFileSync(file, 'whsec_before_rotation\n');
  const t = await appWithLog({ endpoints: [{ id: 'stripe', provider: 'stripe', secrets: [{ version: 'v1', value: `\${file:${file}}` }] }] }, {}, '', secretCheckMs);
  let n = 0;
  const send = (secret: string) => {
    const body = stripeEvent(`evt_file_secret_${++n}`);
    return post(`${t.app.url}/webhooks/stripe`, body, stripeHeaders(body, secret));
  };
  const rotate = (value: string) => {
    writeFileSync(join(dir, 'next'), value);
    renameSync(join(dir, 'next'), file);
  };
  const stop = async () => {
    await t.stop();
    rmSync(dir, { recursive: true, force: true });
  };
  return { ...t, file, send, rotate, stop };
}

describe('secret files are watched', () => {
  it('a ${file:} secret replaced on disk (a rotated mount) applies without a signal; removed, its endpoint goes offline; back, it heals', async () => {
    const t = await fileSecretApp(50);
    const { file, send } = t;
    try {
      const until = async (what: () => Promise<boolean>) => {
        for (let i = 0; i < 100 && !(await what()); i++) await new Promise((r) => setTimeout(r, 20));
        return what();
      };
      expect((await send('whsec_before_rotation')).status).toBe(200);
      t.rotate('whsec_after_rotation\n');
      expect(await until(async () => (await send('whsec_after_rotation')).status === 200)).toBe(true);
      const old = await send('whsec_before_rotation');
      expect(old.status).toBe(401);
      expect(t.lines.some((l) => l.includes('a secret file changed: secrets reloaded'))).toBe(true);

      rmSync(file);
      expect(await until(async () => (await send('whsec_after_rotation')).status === 503)).toBe(true);
      expect((await send('whsec_after_rotation')).json().error).toBe('secrets_unavailable');
      expect(t.lines.some((l) => l.includes('no longer loads') && l.includes('endpoints[0].secrets[0].value'))).toBe(true);

      writeFileSync(file, 'whsec_after_rotation');
      expect(await until(async () => (await send('whsec_after_rotation')).status === 200)).toBe(true);
      expect(t.lines.join('\n')).not.toContain('whsec_after_rotation');
    } finally {
      await t.stop();
    }
  });
});

describe('secretCheckMs: 0 (library option)', () => {
  // setInterval takes 0 as 1 ms: every secret file was read about a thousand times a second, and a
  // rotated file applied at once, where 0 was meant as "never" (only reloadSecrets()).
  it('means no periodic checks: a rotated ${file:} secret applies only at reloadSecrets()', async () => {
    const t = await fileSecretApp(0);
    const { send } = t;
    try {
      t.rotate('whsec_after_rotation\n');
      await new Promise((r) => setTimeout(r, 300));
      expect((await send('whsec_before_rotation')).status).toBe(200);
      await t.app.reloadSecrets();
      expect((await send('whsec_after_rotation')).status).toBe(200);
      expect((await send('whsec_before_rotation')).status).toBe(401);
    } finally {
      await t.stop();
    }
  });

  it('a negative interval is refused before anything is opened', async () => {
    await expect(appWithLog({}, {}, '', -1)).rejects.toThrow(/secretCheckMs must be ≥ 0/);
  });
});

describe('logs and metrics', () => {
  it('one JSON line per request with outcome and latency; never a secret, signature or body', async () => {
    const t = await appWithLog({});
    try {
      const body = stripeEvent('evt_logged', { type: 'payment_intent.succeeded' });
      const bodyWithSecretWord = Buffer.from(body.toString().replace('"pad":""', '"pad":"BODY_CANARY_123"'));
      const headers = stripeHeaders(bodyWithSecretWord);
      await post(`${t.app.url}/webhooks/stripe`, bodyWithSecretWord, headers);
      await post(`${t.app.url}/webhooks/stripe`, bodyWithSecretWord, headers);
      const tampered = Buffer.from(bodyWithSecretWord.toString().replace('CANARY', 'CANARX'));
      await post(`${t.app.url}/webhooks/stripe`, tampered, headers);
      await t.app.close();
      t.app.log.flush();
      await new Promise((r) => setTimeout(r, 50));
      const requestLines = t.lines.map((l) => JSON.parse(l)).filter((l) => l.outcome);
      expect(requestLines.map((l) => [l.outcome, l.status])).toEqual([['accepted', 200], ['duplicate', 200], ['invalid_signature', 401]]);
      expect(requestLines[0]).toMatchObject({ endpoint: 'stripe', provider: 'stripe', event_id: 'evt_logged', event_type: 'payment_intent.succeeded' });
      expect(typeof requestLines[0].latency_ms).toBe('number');
      expect(requestLines[2].event_id).toBeUndefined(); // unverified: nothing from the body is logged
      const all = t.lines.join('\n');
      expect(all).not.toContain(STRIPE_SECRET);
      expect(all).not.toContain(headers['stripe-signature']!.split('v1=')[1]);
      expect(all).not.toContain('CANARY');
      expect(all).not.toContain('CANARX');
    } finally {
      await t.stop();
    }
  });

  it('/readyz is not ready while accepts fail though the database answers (SQLite write-locked by another process), and ready again after a commit succeeds', async () => {
    const t = await appWithLog({}, {}, '?busyTimeoutMs=100');
    try {
      const ready = () => post(`${t.app.url}/readyz`, '', {}, 'GET');
      expect((await ready()).status).toBe(200);
      const blocker = new Database(t.file);
      blocker.exec('BEGIN IMMEDIATE');
      const body = stripeEvent('evt_ready_locked');
      expect((await post(`${t.app.url}/webhooks/stripe`, body, stripeHeaders(body))).status).toBe(503);
      const locked = await ready();
      expect(locked.status).toBe(503);
      expect(locked.json().problems).toEqual([expect.stringMatching(/^accepts: the latest commit failed \d+ s ago: .*locked/)]);
      blocker.exec('ROLLBACK');
      blocker.close();
      expect((await post(`${t.app.url}/webhooks/stripe`, body, stripeHeaders(body))).status).toBe(200); // the provider's retry
      expect((await ready()).status).toBe(200);
    } finally {
      await t.stop();
    }
  });

  it('/readyz forgets a failed commit 10 s later by the monotonic clock: a wall clock stepped back meanwhile does not keep it not ready', async () => {
    // A wall clock the test can step (it runs on from where it is set); the monotonic one stays.
    vi.useFakeTimers({ toFake: ['Date'], shouldAdvanceTime: true });
    const t = await appWithLog({}, {}, '?busyTimeoutMs=100');
    try {
      const ready = () => post(`${t.app.url}/readyz`, '', {}, 'GET');
      const blocker = new Database(t.file);
      blocker.exec('BEGIN IMMEDIATE');
      const body = stripeEvent('evt_ready_stepped');
      expect((await post(`${t.app.url}/webhooks/stripe`, body, stripeHeaders(body))).status).toBe(503);
      blocker.exec('ROLLBACK');
      blocker.close();
      expect((await ready()).status).toBe(503);
      // chrony (or an operator) sets the host's clock back 10 minutes. Not ready, a load balancer
      // sends no webhooks, so no commit clears the failure: only its age may.
      vi.setSystemTime(Date.now() - 10 * 60_000);
      await new Promise((r) => setTimeout(r, 10_500));
      const later = await ready();
      expect(later.json().problems ?? []).toEqual([]);
      expect(later.status).toBe(200);
    } finally {
      vi.useRealTimers();
      await t.stop();
    }
  }, 20_000);

  it('/readyz is not ready on a database this build has not migrated (serve --no-migrate), and every accept would fail', async () => {
    const lines: string[] = [];
    const app = await startTestApp('sqlite', {}, {}, { logger: captureLog(lines), migrate: false });
    try {
      const r = await post(`${app.url}/readyz`, '', {}, 'GET');
      expect(r.status).toBe(503);
      expect(r.json().problems).toEqual([expect.stringMatching(/^database: schema at version none, this build needs \d+: run webhook-inbox migrate/)]);
      await app.store.migrate();
      expect((await post(`${app.url}/readyz`, '', {}, 'GET')).status).toBe(200);
    } finally {
      await app.stop();
    }
  });

  it('a verified event that cannot be stored is logged with its id and outcome unavailable', async () => {
    const t = await appWithLog({}, {}, '?busyTimeoutMs=100');
    try {
      const blocker = new Database(t.file);
      blocker.exec('BEGIN IMMEDIATE');
      const body = stripeEvent('evt_unstored');
      const r = await post(`${t.app.url}/webhooks/stripe`, body, stripeHeaders(body));
      blocker.exec('ROLLBACK');
      blocker.close();
      expect(r.status).toBe(503);
      await t.app.close();
      t.app.log.flush();
      await new Promise((res) => setTimeout(res, 50));
      const line = t.lines.map((l) => JSON.parse(l)).find((l) => l.status === 503);
      expect(line).toMatchObject({ outcome: 'unavailable', reason: 'storage_unavailable', event_id: 'evt_unstored', event_type: 'payment_intent.succeeded' });
    } finally {
      await t.stop();
    }
  });

  it('every refusal gets its log line and count: a 405, a 417, malformed HTTP, a header block too large, a body timed out (logged as the 408 it got)', async () => {
    const t = await appWithLog({ limits: { maxHeaderBytes: 1024, requestTimeoutMs: 500, headersTimeoutMs: 500 } });
    try {
      const port = Number(new URL(t.app.url).port);
      expect((await post(`${t.app.url}/webhooks/stripe`, '', {}, 'GET')).status).toBe(405);
      expect(statusOf((await rawExchange(port, 'POST /webhooks/stripe HTTP/1.1\r\nhost: x\r\nexpect: x-other\r\ncontent-length: 0\r\n\r\n', 500)).text)).toBe(417);
      expect(statusOf((await rawExchange(port, 'NOT HTTP AT ALL\r\n\r\n')).text)).toBe(400);
      expect(statusOf((await rawExchange(port, `POST /webhooks/stripe HTTP/1.1\r\nx-big: ${'a'.repeat(2000)}\r\n\r\n`)).text)).toBe(431);
      const slow = await rawExchange(port, `POST /webhooks/stripe HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\nstripe-signature: t=1,v1=${'0'.repeat(64)}\r\ncontent-length: 100\r\n\r\n{"id":`, 3000);
      expect(statusOf(slow.text)).toBe(408);
      // A connection that sends nothing is no request: closed past the header timeout, unanswered, uncounted.
      const silent = await rawExchange(port, '', 3000);
      expect(silent).toEqual({ text: '', closed: true });
      await new Promise((r) => setTimeout(r, 100));
      t.app.log.flush();
      await new Promise((r) => setTimeout(r, 50));
      const lines = t.lines.map((l) => JSON.parse(l)).filter((l) => l.outcome);
      expect(lines).toEqual(expect.arrayContaining([
        expect.objectContaining({ endpoint: 'stripe', status: 405, reason: 'method_not_allowed', outcome: 'rejected' }),
        expect.objectContaining({ endpoint: 'stripe', status: 417, reason: 'expectation_failed', outcome: 'malformed' }),
        expect.objectContaining({ endpoint: '(unparsed)', status: 400, reason: 'bad_request', outcome: 'malformed' }),
        expect.objectContaining({ endpoint: '(unparsed)', status: 431, reason: 'headers_too_large', outcome: 'malformed' }),
        expect.objectContaining({ endpoint: 'stripe', status: 408, reason: 'request_timeout', outcome: 'malformed' }),
      ]));
      expect(lines.filter((l) => l.status === 408)).toHaveLength(1); // once, by the ingress that was reading it
      const m = (await post(`${t.app.url}/metrics`, '', {}, 'GET')).text;
      expect(m).toContain('webhook_requests_total{endpoint="stripe",outcome="rejected"} 1');
      expect(m).toContain('webhook_requests_total{endpoint="stripe",outcome="malformed"} 2'); // the 417 and the 408
      expect(m).toContain('webhook_requests_total{endpoint="(unparsed)",outcome="malformed"} 2');
    } finally {
      await t.stop();
    }
  });

  it('/metrics counts requests by endpoint and outcome, ack and commit latency, batch size, matched secret version', async () => {
    const t = await appWithLog({
      endpoints: [{ id: 'stripe', provider: 'stripe', secrets: [{ version: 'v2', value: 'whsec_new' }, { version: 'v1', value: STRIPE_SECRET }], events: ['payment_intent.*'] }],
    });
    try {
      const url = `${t.app.url}/webhooks/stripe`;
      const ok = stripeEvent('evt_m1');
      await post(url, ok, stripeHeaders(ok));
      await post(url, ok, stripeHeaders(ok));
      await post(url, ok, stripeHeaders(ok, 'whsec_wrong'));
      await post(url, ok, stripeHeaders(ok, STRIPE_SECRET, Math.floor(Date.now() / 1000) - 3600));
      const other = stripeEvent('evt_m2', { type: 'charge.refunded' });
      await post(url, other, stripeHeaders(other));
      const m = (await post(`${t.app.url}/metrics`, '', {}, 'GET')).text;
      for (const [outcome, n] of [['accepted', 1], ['duplicate', 1], ['invalid_signature', 1], ['stale', 1], ['unsupported', 1]] as const) {
        expect(m).toContain(`webhook_requests_total{endpoint="stripe",outcome="${outcome}"} ${n}`);
      }
      expect(m).toContain('webhook_secret_version_matches_total{endpoint="stripe",version="v1"} 3');
      // Ack latency by outcome too: a flood of fast 401s must not hide slow accepts in the quantiles.
      for (const outcome of ['accepted', 'duplicate', 'invalid_signature', 'stale', 'unsupported']) {
        expect(m).toContain(`webhook_ack_latency_seconds_count{endpoint="stripe",outcome="${outcome}"} 1`);
      }
      expect(m).toMatch(/webhook_db_commit_latency_seconds_count \d+/);
      expect(m).toMatch(/webhook_commit_batch_size_bucket\{le="1"\} \d+/);
      expect(m).toContain('webhook_commit_queue_depth 0');
      expect(m).toContain('webhook_inflight_body_bytes 0');
      expect(m).not.toContain(STRIPE_SECRET);
    } finally {
      await t.stop();
    }
  });

  it('/metrics shows how long the event loop was blocked since the previous scrape', async () => {
    const t = await appWithLog({});
    try {
      const loopDelay = async () => {
        const m = (await post(`${t.app.url}/metrics`, '', {}, 'GET')).text;
        const stat = (s: string) => Number(new RegExp(`^webhook_event_loop_delay_seconds\\{stat="${s}"\\} (\\S+)$`, 'm').exec(m)?.[1]);
        return { p50: stat('p50'), p99: stat('p99'), max: stat('max') };
      };
      await new Promise((r) => setTimeout(r, 50));
      await loopDelay(); // starts a fresh window
      await new Promise((r) => setTimeout(r, 50)); // (the first sample after a reset only sets its baseline)
      // The app shares this process's loop: block it the way a 1 MiB JSON.parse would, only longer.
      const until = performance.now() + 300;
      while (performance.now() < until);
      await new Promise((r) => setTimeout(r, 30));
      const blocked = await loopDelay();
      expect(blocked.max).toBeGreaterThanOrEqual(0.25);
      expect(blocked.p50).toBeLessThanOrEqual(blocked.max);
      await new Promise((r) => setTimeout(r, 50));
      // The scrape reset the window: the 300 ms stall is no longer in it.
      expect((await loopDelay()).max).toBeLessThan(0.25);
    } finally {
      await t.stop();
    }
  });

  // The sampler records the time between its ticks, every 10 ms: an idle loop read as 10 ms of
  // delay on every answer, and every real delay 10 ms longer than it was.
  it('an idle event loop reads as next to no delay, not as the 10 ms sampling interval', async () => {
    const t = await appWithLog({});
    try {
      const scrapeText = async () => (await post(`${t.app.url}/metrics`, '', {}, 'GET')).text;
      await scrapeText(); // starts a fresh window
      await new Promise((r) => setTimeout(r, 300));
      const m = await scrapeText();
      const p50 = Number(/^webhook_event_loop_delay_seconds\{stat="p50"\} (\S+)$/m.exec(m)?.[1]);
      expect(p50).toBeGreaterThanOrEqual(0);
      expect(p50).toBeLessThan(0.008);
    } finally {
      await t.stop();
    }
  });

  it('a failing /metrics render answers 503 and is logged with its cause; the app keeps serving', async () => {
    const t = await appWithLog({});
    try {
      t.app.metrics.registry.render = () => { throw new Error('render broke'); };
      const m = await post(`${t.app.url}/metrics`, '', {}, 'GET');
      expect(m.status).toBe(503);
      expect(m.json()).toEqual({ error: 'metrics_unavailable' });
      const line = t.lines.map((l) => JSON.parse(l) as { msg?: string; path?: string; level?: number; err?: { message?: string } })
        .find((l) => l.msg === 'operational endpoint failed');
      expect(line).toMatchObject({ path: '/metrics', level: 50, err: { message: 'render broke' } });
      expect((await post(`${t.app.url}/healthz`, '', {}, 'GET')).status).toBe(200);
    } finally {
      await t.stop();
    }
  });

  // After listening, a server 'error' is an accept failure (EMFILE: out of file descriptors). The
  // listen's one-off listener stayed attached and swallowed it: the operator never heard of it.
  it('a server error after listening (an accept failure) is logged, and the app keeps serving', async () => {
    const t = await appWithLog({});
    try {
      const err = Object.assign(new Error('accept EMFILE'), { code: 'EMFILE', syscall: 'accept' });
      t.app.server.emit('error', err);
      const line = t.lines.map((l) => JSON.parse(l) as { msg?: string; level?: number; err?: { message?: string } })
        .find((l) => l.err?.message === 'accept EMFILE');
      expect(line).toMatchObject({ level: 50, msg: 'HTTP server error (the server goes on)' });
      const body = stripeEvent('evt_after_emfile');
      expect((await post(`${t.app.url}/webhooks/stripe`, body, stripeHeaders(body))).status).toBe(200);
    } finally {
      await t.stop();
    }
  });
});
