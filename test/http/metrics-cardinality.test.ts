import { afterAll, beforeAll, expect, it } from 'vitest';
import { startTestApp, type TestApp } from '../helpers/app.js';
import { post } from '../helpers/http.js';
import { scrape } from '../helpers/metric-samples.js';
import { describeEachStore } from '../helpers/stores.js';
import { PROVIDERS } from '../../src/providers/registry.js';

/**
 * webhook_inbox_oldest_unprocessed_age_seconds{endpoint,type} had one series per event type
 * waiting in the inbox, however many. On GitHub the type is the X-GitHub-Event header, which
 * GitHub does not sign, and neither the delivery GUID (docs/providers/github.md): anyone holding
 * one captured delivery can re-post its body under new GUIDs and any type names, each a new
 * PENDING row, and each type a new series in every scrape (a scrape past the scraper's
 * sample_limit is dropped whole). The series per endpoint are now bounded: its oldest types,
 * the rest folded into type="(other)" with their oldest age, so `max by (endpoint)` is unchanged.
 */
const SECRET = 'github-webhook-secret';
const github = PROVIDERS.github!(undefined, 'test');
const GAUGE = 'webhook_inbox_oldest_unprocessed_age_seconds';
const TYPES = 140;
const MAX_SERIES_PER_ENDPOINT = 101; // the 100 oldest types and (other)

describeEachStore('queue gauge series stay bounded whatever event types a sender makes up', (kind) => {
  let app: TestApp;
  beforeAll(async () => {
    app = await startTestApp(kind, {
      endpoints: [
        { id: 'gh', provider: 'github', secrets: [{ version: 'v1', value: SECRET }] },
      ],
    });
  });
  afterAll(async () => {
    await app?.stop();
  });

  it(`one captured delivery replayed under ${TYPES} made-up X-GitHub-Event names: at most ${MAX_SERIES_PER_ENDPOINT} series, the oldest age kept`, async () => {
    const body = Buffer.from(JSON.stringify({ zen: 'Keep it logically awesome.', hook_id: 1, repository: { id: 1, full_name: 'octo-org/octo-repo' } }));
    const signed = github.sign(body, SECRET, {});
    for (let i = 0; i < TYPES; i++) {
      const headers = {
        'content-type': 'application/json', ...signed,
        'x-github-event': `made_up_${String(i).padStart(4, '0')}`, 'x-github-delivery': `00000000-0000-4000-8000-${String(i).padStart(12, '0')}`,
      };
      const r = await post(`${app.url}/webhooks/gh`, body, headers);
      expect(r.status, r.text).toBe(200);
    }
    const samples = await scrape(app.url);
    const series = [...samples.entries()].filter(([k]) => k.startsWith(`${GAUGE}{endpoint="gh",`));
    expect(series.length).toBeLessThanOrEqual(MAX_SERIES_PER_ENDPOINT);
    // The first type posted is the oldest: it keeps its own series, and no series is older.
    const first = samples.get(`${GAUGE}{endpoint="gh",type="made_up_0000"}`);
    expect(first).toBeDefined();
    expect(Math.max(...series.map(([, v]) => v))).toBe(first);
    expect(samples.get('webhook_inbox_rows{status="PENDING"}')).toBe(TYPES);
  });
});
