import { PROVIDERS } from '../../../src/providers/registry.js';
import type { CertFetcher } from '../../../src/providers/paypal.js';
import { certId, isoSeconds, makeCert } from '../../helpers/paypal.js';
import { fields, rotation, uid, type Case, type Secrets } from './types.js';

/**
 * PayPal in the shared suite. The "secrets" are webhook ids; PayPal's private key is a throwaway
 * one (openssl, at import), its certificate handed over by an in-process fetcher — the download path
 * itself (TLS, cache, failures → 503) is tested in test/providers/paypal.test.ts.
 */
const SECRETS: Secrets = { v2: 'WHCURRENT2PAYPAL', v1: 'WHPREVIOUS1PAYPAL', v0: 'WHRETIRED0PAYPAL' };
const CERT_URL = `https://api.sandbox.paypal.com/v1/notifications/certs/${certId('http-suite')}`;
const signing = makeCert();
const certFetcher: CertFetcher = async (url) => {
  if (url.href !== CERT_URL) throw new Error(`unexpected certificate URL ${url.href}`);
  return signing.certPem;
};
const options = { certFetcher, signer: { privateKey: signing.privateKey, certUrl: CERT_URL } };

export const paypalCase: Case = {
  name: 'paypal', endpoint: 'paypal', adapter: PROVIDERS.paypal!(options, 'x'), secrets: SECRETS, tolerance: 4 * 24 * 3600, signatureHeader: 'paypal-transmission-sig', json: true,
  config: { id: 'paypal', provider: 'paypal', secrets: rotation(SECRETS), options },
  make(text = 'plain', type = 'PAYMENT.CAPTURE.COMPLETED', objectId) {
    const id = `WH-${uid().slice(0, 17).toUpperCase()}-${uid().slice(0, 17).toUpperCase()}`;
    const obj = objectId ?? `CAP${uid().slice(0, 14).toUpperCase()}`;
    const body = `{"id":"${id}","event_version":"1.0","create_time":"2024-05-01T10:00:00.000Z","resource_type":"capture","event_type":"${type}",`
      + `"resource":{"id":"${obj}","status":"COMPLETED","update_time":"2024-05-01T09:59:58Z", ${fields(text)}}}`;
    return { body: Buffer.from(body, 'utf8'), headers: { 'content-type': 'application/json' }, signOpts: {}, key: id, type, objectId: obj };
  },
  changeId: (m, headers) => ({ body: Buffer.from(m.body.toString('utf8').replace(m.key, `WH-${uid().slice(0, 17).toUpperCase()}`), 'utf8'), headers }),
  changeTimestamp: (h) => ({ ...h, 'paypal-transmission-time': isoSeconds(Date.parse(h['paypal-transmission-time']!) + 1000) }),
};
