/** The ProviderConfig (+ Secret) YAML that points the provider at the simulated sites. */
import { stringify } from 'yaml';
import type { Simulator } from './index.ts';

export function providerConfigYaml(sim: Simulator, opts: { name?: string; namespace?: string } = {}): string {
  const name = opts.name ?? 'default';
  const namespace = opts.namespace ?? 'crossplane-system';
  const token = sim.credentials.tokens[0];
  const secret = {
    apiVersion: 'v1',
    kind: 'Secret',
    metadata: { name: 'proxmox-credentials', namespace },
    type: 'Opaque',
    stringData: token
      ? { tokenid: token.tokenid, token: token.secret }
      : { username: 'root@pam', password: sim.credentials.rootPassword },
  };
  const config = {
    apiVersion: 'proxmox.sankofa.io/v1alpha1',
    kind: 'ClusterProviderConfig',
    metadata: { name },
    spec: {
      credentials: { source: 'Secret', secretRef: { name: 'proxmox-credentials', namespace } },
      sites: sim.clusters.map((c) => ({
        name: c.name,
        endpoints: [c.url],
        nodes: c.nodes,
        ...(c.tls ? { tls: { fingerprint: c.fingerprint } } : {}),
      })),
    },
  };
  return `${stringify(secret)}---\n${stringify(config)}`;
}
