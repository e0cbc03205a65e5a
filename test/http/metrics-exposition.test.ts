import { afterAll, beforeAll, expect, it } from 'vitest';
import { startTestApp, STRIPE_SECRET, type TestApp } from '../helpers/app.js';
import { stripeEvent, stripeHeaders } from '../helpers/events.js';
import { waitFor } from '../helpers/engine.js';
import { post, rawExchange } from '../helpers/http.js';
import { describeEachStore } from '../helpers/stores.js';
import { EXPOSITION_CONTENT_TYPE, parseExposition } from '../helpers/exposition.js';
import { HandlerRegistry } from '../../src/engine/handlers.js';
import { NeedsDecisionError, RetryableError } from '../../src/engine/failure.js';

const WEIRD_TYPE = 'odd"type\\with\nnewline} x 1\r';

describeEachStore('/metrics is valid Prometheus text under real traffic', (kind) => {
  let app: TestApp;
  let port: number;
  beforeAll(async () => {
    const handlers = new HandlerRegistry()
      .on('ok.*', () => undefined)
      .on('fail.*', () => { throw new NeedsDecisionError('unknown_object', 'no such object'); })
      .on('odd*', () => { throw new RetryableError('try_later', 'not yet'); });
    app = await startTestApp(kind, {
      endpoints: [{ id: 'stripe', provider: 'stripe', secrets: [{ version: 'v"1\\', value: STRIPE_SECRET }] }],
      workers: { pollMs: 20 },
    }, {}, { workers: true, handlers });
    port = Number(new URL(app.url).port);
  });
  afterAll(async () => {
    await app?.stop();
  });

  it('every line parses; HELP/TYPE once per family; label values escaped; histograms cumulative; counters _total', async () => {
    const url = `${app.url}/webhooks/stripe`;
    for (const [id, type] of [['evt_ok', 'ok.done'], ['evt_fail', 'fail.done'], ['evt_odd', WEIRD_TYPE]] as const) {
      const body = stripeEvent(id, { type });
      expect((await post(url, body, stripeHeaders(body))).status).toBe(200);
    }
    const dup = stripeEvent('evt_ok', { type: 'ok.done' });
    await post(url, dup, stripeHeaders(dup));
    await post(url, dup, stripeHeaders(dup, 'whsec_wrong'));
    await post(`${app.url}/webhooks/no"such\\endpoint`, dup, stripeHeaders(dup));
    await post(url, '', {}, 'GET');
    await rawExchange(port, 'NOT HTTP\r\n\r\n');
    await waitFor(async () => {
      const t = await scrapeText();
      return ['success', 'failed', 'retry'].every((r) => t.includes(`webhook_worker_attempts_total{result="${r}"`));
    }, 10_000, 'a success, a failure and a retry');

    const text = await scrapeText();
    const families = parseExposition(text);
    // The event type with a quote, a backslash and a newline came through as one label value.
    const oldest = families.get('webhook_inbox_oldest_unprocessed_age_seconds')!.samples;
    expect(oldest.map((s) => s.labels.type)).toContain(WEIRD_TYPE);
    expect(families.get('webhook_secret_version_matches_total')!.samples.map((s) => s.labels.version)).toEqual(['v"1\\']);
    // The one event its handler failed for good (fail.done), counted by status.
    expect(families.get('webhook_inbox_rows')!.samples.find((s) => s.labels.status === 'FAILED')?.value).toBe(1);
    // The unknown endpoint's id is not a label value: one `(unknown)` series.
    const endpoints = new Set(families.get('webhook_requests_total')!.samples.map((s) => s.labels.endpoint));
    expect(endpoints).toEqual(new Set(['stripe', '(unknown)', '(unparsed)']));
    for (const name of ['webhook_ack_latency_seconds', 'webhook_db_commit_latency_seconds', 'webhook_commit_batch_size', 'webhook_processing_latency_seconds']) {
      expect(families.get(name)?.type, name).toBe('histogram');
    }
  });

  async function scrapeText(): Promise<string> {
    const r = await post(`${app.url}/metrics`, '', {}, 'GET');
    expect(r.status).toBe(200);
    expect(r.headers['content-type']).toBe(EXPOSITION_CONTENT_TYPE);
    return r.text;
  }
});

describeEachStore('/metrics before anything happened', (kind) => {
  it('the counters and histograms without labels are there at 0, so an alert on their increase has a series to read', async () => {
    const app = await startTestApp(kind);
    try {
      const r = await post(`${app.url}/metrics`, '', {}, 'GET');
      const families = parseExposition(r.text);
      // The families without labels (the README's list); each has its series at 0 before any event.
      for (const name of ['webhook_commit_failures_total', 'webhook_listener_lost_total', 'webhook_db_commit_latency_seconds', 'webhook_commit_batch_size']) {
        const f = families.get(name);
        expect(f?.samples.length, name).toBeGreaterThan(0);
        for (const sample of f!.samples) expect(sample.value, `${sample.name} ${JSON.stringify(sample.labels)}`).toBe(0);
      }
    } finally {
      await app.stop();
    }
  });

  // A labelled series that first appears at its first increment hides that increment from
  // increase()/rate() (there is no earlier sample to compare with): after a restart, the first
  // burst of 503s or bad signatures on an endpoint never showed in an alert on their increase.
  // The endpoints, outcomes and secret versions are all known at start, so their series start at 0.
  it("each configured endpoint's request outcomes and secret versions are there at 0", async () => {
    const app = await startTestApp(kind, {
      endpoints: [{ id: 'stripe', provider: 'stripe', secrets: [{ version: 'v2', value: 'whsec_new' }, { version: 'v1', value: STRIPE_SECRET }] }],
    });
    try {
      const families = parseExposition((await post(`${app.url}/metrics`, '', {}, 'GET')).text);
      const requests = families.get('webhook_requests_total')!.samples;
      for (const outcome of ['accepted', 'duplicate', 'invalid_signature', 'stale', 'oversized', 'unsupported', 'malformed', 'rate_limited', 'unavailable', 'rejected']) {
        expect(requests.find((s) => s.labels.endpoint === 'stripe' && s.labels.outcome === outcome)?.value, outcome).toBe(0);
      }
      const versions = families.get('webhook_secret_version_matches_total')!.samples;
      expect(versions.map((s) => [s.labels.endpoint, s.labels.version, s.value])).toEqual([['stripe', 'v2', 0], ['stripe', 'v1', 0]]);
      // So are the two series of requests that name no configured endpoint, with the outcomes they can have:
      // a scan for unknown endpoint ids, or a burst of malformed HTTP, right after a restart shows in increase().
      const placeholders = requests.filter((s) => s.labels.endpoint!.startsWith('(')).map((s) => [s.labels.endpoint, s.labels.outcome, s.value]);
      expect(placeholders).toEqual(expect.arrayContaining([['(unknown)', 'rejected', 0], ['(unparsed)', 'malformed', 0], ['(unparsed)', 'rejected', 0]]));
    } finally {
      await app.stop();
    }
  });
});
