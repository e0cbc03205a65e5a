import { randomUUID } from 'node:crypto';
import { PROVIDERS } from '../../../src/providers/registry.js';
import { bumpTimestamp, fields, rotation, type Case, type Secrets } from './types.js';

/**
 * GitLab in signing-token mode (Standard Webhooks v1: id, timestamp and body signed). The plain
 * `X-Gitlab-Token` mode signs nothing, so the shared tamper tests cannot hold for it: its HTTP
 * tests live in test/providers/gitlab.test.ts.
 */
const SECRETS: Secrets = {
  v2: 'whsec_' + Buffer.alloc(32, 0x32).toString('base64'),
  v1: 'whsec_' + Buffer.alloc(32, 0x31).toString('base64'),
  v0: 'whsec_' + Buffer.alloc(32, 0x30).toString('base64'),
};
const OPTIONS = { mode: 'signing' };

export const gitlabCase: Case = {
  name: 'gitlab', endpoint: 'gitlab', adapter: PROVIDERS.gitlab!(OPTIONS, 'x'), secrets: SECRETS, tolerance: 300, signatureHeader: 'webhook-signature', json: true,
  config: { id: 'gitlab', provider: 'gitlab', secrets: rotation(SECRETS), options: OPTIONS },
  make(text = 'plain', type = 'issue', objectId = '301') {
    const id = randomUUID();
    const body = `{"object_kind": "${type}", "event_type": "${type}", "project": {"id": 1, "path_with_namespace": "gitlabhq/gitlab-test"},\n "object_attributes": {"id": ${JSON.stringify(objectId)}, "updated_at": "2013-12-03T17:15:43Z", ${fields(text)}}}`;
    return {
      body: Buffer.from(body, 'utf8'),
      headers: { 'content-type': 'application/json', 'x-gitlab-event': 'Issue Hook', 'x-gitlab-event-uuid': randomUUID(), 'idempotency-key': id },
      signOpts: { id }, key: id, type, objectId,
    };
  },
  changeId: (m, headers) => ({ body: m.body, headers: { ...headers, 'webhook-id': randomUUID() } }),
  changeTimestamp: (h) => ({ ...h, 'webhook-timestamp': bumpTimestamp(h['webhook-timestamp']!) }),
};
