/**
 * What the controller needs from the Kubernetes API server: the RBAC rules deploy/rbac.yaml and
 * the Helm chart grant (test/api/deploy.test.ts checks they cover this list and no more).
 */
import { GROUP } from './proxmoxvm.ts';

export interface Permission {
  apiGroup: string;
  resources: string[];
  verbs: string[];
  /** cluster: a ClusterRole; namespace: a Role in the controller's namespace. */
  scope: 'cluster' | 'namespace';
  why: string;
}

const OWN_KINDS_PLURALS = [
  'proxmoxvms',
  'proxmoxvmscalesets',
  'proxmoximages',
  'proxmoxtemplates',
  'providerconfigs',
  'clusterproviderconfigs',
];

/**
 * The least the controller needs (deploy/rbac.yaml and the Helm chart implement it; test/api/deploy.test.ts
 * checks they cover it). Keep in step with src/kube.
 */
export const CONTROLLER_PERMISSIONS: readonly Permission[] = [
  {
    apiGroup: GROUP,
    resources: OWN_KINDS_PLURALS,
    verbs: ['get', 'list', 'watch', 'update', 'patch'],
    scope: 'cluster',
    why: 'watch the resources; finalizers, external-name and create annotations; in-use finalizer on provider configs',
  },
  {
    apiGroup: GROUP,
    resources: ['proxmoxvms'],
    verbs: ['create', 'delete'],
    scope: 'cluster',
    why: 'a scale set creates and deletes its ProxmoxVMs',
  },
  {
    apiGroup: GROUP,
    resources: OWN_KINDS_PLURALS.map((r) => `${r}/status`),
    verbs: ['get', 'update', 'patch'],
    scope: 'cluster',
    why: 'conditions and atProvider through the status subresource',
  },
  {
    apiGroup: GROUP,
    resources: ['proxmoxvms/finalizers', 'proxmoxvmscalesets/finalizers'],
    verbs: ['update'],
    scope: 'cluster',
    why: 'owner references with blockOwnerDeletion (usages, connection Secrets, scale set replicas) under OwnerReferencesPermissionEnforcement',
  },
  {
    apiGroup: GROUP,
    resources: ['providerconfigusages', 'clusterproviderconfigusages'],
    verbs: ['get', 'list', 'watch', 'create', 'update', 'delete'],
    scope: 'cluster',
    why: 'track which resources use which provider config',
  },
  {
    apiGroup: '',
    resources: ['events'],
    verbs: ['create', 'patch'],
    scope: 'cluster',
    why: 'an Event for every condition change (core/v1 Events)',
  },
  {
    apiGroup: 'events.k8s.io',
    resources: ['events'],
    verbs: ['create', 'patch'],
    scope: 'cluster',
    why: 'the same Events through events.k8s.io/v1',
  },
  {
    apiGroup: '',
    resources: ['secrets'],
    verbs: ['get'],
    scope: 'cluster',
    why: 'read the credentials Secrets a provider config names',
  },
  {
    apiGroup: '',
    resources: ['secrets'],
    verbs: ['create', 'update', 'delete'],
    scope: 'cluster',
    why: 'write connection Secrets (writeConnectionSecretToRef)',
  },
  {
    apiGroup: '',
    resources: ['namespaces'],
    verbs: ['get'],
    scope: 'cluster',
    why: "the uid of kube-system (resourceNames: kube-system only) names the cluster's installation, k8s-<uid>; read once at start, not needed with --installation",
  },
  {
    apiGroup: 'coordination.k8s.io',
    resources: ['leases'],
    verbs: ['get', 'create', 'update'],
    scope: 'namespace',
    why: 'leader election on a Lease in the controller namespace',
  },
];
