/** A PveClient for one site of a ProviderConfig: endpoints, TLS, and the credentials from its Secret. */
import type { Site } from '../api/provider-config.ts';
import type { LoadedProviderConfig } from '../api/provider-config-load.ts';
import { findSite, siteConcurrency, siteFingerprints, siteSecret } from '../api/provider-config-site.ts';
import { type Credentials, credentialsFromSecretData } from './auth.ts';
import { PveClient } from './client.ts';
import type { PveClientOptions } from './client-core.ts';
import type { TlsSettings } from './tls.ts';

export function siteTls(site: Site): TlsSettings {
  const fps = siteFingerprints(site);
  return {
    ...(fps.length ? { fingerprints: fps } : {}),
    ...(site.tls?.caBundle ? { caBundle: site.tls.caBundle } : {}),
    ...(site.tls?.insecureSkipTLSVerify ? { insecureSkipVerify: true } : {}),
  };
}

export function siteCredentials(loaded: LoadedProviderConfig, siteName: string): Credentials {
  const s = siteSecret(loaded, siteName);
  return credentialsFromSecretData(s.data, `Secret ${s.namespace}/${s.name} (${s.file}${s.line ? `:${s.line}` : ''})`);
}

export type SiteClientOptions = Omit<PveClientOptions, 'site' | 'endpoints' | 'credentials' | 'tls'> & {
  credentials?: Credentials;
};

/**
 * A client for `siteName`; credentials come from the site's Secret unless given. The site's
 * `concurrency.requests` caps the keep-alive connections (so the requests in flight) per endpoint.
 */
export function clientForSite(loaded: LoadedProviderConfig, siteName: string, opts: SiteClientOptions = {}): PveClient {
  const site = findSite(loaded.config, siteName);
  const credentials = opts.credentials ?? siteCredentials(loaded, siteName);
  return new PveClient({
    connectionsPerEndpoint: siteConcurrency(loaded.config, site).requests,
    ...opts,
    site: site.name,
    endpoints: site.endpoints,
    credentials,
    tls: siteTls(site),
  });
}
