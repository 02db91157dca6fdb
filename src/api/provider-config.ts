/**
 * `ProviderConfig` / `ClusterProviderConfig` (proxmox.sankofa.io/v1alpha1): where the Proxmox VE
 * sites are and how to reach them. One TypeBox source gives the TypeScript type, the JSON Schema
 * (for the CRD generator; note: it must drop `additionalProperties: false`, which Kubernetes
 * structural schemas forbid next to `properties`) and the validation of files.
 *
 * ```yaml
 * apiVersion: proxmox.sankofa.io/v1alpha1
 * kind: ClusterProviderConfig
 * metadata: { name: default }
 * spec:
 *   credentials:
 *     source: Secret
 *     secretRef: { name: proxmox-credentials, namespace: crossplane-system }
 *   sites:
 *     - name: site-1
 *       endpoints: [https://ml110-01.example:8006]
 *       nodes: [ml110-01]
 *       tls: { fingerprint: "AB:CD:..." }        # or { caBundle: PEM } or { insecureSkipTLSVerify: true }
 *       credentialsSecretRef: { name: site-1-credentials, namespace: crossplane-system }  # optional, per site
 *       concurrency: { perNode: 2, perStorage: 2, requests: 16 }                         # optional
 *       vmidRange: { min: 1000, max: 1999 }                                              # optional
 * ```
 *
 * This file holds the schema, its types, the defaults and the installation a config's VMs belong
 * to. Reading and checking a file is provider-config-load.ts; what one site resolves to
 * (credentials, SSH, limits) is provider-config-site.ts.
 */
import Type, { type Static } from 'typebox';
import {
  DNS1123_LABEL_MAX,
  DNS1123_LABEL_PATTERN,
  DNS1123_SUBDOMAIN_MAX,
  DNS1123_SUBDOMAIN_PATTERN,
} from './metadata.ts';

export const API_GROUP = 'proxmox.sankofa.io';
export const API_VERSION = `${API_GROUP}/v1alpha1`;

const NAME_RE = '^[a-z0-9]([-a-z0-9]*[a-z0-9])?$';
/** An installation id: lowercase letters, digits, '-' and '.', as the ownership marker's grammar reads it. */
export const INSTALLATION_RE = '^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$';
const NODE_RE = '^[a-zA-Z0-9]([a-zA-Z0-9-]*[a-zA-Z0-9])?$';

export const SecretReference = Type.Object(
  {
    name: Type.String({
      minLength: 1,
      maxLength: DNS1123_SUBDOMAIN_MAX,
      pattern: DNS1123_SUBDOMAIN_PATTERN,
      description: 'Name of the Secret.',
    }),
    namespace: Type.Optional(
      Type.String({
        minLength: 1,
        maxLength: DNS1123_LABEL_MAX,
        pattern: DNS1123_LABEL_PATTERN,
        description:
          "Namespace of the Secret: required in a ClusterProviderConfig; refused in a ProviderConfig, which reads the Secret from its own namespace. (In a file for the CLI, default: the config's metadata.namespace, else `default`.)",
      }),
    ),
  },
  {
    additionalProperties: false,
    description:
      'A Kubernetes Secret with the credentials: the keys tokenid (USER@REALM!TOKENID) + token (the secret) of an API token, or username (USER@REALM) + password.',
  },
);

export const TlsConfig = Type.Object(
  {
    fingerprint: Type.Optional(
      Type.Union(
        [
          Type.String({ minLength: 1 }),
          Type.Array(Type.String({ minLength: 1 }), { minItems: 1, description: 'one per endpoint certificate' }),
        ],
        {
          description:
            'SHA-256 fingerprint(s) of the endpoint certificates (`pvenode cert info`), AB:CD:... The certificate is then trusted without a CA.',
          errorMessage: 'must be a SHA-256 fingerprint (AB:CD:...) or a list of them',
        },
      ),
    ),
    caBundle: Type.Optional(
      Type.String({ minLength: 1, description: 'PEM CA certificate(s) that sign the endpoint certificates.' }),
    ),
    insecureSkipTLSVerify: Type.Optional(
      Type.Boolean({ description: 'Do not verify certificates at all (logged as a warning). Prefer fingerprint.' }),
    ),
  },
  {
    additionalProperties: false,
    description:
      "How the endpoints' certificates are verified: at most one of fingerprint, caBundle, insecureSkipTLSVerify. Default (empty): against the system CAs, which a Proxmox VE node's self-signed certificate fails.",
  },
);

export const ConcurrencyConfig = Type.Object(
  {
    perNode: Type.Optional(
      Type.Integer({
        minimum: 1,
        maximum: 64,
        description:
          'Creates (blank, import or clone) and disk resizes at once per node, each held until its Proxmox VE task ends. Set, it is kept. Left out, it adapts: it starts at 2, doubles each time one of them ended well while others waited, up to 8, halves when one failed on a storage lock that timed out, and from then on grows by one at a time.',
      }),
    ),
    perStorage: Type.Optional(
      Type.Integer({
        minimum: 1,
        maximum: 64,
        description:
          'Creates at once per storage (of the boot disk), each held until its Proxmox VE task ends. Set, it is kept. Left out, it adapts as perNode does: from 2 up to 8, halved on a storage lock that timed out.',
      }),
    ),
    requests: Type.Optional(
      Type.Integer({
        minimum: 1,
        maximum: 256,
        description: 'Keep-alive connections, so HTTP requests in flight, per endpoint. Default: 16.',
      }),
    ),
  },
  {
    additionalProperties: false,
    description:
      "Limits of parallel work. spec.concurrency: for every site; a site's own: its fields override those, field by field.",
  },
);

export const VmidRange = Type.Object(
  {
    min: Type.Integer({ minimum: 100, maximum: 999_999_999, description: 'The lowest VMID.' }),
    max: Type.Integer({ minimum: 100, maximum: 999_999_999, description: 'The highest VMID.' }),
  },
  {
    additionalProperties: false,
    description:
      "VMIDs the provider may choose for new VMs, inclusive (a spec.forProvider.vmid is used as it is). spec.vmidRange: for every site; a site's own replaces it for that site. Default: 100-999999.",
  },
);

/**
 * SSH to the site's nodes, for what the Proxmox VE API cannot do: upload cloud-init snippets
 * (`cicustom`). The host keys are pinned: a node whose key is not listed is never talked to (no
 * trust on first use).
 */
export const SshConfig = Type.Object(
  {
    user: Type.Optional(
      Type.String({
        minLength: 1,
        pattern: '^[a-z_][a-z0-9_.-]*$',
        description:
          'The login user on the nodes. It must be able to write to the snippets directory of the storage (root can; another user needs write access to <storage path>/snippets). Default: root.',
      }),
    ),
    /** A Secret with the key privateKey (OpenSSH or PEM; ed25519, ecdsa or rsa), optional passphrase. */
    secretRef: Type.Object(SecretReference.properties, {
      additionalProperties: false,
      description:
        "A Secret with the key privateKey: an OpenSSH or PEM private key (ed25519, ecdsa or rsa) whose public key is in the user's authorized_keys on every node; optional key passphrase.",
    }),
    hostKeys: Type.Array(Type.String({ minLength: 1 }), {
      minItems: 1,
      description:
        "The nodes' SSH host keys, pinned: fingerprints (SHA256:...) or known_hosts lines. A node must present one of them; on a node of a cluster, `ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub` prints its fingerprint.",
    }),
    port: Type.Optional(
      Type.Integer({ minimum: 1, maximum: 65535, description: 'The SSH port of the nodes. Default: 22.' }),
    ),
    nodes: Type.Optional(
      Type.Array(
        Type.Object(
          {
            name: Type.String({
              pattern: NODE_RE,
              errorMessage: 'must be a Proxmox VE node name',
              description: 'The Proxmox VE node name.',
            }),
            host: Type.String({ minLength: 1, description: 'Address or DNS name of the node for SSH.' }),
            port: Type.Optional(
              Type.Integer({ minimum: 1, maximum: 65535, description: 'Its SSH port. Default: ssh.port.' }),
            ),
          },
          { additionalProperties: false, description: 'Where one node is reached over SSH.' },
        ),
        {
          description: "Where each node is reached over SSH. Default: the node's address in /cluster/status, at port.",
        },
      ),
    ),
    snippetsStorage: Type.Optional(
      Type.String({
        minLength: 1,
        description:
          "The storage (with the `snippets` content type and a directory: dir, nfs, cifs, cephfs, glusterfs) the snippets go to. Default: on the VM's node, the first shared storage with snippets content, else the first local one.",
      }),
    ),
  },
  {
    additionalProperties: false,
    description:
      "SSH access to the site's nodes, used to upload cloud-init snippets (the Proxmox VE API cannot): needed for a userData with more than users and SSH keys. Host keys are pinned.",
  },
);

export const SiteConfig = Type.Object(
  {
    name: Type.String({
      minLength: 1,
      maxLength: 63,
      pattern: NAME_RE,
      errorMessage: 'must be a lower-case DNS label (a-z, 0-9, -)',
      description: 'Name of the site, as spec.forProvider.site names it; unique in the config.',
    }),
    endpoints: Type.Array(
      Type.String({
        pattern: '^https?://[^\\s/@]+(/api2/json/?|/)?$',
        errorMessage: 'must be an endpoint URL like https://pve1.example:8006 (no path, no credentials)',
      }),
      {
        minItems: 1,
        description:
          'API URLs of the cluster, e.g. https://pve1.example:8006 (no path, no credentials). With several (nodes of one cluster) the client fails over between them.',
      },
    ),
    nodes: Type.Optional(
      Type.Array(Type.String({ pattern: NODE_RE, errorMessage: 'must be a Proxmox VE node name' }), {
        description:
          'Nodes of the site that the manifests use: ProxmoxVMScaleSet replicas without a node are spread over them (round robin), `validate` checks a spec.forProvider.node against them, and `doctor` checks these nodes (default: every node of the cluster). A ProxmoxVM without a node may still be placed on any online node of the cluster.',
      }),
    ),
    tls: Type.Optional(TlsConfig),
    credentialsSecretRef: Type.Optional(SecretReference),
    ssh: Type.Optional(SshConfig),
    concurrency: Type.Optional(ConcurrencyConfig),
    vmidRange: Type.Optional(VmidRange),
  },
  {
    additionalProperties: false,
    description:
      "One Proxmox VE cluster. Its credentials: credentialsSecretRef, else spec.credentials.secretRef; its concurrency and vmidRange: its own, else spec's, else the defaults.",
  },
);

export const CredentialsConfig = Type.Object(
  {
    source: Type.Optional(
      Type.Literal('Secret', { description: 'Where the credentials come from: only Secret. Default: Secret.' }),
    ),
    secretRef: Type.Optional(SecretReference),
  },
  {
    additionalProperties: false,
    description:
      'The credentials of the sites: secretRef serves every site without its own credentialsSecretRef, and is required unless every site has one.',
  },
);

export const ProviderConfigSpec = Type.Object(
  {
    credentials: CredentialsConfig,
    sites: Type.Array(SiteConfig, {
      minItems: 1,
      description: 'The Proxmox VE clusters (sites), at least one; a ProxmoxVM picks one with spec.forProvider.site.',
    }),
    /** Defaults for every site. */
    concurrency: Type.Optional(ConcurrencyConfig),
    vmidRange: Type.Optional(VmidRange),
    installation: Type.Optional(
      Type.String({
        pattern: INSTALLATION_RE,
        maxLength: 63,
        description:
          "Which installation of the provider the VMs made through this config belong to: written into every VM's ownership marker, so that two installations (two clusters, a cluster and a CLI user, two teams) on one Proxmox never take each other's VMs for their own or for orphans. Set the same value on a controller's and a CLI's config to hand a fleet from one to the other. Default: the controller's `k8s-<uid of the cluster's kube-system namespace>` (or its --installation), the CLI's `cli-<this config's metadata.name>`.",
      }),
    ),
  },
  { additionalProperties: false, description: 'Where the Proxmox VE sites are and how to reach them.' },
);

export const ProviderConfigKinds = ['ProviderConfig', 'ClusterProviderConfig'] as const;

export const ProviderConfigSchema = Type.Object({
  apiVersion: Type.Literal(API_VERSION),
  kind: Type.Union([Type.Literal('ProviderConfig'), Type.Literal('ClusterProviderConfig')]),
  metadata: Type.Object(
    {
      name: Type.String({ minLength: 1 }),
      namespace: Type.Optional(Type.String({ minLength: 1 })),
    },
    { additionalProperties: true },
  ),
  spec: ProviderConfigSpec,
  status: Type.Optional(Type.Unknown()),
});

export type SecretRef = Static<typeof SecretReference>;
export type Ssh = Static<typeof SshConfig>;
export type Tls = Static<typeof TlsConfig>;
export type Concurrency = Static<typeof ConcurrencyConfig>;
export type VmidRangeT = Static<typeof VmidRange>;
export type Site = Static<typeof SiteConfig>;
export type ProviderConfig = Static<typeof ProviderConfigSchema>;

/**
 * The installation a config's VMs belong to: `spec.installation`, else `fallback(config)` (the
 * runtime's default: see ProviderConfigSpec.installation).
 */
export function installationOf(cfg: ProviderConfig, fallback: (cfg: ProviderConfig) => string): string {
  return cfg.spec.installation ?? fallback(cfg);
}

/**
 * The CLI's default installation: `cli-<metadata.name>`. It depends on nothing but the config, so
 * a lost state file, another directory or another `--state` is still the same installation.
 */
export function cliInstallation(cfg: ProviderConfig): string {
  const id = `cli-${cfg.metadata.name}`
    .toLowerCase()
    .replace(/[^-a-z0-9.]/g, '-')
    .slice(0, 63)
    .replace(/[-.]+$/, '');
  return id;
}

export const DEFAULT_CONCURRENCY: Required<Concurrency> = { perNode: 2, perStorage: 2, requests: 16 };
export const DEFAULT_VMID_RANGE: VmidRangeT = { min: 100, max: 999_999 };
