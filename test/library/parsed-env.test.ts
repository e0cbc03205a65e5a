import pino from 'pino';
import { afterEach, beforeEach, expect, it } from 'vitest';
import { parseConfig, startApp, startWorkers } from '../../src/index.js';
import { configDoc, PAYLOAD_KEY, STRIPE_SECRET } from '../helpers/app.js';
import { stripeEvent, stripeHeaders } from '../helpers/events.js';
import { post } from '../helpers/http.js';
import { describeEachStore, freshDatabase, type TestDatabase } from '../helpers/stores.js';

/**
 * A library caller that parses its config with its own env (parseConfig(doc, env): the
 * `${env:}` references are checked there) and starts it without repeating the env must get its
 * secrets from that env, not from process.env, which does not have them.
 */
const SECRET_VAR = 'WI_TEST_PARSED_ENV_STRIPE_SECRET';
const KEY_VAR = 'WI_TEST_PARSED_ENV_PAYLOAD_KEY';

describeEachStore('library: startApp / startWorkers without opts.env read secrets from the env the config was parsed with', (kind) => {
  let db: TestDatabase;
  const logger = pino({ level: 'silent' });
  beforeEach(async () => {
    expect(process.env[SECRET_VAR]).toBeUndefined();
    expect(process.env[KEY_VAR]).toBeUndefined();
    db = await freshDatabase(kind);
  });
  afterEach(() => db.cleanup());

  const parse = () => parseConfig(configDoc(db.url, {
    payloadKeys: { current: 'k1', keys: { k1: `\${env:${KEY_VAR}}` } },
    endpoints: [{ id: 'stripe', provider: 'stripe', secrets: [{ version: 'v1', value: `\${env:${SECRET_VAR}}` }] }],
  }), { [SECRET_VAR]: STRIPE_SECRET, [KEY_VAR]: PAYLOAD_KEY });

  it('startApp accepts a signed event (it answered 503 secrets_unavailable)', async () => {
    const app = await startApp(parse(), { logger, workers: false });
    try {
      expect(app.keyring.problems).toEqual([]);
      const body = stripeEvent('evt_parsed_env_1');
      const res = await post(`${app.url}/webhooks/stripe`, body, stripeHeaders(body));
      expect(res.status, res.text).toBe(200);
      expect(res.json().duplicate).toBe(false);
    } finally {
      await app.close();
    }
  });

  it('startWorkers loads every secret', async () => {
    const workers = await startWorkers(parse(), { logger });
    try {
      expect(workers.keyring.problems).toEqual([]);
    } finally {
      await workers.stop();
    }
  });
});
