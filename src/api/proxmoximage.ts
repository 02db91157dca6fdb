/**
 * ProxmoxImage: a cloud image that Proxmox VE downloads itself (`POST
 * /nodes/{node}/storage/{storage}/download-url`, checksum verified by PVE) onto a storage of each
 * node of a site, so that ProxmoxTemplates (and ProxmoxVMs with `image`) can import it. One
 * TypeBox source for the TypeScript types, the engine's validation and the CRD (src/api/crd.ts);
 * the CRD's CEL rules, printer columns and the managed-resource fields shared with
 * ProxmoxTemplate are here too.
 *
 * ```yaml
 * apiVersion: proxmox.sankofa.io/v1alpha1
 * kind: ProxmoxImage
 * metadata: { name: ubuntu-2204, namespace: default }
 * spec:
 *   forProvider:
 *     url: https://cloud-images.ubuntu.com/jammy/current/jammy-server-cloudimg-amd64.img
 *     checksum: { algorithm: sha256, value: <64 hex digits> }
 *     storage: local
 *     content: import
 *     fileName: ubuntu-22.04-cloud.qcow2
 * ```
 */
import Type, { type Static, type TSchema } from 'typebox';
import type { Managed } from '../engine/resource.ts';
import { builtOnce } from './built-once.ts';
import type { CrdSpec, PrinterColumn } from './crd.ts';
import { addRule } from './crd-rules.ts';
import { managedStatusSchema } from './managed-status.ts';
import { DNS1123_SUBDOMAIN_MAX, DNS1123_SUBDOMAIN_PATTERN } from './metadata.ts';
import { type JsonSchema, schemaAt, toStructural } from './structural.ts';

export const IMAGE_KIND = 'ProxmoxImage';

/** File names PVE's download-url accepts per content type (pve-storage Status.pm, normalize + the extension checks). */
export const FILE_NAME_RULES = {
  import: { pattern: '^[a-zA-Z0-9+=_.-]+\\.(qcow2|raw|vmdk)$', allowed: '.qcow2, .raw or .vmdk' },
  iso: { pattern: '^[a-zA-Z0-9+=_.-]+\\.(img|iso)$', allowed: '.img or .iso' },
} as const;

/** Hex digits per algorithm. */
export const CHECKSUM_LENGTH = { sha256: 64, sha512: 128 } as const;

export const ObjectNameSchema = (description: string) =>
  Type.String({ minLength: 1, maxLength: DNS1123_SUBDOMAIN_MAX, pattern: DNS1123_SUBDOMAIN_PATTERN, description });

export type ImageForProvider = Static<ReturnType<typeof imageSpecSchemas>['ImageForProviderSchema']>;

/** The Crossplane fields of a managed resource's spec beside forProvider (as ProxmoxVM's). */
export function managedSpecFields() {
  return {
    providerConfigRef: Type.Optional(
      Type.Object(
        {
          kind: Type.Optional(
            Type.Union([Type.Literal('ProviderConfig'), Type.Literal('ClusterProviderConfig')], {
              description: 'ProviderConfig (same namespace) or ClusterProviderConfig.',
            }),
          ),
          name: ObjectNameSchema('Name of the provider config.'),
        },
        {
          description:
            'The ProviderConfig (same namespace) or ClusterProviderConfig with the Proxmox VE sites and credentials. Default: the ClusterProviderConfig named default.',
        },
      ),
    ),
    managementPolicies: Type.Optional(
      Type.Array(
        Type.Union(['Observe', 'Create', 'Update', 'Delete', 'LateInitialize', '*'].map((x) => Type.Literal(x))),
        {
          description:
            'What the provider may do: Observe, Create, Update, Delete, LateInitialize, or * (all, the default), in the combinations crossplane-runtime supports. Without Delete the Proxmox VE objects are left in place when the resource is deleted; [] pauses.',
        },
      ),
    ),
    deletionPolicy: Type.Optional(
      Type.Union([Type.Literal('Delete'), Type.Literal('Orphan')], {
        description:
          'Legacy (Crossplane v1): Orphan leaves the Proxmox VE objects in place when the resource is deleted. Prefer managementPolicies without Delete.',
      }),
    ),
  };
}

/**
 * The forProvider and spec schemas of a ProxmoxImage, built on first use (proxmoxvm-schema.ts's
 * vmSchemas says why).
 */
function buildSpecSchemas() {
  const ImageForProviderSchema = Type.Object(
    {
      url: Type.String({
        pattern: '^https?://.+',
        description:
          'Where Proxmox VE downloads the image from (http or https; the node itself fetches it, so it must reach the URL). A changed URL is a new image: the new file is downloaded under its own fileName, templates referring to this image are rebuilt from it, and the old file is kept until it is deleted by hand.',
      }),
      checksum: Type.Object(
        {
          algorithm: Type.Union([Type.Literal('sha256'), Type.Literal('sha512')], {
            description: 'The hash algorithm of value.',
          }),
          value: Type.String({
            pattern: '^[0-9a-fA-F]+$',
            description:
              'The expected checksum in hex (64 digits for sha256, 128 for sha512). Proxmox VE computes it after the download and refuses the file on a mismatch (ChecksumMismatch).',
          }),
        },
        {
          additionalProperties: false,
          description:
            "The image's expected checksum, passed to download-url (`checksum`, `checksum-algorithm`), so Proxmox VE itself verifies the file before it keeps it.",
        },
      ),
      storage: Type.Optional(
        Type.String({
          minLength: 1,
          description:
            'A file-based storage (dir, nfs, cifs, cephfs...) that holds the content type on every node. On a shared storage the image is downloaded once. Default: local.',
        }),
      ),
      content: Type.Optional(
        Type.Union([Type.Literal('import'), Type.Literal('iso')], {
          description:
            "The content type of the file. import (PVE >= 8.3) is what import-from takes with an API token; iso can be imported only with root@pam password credentials. Default: import where the site's PVE version has it, else iso.",
        }),
      ),
      fileName: Type.Optional(
        Type.String({
          minLength: 1,
          maxLength: 255,
          pattern: '^[a-zA-Z0-9+=_.-]+$',
          description:
            'The file name on the storage (the volume is <storage>:<content>/<fileName>). An import file must end in .qcow2, .raw or .vmdk (an Ubuntu cloud .img is a qcow2 image: name it .qcow2), an iso file in .img or .iso. A file of that name already on the storage is adopted, not downloaded again. Default: the last segment of url.',
        }),
      ),
      nodes: Type.Optional(
        Type.Array(Type.String({ minLength: 1 }), {
          description: 'The nodes to download the image to. Default: every online node of the site.',
        }),
      ),
      site: Type.Optional(
        Type.String({
          minLength: 1,
          description:
            "The site (a spec.sites[].name of the ProviderConfig); required when the ProviderConfig has several sites. Default: the ProviderConfig's only site.",
        }),
      ),
    },
    { additionalProperties: false, description: 'The image and where Proxmox VE should hold it.' },
  );

  const ProxmoxImageSpecSchema = Type.Object(
    { forProvider: ImageForProviderSchema, ...managedSpecFields() },
    { additionalProperties: false, description: "The desired state: the image (forProvider) and Crossplane's fields." },
  );

  return { ImageForProviderSchema, ProxmoxImageSpecSchema };
}

/** ImageForProviderSchema and ProxmoxImageSpecSchema, built once. */
export const imageSpecSchemas: () => ReturnType<typeof buildSpecSchemas> = builtOnce(buildSpecSchemas);

/**
 * The observed state's schema, built when a CRD is written: validate reads no status, and
 * TypeBox's builders are a part of every cold start that builds them (src/api/usage.ts says more).
 */
export function imageAtProviderSchema() {
  return Type.Object(
    {
      volid: Type.Optional(Type.String({ description: 'The volume id, <storage>:<content>/<fileName>.' })),
      content: Type.Optional(Type.String({ description: 'The content type used (import or iso).' })),
      size: Type.Optional(Type.Integer({ format: 'int64', minimum: 0, description: 'Size of the file in bytes.' })),
      nodes: Type.Optional(
        Type.Array(Type.String(), { description: 'The nodes the file is present on (readable by the site).' }),
      ),
      targetNodes: Type.Optional(Type.Array(Type.String(), { description: 'The nodes the file should be on.' })),
      shared: Type.Optional(Type.Boolean({ description: 'The storage is shared: one download serves every node.' })),
      downloaded: Type.Optional(
        Type.Array(Type.String(), {
          description: 'Nodes where this resource downloaded the file (its checksum verified by Proxmox VE).',
        }),
      ),
      adopted: Type.Optional(
        Type.Array(Type.String(), {
          description:
            'Nodes where a file of that name was already there and was adopted. Proxmox VE has no API that hashes a stored file, so the checksum of an adopted file is not verified.',
        }),
      ),
      tasks: Type.Optional(
        Type.Array(
          Type.Object({
            node: Type.String({ description: 'The node the task runs on.' }),
            upid: Type.String({ description: 'The task (UPID).' }),
            action: Type.String({ description: 'download or delete.' }),
          }),
          { description: 'Proxmox VE tasks in flight.' },
        ),
      ),
      lastFailure: Type.Optional(
        Type.Object(
          {
            for: Type.String({ description: 'The url, checksum and file name the download was for (a hash).' }),
            reason: Type.String({ description: 'ChecksumMismatch or DownloadFailed.' }),
            message: Type.String({ description: "The task's error, with the fix." }),
            at: Type.String({ description: 'When it failed (RFC 3339).' }),
            attempts: Type.Integer({ minimum: 1, description: 'Failed downloads in a row for this spec.' }),
          },
          {
            description:
              'The last failed download. A checksum mismatch is not retried until the spec changes; another failure is retried after 30 s, doubling up to 10 min.',
          },
        ),
      ),
      users: Type.Optional(
        Type.Array(Type.String(), {
          description:
            'The ProxmoxTemplates and ProxmoxVMs that refer to this image (Kind namespace/name): while there are any, a deletion waits (ImageInUse).',
        }),
      ),
      step: Type.Optional(Type.String({ description: 'What the provider is doing now.' })),
      site: Type.Optional(Type.String({ description: 'The site of the image.' })),
    },
    { description: 'The observed state of the image.' },
  );
}

export type ImageAtProvider = Static<ReturnType<typeof imageAtProviderSchema>>;
export type ProxmoxImage = Managed<ImageForProvider, ImageAtProvider>;

/** The content type a spec asks for, given what the site's version has (`import` from 8.3). */
export function imageContent(fp: ImageForProvider, importContent: boolean): 'import' | 'iso' {
  return fp.content ?? (importContent ? 'import' : 'iso');
}

/** The file name: fileName, or the URL's last path segment. */
export function imageFileName(fp: ImageForProvider): string {
  if (fp.fileName) return fp.fileName;
  try {
    return decodeURIComponent(new URL(fp.url).pathname.split('/').filter(Boolean).at(-1) ?? '');
  } catch {
    return '';
  }
}

/** Problems of a spec the schema cannot see (checksum length, file extension), with the fix. */
export function imageSpecProblems(fp: ImageForProvider): Array<{ field: string; message: string }> {
  const out: Array<{ field: string; message: string }> = [];
  const want = CHECKSUM_LENGTH[fp.checksum.algorithm];
  if (fp.checksum.value.length !== want)
    out.push({
      field: 'spec.forProvider.checksum.value',
      message: `a ${fp.checksum.algorithm} checksum has ${want} hex digits, found ${fp.checksum.value.length}`,
    });
  const name = imageFileName(fp);
  const content = fp.content;
  const rules = content ? [FILE_NAME_RULES[content]] : [FILE_NAME_RULES.import, FILE_NAME_RULES.iso];
  if (!rules.some((r) => new RegExp(r.pattern).test(name)))
    out.push({
      field: fp.fileName ? 'spec.forProvider.fileName' : 'spec.forProvider.url',
      message: `file name '${name}' ${content ? `is not allowed for ${content} content: it must end in ${FILE_NAME_RULES[content].allowed}` : 'must end in .qcow2, .raw, .vmdk (import) or .img, .iso (iso)'}; set spec.forProvider.fileName (an Ubuntu cloud .img is a qcow2 image: name it .qcow2 for import)`,
    });
  return out;
}

// --- CRD ------------------------------------------------------------------------------------------

export const READY_COLUMN: PrinterColumn = {
  name: 'READY',
  type: 'string',
  jsonPath: ".status.conditions[?(@.type=='Ready')].status",
};
export const SYNCED_COLUMN: PrinterColumn = {
  name: 'SYNCED',
  type: 'string',
  jsonPath: ".status.conditions[?(@.type=='Synced')].status",
};
export const AGE_COLUMN: PrinterColumn = { name: 'AGE', type: 'date', jsonPath: '.metadata.creationTimestamp' };

/** The CRD defaults of the managed fields (as ProxmoxVM's: ClusterProviderConfig `default`, policies `*`). */
export function managedCrdDefaults(spec: JsonSchema): void {
  const ref = schemaAt(spec, 'providerConfigRef');
  ref.default = { kind: 'ClusterProviderConfig', name: 'default' };
  schemaAt(ref, 'kind').default = 'ClusterProviderConfig';
  ref.required = ['name'];
  schemaAt(spec, 'managementPolicies').default = ['*'];
}

export function statusSchema(atProvider: TSchema, kind: string): JsonSchema {
  return toStructural(managedStatusSchema(atProvider), `${kind}.status`);
}

export function imageCrdSpec(categories: string[]): CrdSpec {
  const spec = toStructural(imageSpecSchemas().ProxmoxImageSpecSchema, 'ProxmoxImage.spec');
  managedCrdDefaults(spec);
  const fp = schemaAt(spec, 'forProvider');
  addRule(schemaAt(fp, 'checksum'), {
    rule: "self.algorithm == 'sha256' ? size(self.value) == 64 : size(self.value) == 128",
    message: 'checksum.value must have 64 hex digits for sha256, 128 for sha512',
  });
  const cel = (x: string) => `'${x.replace(/\\/g, '\\\\').replace(/'/g, "\\'")}'`;
  addRule(fp, {
    rule: `!has(self.fileName) || !has(self.content) || (self.content == 'import' ? self.fileName.matches(${cel(FILE_NAME_RULES.import.pattern)}) : self.fileName.matches(${cel(FILE_NAME_RULES.iso.pattern)}))`,
    message: `fileName must end in ${FILE_NAME_RULES.import.allowed} for import content, ${FILE_NAME_RULES.iso.allowed} for iso content`,
  });
  schemaAt(fp, 'nodes')['x-kubernetes-list-type'] = 'set';
  return {
    kind: IMAGE_KIND,
    plural: 'proxmoximages',
    singular: 'proxmoximage',
    listKind: 'ProxmoxImageList',
    scope: 'Namespaced',
    categories,
    description:
      'A ProxmoxImage is a cloud image that Proxmox VE downloads onto a storage of each node (download-url, checksum verified), for ProxmoxTemplates and ProxmoxVMs to import.',
    properties: { spec, status: statusSchema(imageAtProviderSchema(), 'ProxmoxImage') },
    required: ['spec'],
    columns: [
      READY_COLUMN,
      SYNCED_COLUMN,
      { name: 'VOLID', type: 'string', jsonPath: '.status.atProvider.volid' },
      { name: 'SIZE', type: 'integer', jsonPath: '.status.atProvider.size' },
      { name: 'NODES', type: 'string', jsonPath: '.status.atProvider.nodes' },
      { name: 'URL', type: 'string', jsonPath: '.spec.forProvider.url', priority: 1 },
      AGE_COLUMN,
    ],
    status: true,
  };
}
