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
 * The credentials Secret holds `tokenid` + `token` (an API token) or `username` + `password`.
 * loadProviderConfig() reads a YAML file holding the config and, optionally, its Secret(s); its
 * errors name file:line and the field.
 */
import Type, { type Static } from 'typebox';
import Value from 'typebox/value';
import { type Document, isMap, isPair, isScalar, LineCounter, parseAllDocuments, type YAMLMap } from 'yaml';
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

// --- loading -------------------------------------------------------------------------------------

/** A configuration problem, located: `file:line: field: message`. */
export class ConfigError extends Error {
  readonly file: string;
  readonly line: number | undefined;
  readonly field: string | undefined;
  readonly problems: readonly string[];
  constructor(
    file: string,
    problems: Array<{ line?: number | undefined; field?: string | undefined; message: string }>,
  ) {
    const lines = problems.map(
      (p) => `${file}${p.line ? `:${p.line}` : ''}: ${p.field ? `${p.field}: ` : ''}${p.message}`,
    );
    super(lines.join('\n'));
    this.name = 'ConfigError';
    this.file = file;
    this.line = problems[0]?.line;
    this.field = problems[0]?.field;
    this.problems = Object.freeze(lines);
  }
}

/** A Secret's data, decoded (stringData wins over base64 data). Never printed. */
export interface SecretData {
  namespace: string;
  name: string;
  data: Record<string, string>;
  file: string;
  line: number | undefined;
}

export interface LoadedProviderConfig {
  file: string;
  config: ProviderConfig;
  /** Secrets found in the file(s), by `namespace/name`. */
  secrets: Map<string, SecretData>;
  /** Line of a field (`spec.sites[0].tls`), for later messages. */
  lineOf(field: string): number | undefined;
}

interface YamlDoc {
  doc: Document.Parsed;
  value: unknown;
}

function fieldPath(segments: Array<string | number>): string {
  let out = '';
  for (const s of segments) out += typeof s === 'number' ? `[${s}]` : out ? `.${s}` : s;
  return out;
}

function pointerSegments(pointer: string): Array<string | number> {
  if (!pointer) return [];
  return pointer
    .split('/')
    .slice(1)
    .map((s) => s.replace(/~1/g, '/').replace(/~0/g, '~'))
    .map((s) => (/^\d+$/.test(s) ? Number(s) : s));
}

function keyLine(map: unknown, lc: LineCounter, key: string): number | undefined {
  if (!isMap(map)) return undefined;
  const pair = (map as YAMLMap).items.find((p) => isPair(p) && isScalar(p.key) && p.key.value === key);
  const k = pair && isPair(pair) && isScalar(pair.key) ? pair.key : undefined;
  return k?.range ? lc.linePos(k.range[0]).line : undefined;
}

/** Line of a field: its key's line in a map, its item's line in a list; else the nearest parent's. */
function lineOfNode(
  doc: Document.Parsed,
  lc: LineCounter,
  segments: Array<string | number>,
  key?: string,
): number | undefined {
  if (key !== undefined) {
    const parent = segments.length ? doc.getIn(segments, true) : doc.contents;
    const l = keyLine(parent, lc, key);
    if (l) return l;
  }
  for (let n = segments.length; n >= 0; n--) {
    const last = segments[n - 1];
    if (n > 0 && typeof last === 'string') {
      const parent = n - 1 === 0 ? doc.contents : doc.getIn(segments.slice(0, n - 1), true);
      const l = keyLine(parent, lc, last);
      if (l) return l;
    }
    const node = n === 0 ? doc.contents : doc.getIn(segments.slice(0, n), true);
    const range = node && typeof node === 'object' ? (node as { range?: [number, number, number] }).range : undefined;
    if (range) return lc.linePos(range[0]).line;
  }
  return undefined;
}

function resolveSchema(root: unknown, schemaPath: string): Record<string, unknown> | undefined {
  let cur: unknown = root;
  for (const seg of pointerSegments(schemaPath.replace(/^#/, ''))) {
    if (!cur || typeof cur !== 'object') return undefined;
    cur = (cur as Record<string, unknown>)[String(seg)];
  }
  return cur && typeof cur === 'object' ? (cur as Record<string, unknown>) : undefined;
}

interface Problem {
  line?: number | undefined;
  field?: string | undefined;
  message: string;
}

function schemaProblems(doc: Document.Parsed, lc: LineCounter, value: unknown): Problem[] {
  const out: Problem[] = [];
  const seen = new Set<string>();
  for (const e of Value.Errors(ProviderConfigSchema, value)) {
    if (e.keyword === 'boolean') continue; // the additionalProperties twin of another error
    const segs = pointerSegments(e.instancePath);
    // Inside an anyOf, report once at the union (its own message) rather than per branch.
    const unionAt = /^(.*)\/anyOf\/\d+/.exec(e.schemaPath);
    const schemaNode = unionAt
      ? resolveSchema(ProviderConfigSchema, unionAt[1]!)
      : resolveSchema(ProviderConfigSchema, e.schemaPath);
    let message = e.message;
    let key: string | undefined;
    if (e.keyword === 'additionalProperties') {
      const extra = ((e.params as { additionalProperties?: string[] }).additionalProperties ?? []).join(', ');
      message = `unknown field${extra.includes(',') ? 's' : ''} ${extra}`;
      key = (e.params as { additionalProperties?: string[] }).additionalProperties?.[0];
    } else if (e.keyword === 'required') {
      const req = ((e.params as { requiredProperties?: string[] }).requiredProperties ?? []).join(', ');
      message = `missing required field ${req}`;
    } else if (typeof schemaNode?.errorMessage === 'string') {
      message = schemaNode.errorMessage;
    } else if (e.keyword === 'const' && segs.join('.') === 'apiVersion') {
      message = `must be ${API_VERSION}`;
    }
    const field = key ? fieldPath([...segs]) || '(top level)' : fieldPath(segs) || '(top level)';
    const sig = `${field}|${message}`;
    if (seen.has(sig)) continue;
    seen.add(sig);
    out.push({ line: lineOfNode(doc, lc, segs, key), field, message });
  }
  return out;
}

function semanticProblems(cfg: ProviderConfig, at: (segs: Array<string | number>) => number | undefined): Problem[] {
  const out: Problem[] = [];
  const names = new Set<string>();
  cfg.spec.sites.forEach((s, i) => {
    const base: Array<string | number> = ['spec', 'sites', i];
    if (names.has(s.name))
      out.push({
        line: at([...base, 'name']),
        field: fieldPath([...base, 'name']),
        message: `duplicate site name '${s.name}'`,
      });
    names.add(s.name);
    const eps = new Set<string>();
    s.endpoints.forEach((ep, j) => {
      try {
        const origin = new URL(ep).origin;
        if (eps.has(origin)) {
          out.push({
            line: at([...base, 'endpoints', j]),
            field: fieldPath([...base, 'endpoints', j]),
            message: `duplicate endpoint ${origin}`,
          });
        }
        eps.add(origin);
      } catch {
        out.push({
          line: at([...base, 'endpoints', j]),
          field: fieldPath([...base, 'endpoints', j]),
          message: 'is not a valid URL',
        });
      }
    });
    const tls = s.tls;
    if (tls) {
      const set = [
        tls.fingerprint !== undefined,
        tls.caBundle !== undefined,
        tls.insecureSkipTLSVerify === true,
      ].filter(Boolean).length;
      if (set > 1) {
        out.push({
          line: at([...base, 'tls']),
          field: fieldPath([...base, 'tls']),
          message: 'set only one of fingerprint, caBundle, insecureSkipTLSVerify',
        });
      }
      const fps =
        tls.fingerprint === undefined ? [] : Array.isArray(tls.fingerprint) ? tls.fingerprint : [tls.fingerprint];
      fps.forEach((fp, j) => {
        const hex = fp
          .trim()
          .replace(/^sha256[:=\s]*/i, '')
          .replace(/[:\s]/g, '');
        if (!/^[0-9A-Fa-f]{64}$/.test(hex)) {
          const segs = Array.isArray(tls.fingerprint)
            ? [...base, 'tls', 'fingerprint', j]
            : [...base, 'tls', 'fingerprint'];
          out.push({
            line: at(segs),
            field: fieldPath(segs),
            message: 'must be a SHA-256 certificate fingerprint: 32 hex bytes like AB:CD:... (see `pvenode cert info`)',
          });
        }
      });
      if (tls.caBundle !== undefined && !tls.caBundle.includes('-----BEGIN CERTIFICATE-----')) {
        out.push({
          line: at([...base, 'tls', 'caBundle']),
          field: fieldPath([...base, 'tls', 'caBundle']),
          message: 'must hold PEM certificates (-----BEGIN CERTIFICATE-----)',
        });
      }
    }
    const r = s.vmidRange;
    if (r && r.min > r.max) {
      out.push({
        line: at([...base, 'vmidRange']),
        field: fieldPath([...base, 'vmidRange']),
        message: `min (${r.min}) is greater than max (${r.max})`,
      });
    }
    (s.ssh?.hostKeys ?? []).forEach((k, j) => {
      if (!parseHostKey(k))
        out.push({
          line: at([...base, 'ssh', 'hostKeys', j]),
          field: fieldPath([...base, 'ssh', 'hostKeys', j]),
          message:
            'must be an OpenSSH SHA256 fingerprint (SHA256:<43 base64 characters>, as `ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub` prints on the node) or a known_hosts line (HOST ssh-ed25519 AAAA...)',
        });
    });
    if (new Set(s.nodes ?? []).size !== (s.nodes ?? []).length) {
      out.push({ line: at([...base, 'nodes']), field: fieldPath([...base, 'nodes']), message: 'lists a node twice' });
    }
  });
  const r = cfg.spec.vmidRange;
  if (r && r.min > r.max)
    out.push({
      line: at(['spec', 'vmidRange']),
      field: 'spec.vmidRange',
      message: `min (${r.min}) is greater than max (${r.max})`,
    });
  const needsDefaultRef = cfg.spec.sites.some((s) => !s.credentialsSecretRef);
  if (needsDefaultRef && !cfg.spec.credentials.secretRef) {
    out.push({
      line: at(['spec', 'credentials']),
      field: 'spec.credentials.secretRef',
      message: 'is required unless every site has its own credentialsSecretRef',
    });
  }
  if (cfg.kind === 'ClusterProviderConfig') {
    const refs: Array<[Array<string | number>, SecretRef | undefined]> = [
      [['spec', 'credentials', 'secretRef'], cfg.spec.credentials.secretRef],
      ...cfg.spec.sites.map((s, i): [Array<string | number>, SecretRef | undefined] => [
        ['spec', 'sites', i, 'credentialsSecretRef'],
        s.credentialsSecretRef,
      ]),
      ...cfg.spec.sites.map((s, i): [Array<string | number>, SecretRef | undefined] => [
        ['spec', 'sites', i, 'ssh', 'secretRef'],
        s.ssh?.secretRef,
      ]),
    ];
    for (const [segs, ref] of refs) {
      if (ref && !ref.namespace) {
        out.push({
          line: at(segs),
          field: `${fieldPath(segs)}.namespace`,
          message: 'is required in a ClusterProviderConfig',
        });
      }
    }
  }
  return out;
}

function parseDocs(text: string, file: string): { docs: YamlDoc[]; lc: LineCounter } {
  const lc = new LineCounter();
  const parsed = parseAllDocuments(text, { lineCounter: lc, prettyErrors: false });
  const list = Array.isArray(parsed) ? parsed : [];
  if (!Array.isArray(parsed)) {
    throw new ConfigError(file, [{ message: 'not a YAML stream' }]);
  }
  const problems: Problem[] = [];
  for (const d of list) {
    for (const e of d.errors) {
      problems.push({
        line: e.linePos?.[0]?.line ?? lc.linePos(e.pos[0]).line,
        message: `YAML: ${e.message.split('\n')[0]}`,
      });
    }
  }
  if (problems.length) throw new ConfigError(file, problems);
  return { docs: list.map((doc) => ({ doc, value: doc.toJS() as unknown })), lc };
}

function secretFromDoc(d: YamlDoc, lc: LineCounter, file: string, defaultNamespace: string): SecretData {
  const v = d.value as { metadata?: { name?: unknown; namespace?: unknown }; data?: unknown; stringData?: unknown };
  const name = typeof v.metadata?.name === 'string' ? v.metadata.name : '';
  const namespace = typeof v.metadata?.namespace === 'string' ? v.metadata.namespace : defaultNamespace;
  const line = lineOfNode(d.doc, lc, []);
  if (!name) throw new ConfigError(file, [{ line, field: 'metadata.name', message: 'a Secret needs a name' }]);
  const data: Record<string, string> = {};
  if (v.data && typeof v.data === 'object') {
    for (const [k, x] of Object.entries(v.data as Record<string, unknown>)) {
      if (typeof x !== 'string' || !/^[A-Za-z0-9+/=\s]*$/.test(x)) {
        throw new ConfigError(file, [
          {
            line: lineOfNode(d.doc, lc, ['data', k]),
            field: `data.${k}`,
            message: 'must be base64 (use stringData for plain text)',
          },
        ]);
      }
      data[k] = Buffer.from(x, 'base64').toString('utf8');
    }
  }
  if (v.stringData && typeof v.stringData === 'object') {
    for (const [k, x] of Object.entries(v.stringData as Record<string, unknown>)) {
      if (x === null || x === undefined) continue;
      if (typeof x === 'object') {
        throw new ConfigError(file, [
          { line: lineOfNode(d.doc, lc, ['stringData', k]), field: `stringData.${k}`, message: 'must be a string' },
        ]);
      }
      data[k] = String(x);
    }
  }
  return { namespace, name, data, file, line };
}

/**
 * Parse a YAML text holding a ProviderConfig or ClusterProviderConfig (and possibly its Secrets).
 * `name` picks one when the file has several.
 */
export function parseProviderConfig(text: string, file: string, opts: { name?: string } = {}): LoadedProviderConfig {
  const { docs, lc } = parseDocs(text, file);
  const secrets = new Map<string, SecretData>();
  const candidates: YamlDoc[] = [];
  for (const d of docs) {
    const v = d.value as { kind?: unknown; apiVersion?: unknown } | null;
    if (!v || typeof v !== 'object') continue;
    if (v.kind === 'Secret') {
      const s = secretFromDoc(d, lc, file, 'default');
      secrets.set(`${s.namespace}/${s.name}`, s);
    } else if (typeof v.kind === 'string' && (ProviderConfigKinds as readonly string[]).includes(v.kind)) {
      candidates.push(d);
    }
  }
  const nameOf = (d: YamlDoc) => String((d.value as { metadata?: { name?: unknown } }).metadata?.name ?? '');
  let chosen: YamlDoc | undefined;
  if (opts.name !== undefined) {
    chosen = candidates.find((d) => nameOf(d) === opts.name);
    if (!chosen) {
      throw new ConfigError(file, [
        {
          message: `no ProviderConfig or ClusterProviderConfig named '${opts.name}' (found: ${candidates.map(nameOf).join(', ') || 'none'})`,
        },
      ]);
    }
  } else if (candidates.length === 1) {
    chosen = candidates[0];
  } else if (candidates.length === 0) {
    throw new ConfigError(file, [
      { message: `no ${API_VERSION} ProviderConfig or ClusterProviderConfig in this file` },
    ]);
  } else {
    throw new ConfigError(file, [
      { message: `several provider configs (${candidates.map(nameOf).join(', ')}): choose one by name` },
    ]);
  }
  const { doc, value } = chosen!;
  const problems = schemaProblems(doc, lc, value);
  if (problems.length) throw new ConfigError(file, problems);
  const config = value as ProviderConfig;
  const at = (segs: Array<string | number>) => lineOfNode(doc, lc, segs);
  const sem = semanticProblems(config, at);
  if (sem.length) throw new ConfigError(file, sem);
  const lineOf = (field: string) => {
    const segs = field
      .replace(/\[(\d+)\]/g, '.$1')
      .split('.')
      .filter(Boolean)
      .map((s) => (/^\d+$/.test(s) ? Number(s) : s));
    return lineOfNode(doc, lc, segs);
  };
  return { file, config, secrets, lineOf };
}

/** Secrets from another file (a Secret manifest, or a list of them). */
export function parseSecrets(text: string, file: string): SecretData[] {
  const { docs, lc } = parseDocs(text, file);
  const out: SecretData[] = [];
  for (const d of docs) {
    const v = d.value as { kind?: unknown } | null;
    if (v && typeof v === 'object' && v.kind === 'Secret') out.push(secretFromDoc(d, lc, file, 'default'));
  }
  if (!out.length) throw new ConfigError(file, [{ message: 'no v1 Secret in this file' }]);
  return out;
}

export async function loadProviderConfig(
  file: string,
  opts: { name?: string; secretFiles?: string[] } = {},
): Promise<LoadedProviderConfig> {
  // Loaded on use: validate imports this module for parseProviderConfig and reads no file with it.
  const { readFile } = await import('node:fs/promises');
  let text: string;
  try {
    text = await readFile(file, 'utf8');
  } catch (e) {
    throw new ConfigError(file, [{ message: `cannot read: ${(e as NodeJS.ErrnoException).code ?? String(e)}` }]);
  }
  const loaded = parseProviderConfig(text, file, opts.name !== undefined ? { name: opts.name } : {});
  for (const sf of opts.secretFiles ?? []) {
    let st: string;
    try {
      st = await readFile(sf, 'utf8');
    } catch (e) {
      throw new ConfigError(sf, [{ message: `cannot read: ${(e as NodeJS.ErrnoException).code ?? String(e)}` }]);
    }
    for (const s of parseSecrets(st, sf)) loaded.secrets.set(`${s.namespace}/${s.name}`, s);
  }
  return loaded;
}

/** The Secret reference a site uses, namespace resolved. */
export function siteSecretRef(cfg: ProviderConfig, site: Site): { name: string; namespace: string; field: string } {
  const i = cfg.spec.sites.indexOf(site);
  const own = site.credentialsSecretRef;
  const ref = own ?? cfg.spec.credentials.secretRef;
  const field = own ? `spec.sites[${i}].credentialsSecretRef` : 'spec.credentials.secretRef';
  if (!ref) throw new Error(`site ${site.name}: no credentials Secret reference (${field})`);
  return { name: ref.name, namespace: ref.namespace ?? cfg.metadata.namespace ?? 'default', field };
}

/** Find the Secret of a site among the loaded ones; the error says where it was looked for. */
export function siteSecret(loaded: LoadedProviderConfig, siteName: string): SecretData {
  const site = findSite(loaded.config, siteName);
  const ref = siteSecretRef(loaded.config, site);
  const s = loaded.secrets.get(`${ref.namespace}/${ref.name}`);
  if (!s) {
    throw new ConfigError(loaded.file, [
      {
        line: loaded.lineOf(ref.field),
        field: ref.field,
        message: `Secret ${ref.namespace}/${ref.name} is not in this file; add it (kind: Secret with stringData tokenid + token, or username + password) or pass its file`,
      },
    ]);
  }
  return s;
}

/**
 * A pinned host key: an OpenSSH SHA256 fingerprint, or the key blob of a known_hosts line (whose
 * fingerprint is computed when it is compared). Undefined when it is neither.
 */
export function parseHostKey(text: string): { fingerprint: string } | { keyBlob: string } | undefined {
  const t = text.trim();
  const fp = /^SHA256:([A-Za-z0-9+/]{43})=?$/.exec(t);
  if (fp) return { fingerprint: `SHA256:${fp[1]}` };
  const line = /^(?:\S+\s+)?(ssh-ed25519|ssh-rsa|ecdsa-sha2-nistp(?:256|384|521))\s+([A-Za-z0-9+/]+=*)(?:\s.*)?$/.exec(
    t,
  );
  if (line) return { keyBlob: line[2]! };
  return undefined;
}

/** The SSH settings of a site with its private key from the loaded Secrets; undefined without ssh. */
export interface SiteSsh {
  user: string;
  port: number;
  privateKey: string;
  passphrase?: string;
  hostKeys: string[];
  nodes: Map<string, { host: string; port?: number }>;
  snippetsStorage?: string;
}

export function siteSsh(loaded: LoadedProviderConfig, siteName: string): SiteSsh | undefined {
  const site = findSite(loaded.config, siteName);
  const ssh = site.ssh;
  if (!ssh) return undefined;
  const i = loaded.config.spec.sites.indexOf(site);
  const field = `spec.sites[${i}].ssh.secretRef`;
  const ns = ssh.secretRef.namespace ?? loaded.config.metadata.namespace ?? 'default';
  const secret = loaded.secrets.get(`${ns}/${ssh.secretRef.name}`);
  const privateKey = secret?.data.privateKey;
  if (!privateKey)
    throw new ConfigError(loaded.file, [
      {
        line: loaded.lineOf(field),
        field,
        message: secret
          ? `Secret ${ns}/${ssh.secretRef.name} has no key privateKey; add the OpenSSH private key under stringData.privateKey`
          : `Secret ${ns}/${ssh.secretRef.name} is not in this file; add it (kind: Secret with stringData.privateKey: the OpenSSH private key) or pass its file`,
      },
    ]);
  return {
    user: ssh.user ?? 'root',
    port: ssh.port ?? 22,
    privateKey,
    ...(secret.data.passphrase ? { passphrase: secret.data.passphrase } : {}),
    hostKeys: ssh.hostKeys,
    nodes: new Map((ssh.nodes ?? []).map((n) => [n.name, { host: n.host, ...(n.port ? { port: n.port } : {}) }])),
    ...(ssh.snippetsStorage ? { snippetsStorage: ssh.snippetsStorage } : {}),
  };
}

export function findSite(cfg: ProviderConfig, name: string): Site {
  const s = cfg.spec.sites.find((x) => x.name === name);
  if (!s)
    throw new Error(
      `no site '${name}' in ${cfg.kind} ${cfg.metadata.name} (sites: ${cfg.spec.sites.map((x) => x.name).join(', ')})`,
    );
  return s;
}

export function siteConcurrency(cfg: ProviderConfig, site: Site): Required<Concurrency> {
  return { ...DEFAULT_CONCURRENCY, ...cfg.spec.concurrency, ...site.concurrency };
}

/** The most a slot limit that adapts reaches (see src/vm/limits.ts). */
export const ADAPTIVE_SLOTS_MAX = 8;

/** Which slot limits of a site adapt: those neither the site nor spec.concurrency sets. */
export function adaptiveConcurrency(cfg: ProviderConfig, site: Site): { perNode: boolean; perStorage: boolean } {
  const set = (k: 'perNode' | 'perStorage') =>
    site.concurrency?.[k] !== undefined || cfg.spec.concurrency?.[k] !== undefined;
  return { perNode: !set('perNode'), perStorage: !set('perStorage') };
}

export function siteVmidRange(cfg: ProviderConfig, site: Site): VmidRangeT {
  return site.vmidRange ?? cfg.spec.vmidRange ?? DEFAULT_VMID_RANGE;
}

/** The site's fingerprints as a list (the field takes one or several). */
export function siteFingerprints(site: Site): string[] {
  const f = site.tls?.fingerprint;
  return f === undefined ? [] : Array.isArray(f) ? f : [f];
}
