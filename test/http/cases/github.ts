import { randomUUID } from 'node:crypto';
import { PROVIDERS } from '../../../src/providers/registry.js';
import { fields, rotation, type Case, type Secrets } from './types.js';

const SECRETS: Secrets = { v2: 'github-current-v2', v1: 'github-previous-v1', v0: 'github-retired-v0' };
export const GITHUB_HOOK_ID = '1001';

export const githubCase: Case = {
  name: 'github', endpoint: 'github', adapter: PROVIDERS.github!(undefined, 'x'), secrets: SECRETS, tolerance: null, signatureHeader: 'x-hub-signature-256', json: true,
  config: { id: 'github', provider: 'github', secrets: rotation(SECRETS) },
  make(text = 'plain', type = 'issues', objectId = '1') {
    const guid = randomUUID();
    const body = `{\n  "action": "opened",\n  "issue": {"number": 1, ${fields(text)}},\n  "repository": {"id": ${JSON.stringify(objectId)}, "full_name": "octo-org/octo-repo"}\n}\n`;
    return {
      body: Buffer.from(body, 'utf8'),
      headers: { 'content-type': 'application/json', 'x-github-event': type, 'x-github-delivery': guid, 'x-github-hook-id': GITHUB_HOOK_ID },
      signOpts: {}, key: `${GITHUB_HOOK_ID}:${guid}`, type,
    };
  },
  changeId: () => null,
  changeTimestamp: () => null,
};
