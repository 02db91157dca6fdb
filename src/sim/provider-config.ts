/**
 * The ProviderConfig (+ Secrets) YAML that points the provider at the simulated sites. Unless
 * `ssh: false`, each site also gets its SSH section (user, the Secret holding the simulator's
 * client key, the nodes' host key fingerprints and their endpoints) and the stream a second
 * Secret, `proxmox-ssh`, for cloud-init snippets uploaded over SFTP.
 */
import { stringify } from 'yaml';
import type { Simulator } from './index.ts';

export interface ProviderConfigOptions {
  name?: string;
  namespace?: string;
  /** Add `spec.sites[].ssh` and the `proxmox-ssh` Secret (default true; false: a site without SSH). */
  ssh?: boolean;
}

export const SSH_SECRET_NAME = 'proxmox-ssh';

export function providerConfigYaml(sim: Simulator, opts: ProviderConfigOptions = {}): string {
  const name = opts.name ?? 'default';
  const namespace = opts.namespace ?? 'crossplane-system';
  const withSsh = opts.ssh !== false && Boolean(sim.credentials.sshPrivateKey);
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
  const sshSecret = {
    apiVersion: 'v1',
    kind: 'Secret',
    metadata: { name: SSH_SECRET_NAME, namespace },
    type: 'Opaque',
    stringData: { privateKey: sim.credentials.sshPrivateKey },
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
        ...(withSsh
          ? {
              ssh: {
                user: sim.credentials.sshUser,
                secretRef: { name: SSH_SECRET_NAME, namespace },
                hostKeys: c.sshNodes().map((n) => n.hostKeyFingerprint),
                nodes: c.sshNodes().map((n) => ({ name: n.node, host: n.host, port: n.port })),
              },
            }
          : {}),
      })),
    },
  };
  const docs = [secret, ...(withSsh ? [sshSecret] : []), config];
  return docs.map((d) => stringify(d)).join('---\n');
}
