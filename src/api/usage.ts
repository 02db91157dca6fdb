/**
 * Crossplane's common API pieces (conditions, provider config references) and the provider config
 * usage kinds, in the Crossplane v2 shape (crossplane-runtime v2 `TypedProviderConfigUsage`):
 *
 * ```yaml
 * apiVersion: proxmox.sankofa.io/v1alpha1
 * kind: ProviderConfigUsage            # namespaced; ClusterProviderConfigUsage is cluster-scoped
 * metadata:
 *   name: 5e0c1c5a-...                 # the using resource's UID
 *   namespace: team-a
 *   labels: { crossplane.io/provider-config: default }
 *   ownerReferences: [ ...the using resource... ]
 * providerConfigRef: { kind: ProviderConfig, name: default }
 * resourceRef: { apiVersion: proxmox.sankofa.io/v1alpha1, kind: ProxmoxVM, name: web-1, uid: 5e0c1c5a-... }
 * ```
 *
 * A usage has no `spec`: `providerConfigRef` and `resourceRef` sit at the top level, as Crossplane's do.
 * While a usage names a ProviderConfig, that config carries the `in-use.crossplane.io` finalizer and
 * cannot be deleted.
 */
import Type, { type Static } from 'typebox';
import { builtOnce } from './built-once.ts';

export const USAGE_KINDS = ['ProviderConfigUsage', 'ClusterProviderConfigUsage'] as const;
export type UsageKind = (typeof USAGE_KINDS)[number];

/** Label on a usage naming the provider config it tracks (Crossplane's key). */
export const LABEL_PROVIDER_CONFIG = 'crossplane.io/provider-config';
/** Finalizer on a provider config while usages refer to it (Crossplane's key). */
export const FINALIZER_IN_USE = 'in-use.crossplane.io';

/**
 * The schemas of this file, built on first use. validate loads this module (proxmoximage.ts's
 * status refers to the conditions) but reads no status and no usage: TypeBox's builders run
 * interpreted in a fresh process, and every schema left unbuilt shortens its start.
 */
function buildSchemas() {
  /** One entry of `status.conditions` (crossplane-runtime `xpv1.Condition`). */
  const ConditionSchema = Type.Object({
    type: Type.String({
      minLength: 1,
      description: 'Type of this condition (Ready, Synced, ...). At most one of each type applies at a time.',
    }),
    status: Type.Union([Type.Literal('True'), Type.Literal('False'), Type.Literal('Unknown')], {
      description: 'Status of this condition: True, False or Unknown.',
    }),
    reason: Type.String({ description: "A machine-readable reason for the condition's last transition." }),
    message: Type.Optional(Type.String({ description: "Details about the condition's last transition, if any." })),
    lastTransitionTime: Type.String({
      format: 'date-time',
      description: 'When this condition last changed status.',
    }),
    observedGeneration: Type.Optional(
      Type.Integer({
        format: 'int64',
        minimum: 0,
        description: 'The metadata.generation the condition was set for.',
      }),
    ),
  });

  /** `status.conditions`: a list map keyed by `type` (server-side apply merges by type). */
  const ConditionsSchema = Type.Array(ConditionSchema, {
    'x-kubernetes-list-type': 'map',
    'x-kubernetes-list-map-keys': ['type'],
    description: 'Conditions of the resource.',
  });

  /** A reference to a ProviderConfig (namespaced, same namespace) or a ClusterProviderConfig. */
  const ProviderConfigReferenceSchema = Type.Object(
    {
      kind: Type.Union([Type.Literal('ProviderConfig'), Type.Literal('ClusterProviderConfig')], {
        description: 'ProviderConfig (in the namespace of the user) or ClusterProviderConfig.',
      }),
      name: Type.String({ minLength: 1, description: 'Name of the provider config.' }),
    },
    { description: 'The provider config the resource uses.' },
  );

  /** A reference to a Kubernetes object by API version, kind, name and UID. */
  const TypedReferenceSchema = Type.Object(
    {
      apiVersion: Type.String({ minLength: 1, description: 'API version of the referenced object.' }),
      kind: Type.String({ minLength: 1, description: 'Kind of the referenced object.' }),
      name: Type.String({ minLength: 1, description: 'Name of the referenced object.' }),
      uid: Type.Optional(Type.String({ description: 'UID of the referenced object.' })),
    },
    { description: 'The resource that uses the provider config (a ProxmoxVM); the usage is named after its UID.' },
  );

  /** The body of a (Cluster)ProviderConfigUsage: everything but apiVersion, kind and metadata. */
  const ProviderConfigUsageBodySchema = Type.Object({
    providerConfigRef: ProviderConfigReferenceSchema,
    resourceRef: TypedReferenceSchema,
  });
  return {
    ConditionSchema,
    ConditionsSchema,
    ProviderConfigReferenceSchema,
    TypedReferenceSchema,
    ProviderConfigUsageBodySchema,
  };
}

type UsageSchemas = ReturnType<typeof buildSchemas>;

/** The conditions, provider config reference and usage body schemas (see buildSchemas). */
export const usageSchemas: () => UsageSchemas = builtOnce(buildSchemas);

export type ConditionT = Static<UsageSchemas['ConditionSchema']>;
export type ProviderConfigReference = Static<UsageSchemas['ProviderConfigReferenceSchema']>;
export type TypedReference = Static<UsageSchemas['TypedReferenceSchema']>;

export interface ProviderConfigUsage extends Static<UsageSchemas['ProviderConfigUsageBodySchema']> {
  apiVersion: string;
  kind: UsageKind;
  metadata: {
    name: string;
    namespace?: string;
    uid?: string;
    resourceVersion?: string;
    labels?: Record<string, string>;
    ownerReferences?: Array<{
      apiVersion: string;
      kind: string;
      name: string;
      uid: string;
      controller?: boolean;
      blockOwnerDeletion?: boolean;
    }>;
  };
}
