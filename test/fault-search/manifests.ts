/**
 * What the fault search's users write and apply: the two sites of the default topology with their
 * nodes, the resources a schedule names and how each is made, the part of a spec a user edits
 * (size, power state, site, replace policy), the manifest that results, and the ProviderConfig the provider
 * processes read (token credentials for both sites, or root@pam's password on site-1).
 */
import { readFileSync } from 'node:fs';
import { parseAllDocuments, parse as parseYaml, stringify } from 'yaml';
import type { LoadedProviderConfig } from '../../src/api/provider-config-load.ts';
import { parseProviderConfig } from '../../src/api/provider-config-load.ts';
import type { ForProvider, ProxmoxVM } from '../../src/api/proxmoxvm.ts';
import type { Simulator } from '../../src/sim/index.ts';
import { providerConfigYaml } from '../../src/sim/provider-config.ts';
import { parseTopology, type Topology } from '../../src/sim/topology.ts';
import { ROOT_PASSWORD } from '../helpers/sim.ts';

/** The default topology's clusters, each with its one node (src/sim/default-topology.yaml). */
export const SITES = ['site-1', 'site-2'] as const;
export type SiteName = (typeof SITES)[number];
export const NODE_OF: Record<SiteName, string> = { 'site-1': 'ml110-01', 'site-2': 'r630-01' };
export const SITE: SiteName = 'site-1';
export const NODE = NODE_OF[SITE];
export const TEMPLATE_VMID = 9000;
/**
 * Site-2's nodes in the fourth search's topology (nodeTopology): a VM's node there is drawn with
 * its edits, so schedules migrate VMs between the two inside the cluster (`qm migrate`).
 */
export const SITE2_NODES = ['r630-01', 'r630-02'] as const;
export type Site2Node = (typeof SITE2_NODES)[number];

/**
 * The default topology with a second node on site-2 (r630-02: its own `local` with the import
 * images and snippets, its own `local-lvm`, and the shared `ceph-fs`), the template's disk on
 * `ceph-fs` so that either node can clone it (qemu-server refuses a clone to another node of a
 * VM on local storage). Two nodes of three would keep quorum with one down; no node goes down
 * here, so two are enough: every node answers, and moves between them are what is searched.
 */
export function nodeTopology(): Topology {
  const file = new URL('../../src/sim/default-topology.yaml', import.meta.url);
  const doc = parseYaml(readFileSync(file, 'utf8')) as {
    clusters: Array<{ name: string; nodes: Array<Record<string, unknown>> }>;
  };
  const site2 = doc.clusters.find((c) => c.name === 'site-2')!;
  const first = site2.nodes[0]!;
  const vms = first.vms as Array<{ disk: { storage: string } }>;
  for (const vm of vms) vm.disk.storage = 'ceph-fs';
  const { vms: _templates, ...hardware } = first;
  site2.nodes.push({
    ...structuredClone(hardware),
    name: SITE2_NODES[1],
    bridges: [
      {
        name: 'vmbr0',
        cidr: '203.0.113.12/24',
        gateway: '203.0.113.1',
        // Its own addresses: one network, one DHCP range a node.
        dhcp: '203.0.113.50-203.0.113.99',
      },
    ],
  });
  return parseTopology(stringify(doc), 'fault-search-nodes.yaml');
}

/** The resources a schedule can name, each with its creation path (import an image or clone the template). */
export const NAMES = ['vm-a', 'vm-b', 'vm-c'] as const;
export type Name = (typeof NAMES)[number];
const SOURCE: Record<Name, Partial<ForProvider>> = {
  'vm-a': { image: 'local:import/ubuntu-22.04-cloud.qcow2' },
  'vm-b': { template: { vmid: TEMPLATE_VMID, full: true } },
  // More than the API can set: a cloud-init snippet, uploaded over SSH before the create.
  'vm-c': {
    image: 'local:import/ubuntu-22.04-cloud.qcow2',
    userData: '#cloud-config\npackages: [qemu-guest-agent, jq]\nruncmd: [systemctl enable --now qemu-guest-agent]\n',
  },
};
export const keyOfName = (n: Name): string => `default/${n}`;

/** What a user may change in a resource's spec: its size, power state and site (with that site's node, or the one drawn). */
export interface Edit {
  cpu: 1 | 2;
  memory: '1Gi' | '2Gi';
  powerState?: 'running' | 'stopped';
  /** site-1 when not given. */
  site?: SiteName;
  /** Its node on site-2 (the fourth search draws it); the site's first node when not given or on site-1. */
  node?: Site2Node;
  /** A move no remote migration can make replaces the VM (a new one, then the old destroyed): data lost by choice. */
  replacePolicy?: 'CreateThenDelete';
  /**
   * scsi0's size; 8Gi when not given. 10.4Gi is no whole GiB: the disk is grown to the next one
   * up, once (rounded to the nearest, it was resized for ever); back to 8Gi, the shrink is refused.
   */
  disk?: '10.4Gi';
}

export function manifest(name: Name, edit: Edit): ProxmoxVM {
  return {
    apiVersion: 'proxmox.sankofa.io/v1alpha1',
    kind: 'ProxmoxVM',
    metadata: { name, namespace: 'default', uid: '', generation: 1 },
    spec: {
      forProvider: {
        site: edit.site ?? SITE,
        node: edit.site === 'site-2' && edit.node ? edit.node : NODE_OF[edit.site ?? SITE],
        cpu: edit.cpu,
        memory: edit.memory,
        disk: edit.disk ?? '8Gi',
        storage: 'local-lvm',
        network: 'vmbr0',
        ...SOURCE[name],
        ...(edit.powerState ? { powerState: edit.powerState } : {}),
        ...(edit.replacePolicy ? { replacePolicy: edit.replacePolicy } : {}),
      },
      providerConfigRef: { name: 'default' },
    },
  };
}

/**
 * The ProviderConfig for the simulator: its test token for both sites, or site-1 as root@pam with a
 * password (a ticket: may unlock) and site-2 with the token. A remote migration authenticates to
 * its target with an API token only, so with `password` a move to site-1 is refused (with the fix)
 * and a move to site-2 is made: both paths are searched.
 */
export function simConfig(sim: Simulator, auth: 'password' | 'token'): LoadedProviderConfig {
  let text = providerConfigYaml(sim, { ssh: true });
  if (auth === 'password') {
    type Doc = {
      kind?: string;
      metadata: { name: string; namespace?: string };
      stringData?: Record<string, string>;
      spec: { sites: Array<{ name: string; credentialsSecretRef?: { name: string; namespace?: string } }> };
    };
    const docs = parseAllDocuments(text).map((d) => d.toJS() as Doc);
    const secret = docs.find((d) => d.kind === 'Secret')!;
    const token = { ...secret.stringData };
    secret.stringData = { username: 'root@pam', password: ROOT_PASSWORD };
    const ns = secret.metadata.namespace;
    docs.unshift({ ...secret, metadata: { name: 'site-2-token', namespace: ns }, stringData: token });
    const config = docs.find((d) => d.kind === 'ClusterProviderConfig')!;
    const site2 = config.spec.sites.find((x) => x.name === 'site-2')!;
    site2.credentialsSecretRef = { name: 'site-2-token', ...(ns ? { namespace: ns } : {}) };
    text = docs.map((d) => stringify(d)).join('---\n');
  }
  return parseProviderConfig(text, 'fault-search.yaml');
}
