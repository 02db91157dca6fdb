/**
 * ProxmoxVMScaleSet (proxmox.sankofa.io/v1alpha1): N ProxmoxVMs made from one template. One TypeBox
 * source for the TypeScript types and the CRD's OpenAPI schema (src/api/crd.ts).
 *
 * ```yaml
 * apiVersion: proxmox.sankofa.io/v1alpha1
 * kind: ProxmoxVMScaleSet
 * metadata: { name: web, namespace: default }
 * spec:
 *   replicas: 3
 *   template:
 *     metadata:
 *       labels: { app: web }
 *     spec:
 *       forProvider: { site: site-1, cpu: 2, memory: 4Gi, disk: 20Gi, image: local:import/ubuntu.qcow2 }
 *       providerConfigRef: { kind: ClusterProviderConfig, name: default }
 * ```
 *
 * The template's `spec` is a ProxmoxVM spec (same schema, same limits); the scale set resolves its
 * credentials and the site's nodes through that spec's `providerConfigRef`.
 */
import Type, { type Static } from 'typebox';
import { vmSchemas } from './proxmoxvm-schema.ts';
import { usageSchemas } from './usage.ts';

export const SCALESET_KIND = 'ProxmoxVMScaleSet';

/** Maximum replicas of one scale set (a bound for the API server and for the engine). */
export const MAX_REPLICAS = 1000;

const StringMap = (description: string) => Type.Record(Type.String(), Type.String(), { description });

export const LabelSelectorSchema = Type.Object(
  {
    matchLabels: Type.Optional(
      StringMap("Labels every replica carries, besides the template's labels (on a conflict, these win)."),
    ),
  },
  {
    description:
      'Labels of the replicas. Which ProxmoxVMs belong to the scale set is decided by their owner reference to it, not by labels; every replica also carries the label proxmox.sankofa.io/scaleset=<name>, which status.selector names.',
  },
);

export const ScaleSetTemplateSchema = Type.Object(
  {
    metadata: Type.Optional(
      Type.Object(
        {
          labels: Type.Optional(StringMap('Labels copied to every replica.')),
          annotations: Type.Optional(
            StringMap(
              'Annotations copied to every replica (e.g. crossplane.io/poll-interval), besides the template-hash and replica-index annotations of the set.',
            ),
          ),
        },
        { description: 'Labels and annotations of the replicas.' },
      ),
    ),
    spec: vmSchemas().ProxmoxVMSpecSchema,
  },
  {
    description:
      "The ProxmoxVM every replica is made from. Replica i (from 0) is named <set>-<i> (its VM: spec.forProvider.name-<i> when a name is set); without a node, replicas are spread round robin over the site's nodes (spec.sites[].nodes of the ProviderConfig). A changed template updates every replica, each keeping its node.",
  },
);

export const ProxmoxVMScaleSetSpecSchema = Type.Object(
  {
    replicas: Type.Integer({
      minimum: 0,
      maximum: MAX_REPLICAS,
      default: 1,
      description:
        'How many ProxmoxVMs the scale set keeps. Scaling down deletes the highest indexes (the newest replicas) first.',
    }),
    selector: Type.Optional(LabelSelectorSchema),
    template: ScaleSetTemplateSchema,
  },
  { description: 'The desired replicas.' },
);

export const ProxmoxVMScaleSetStatusSchema = Type.Object(
  {
    replicas: Type.Optional(Type.Integer({ minimum: 0, description: 'ProxmoxVMs the scale set owns now.' })),
    readyReplicas: Type.Optional(Type.Integer({ minimum: 0, description: 'Owned ProxmoxVMs that are Ready.' })),
    updatedReplicas: Type.Optional(
      Type.Integer({ minimum: 0, description: 'Owned ProxmoxVMs that match the current template.' }),
    ),
    selector: Type.Optional(
      Type.String({ description: 'The label selector of the replicas, as a string (for the scale subresource).' }),
    ),
    observedGeneration: Type.Optional(
      Type.Integer({ format: 'int64', minimum: 0, description: 'The metadata.generation last acted on.' }),
    ),
    conditions: Type.Optional(usageSchemas().ConditionsSchema),
  },
  { description: 'The replicas as the controller last saw them.' },
);

export type ProxmoxVMScaleSetSpec = Static<typeof ProxmoxVMScaleSetSpecSchema>;
export type ProxmoxVMScaleSetStatus = Static<typeof ProxmoxVMScaleSetStatusSchema>;

export interface ProxmoxVMScaleSet {
  apiVersion: string;
  kind: typeof SCALESET_KIND;
  metadata: {
    name: string;
    namespace?: string;
    uid: string;
    generation: number;
    resourceVersion?: string;
    creationTimestamp?: string;
    deletionTimestamp?: string;
    labels?: Record<string, string>;
    annotations?: Record<string, string>;
    finalizers?: string[];
  };
  spec: ProxmoxVMScaleSetSpec;
  status?: ProxmoxVMScaleSetStatus;
}
