/**
 * ProxmoxTemplate: a cloud-init-ready template VM built from a ProxmoxImage on each node of a site
 * (once, on a shared storage): the image imported as the boot disk (`import-from`), a cloud-init
 * drive, the guest agent, a serial console and the ownership marker, then converted with `POST
 * .../template`. ProxmoxVMs clone it with `spec.forProvider.templateRef`. Versioned: a changed
 * image (or build setting) builds a new template VM next to the old one, which is destroyed once
 * no linked clone depends on it any more.
 *
 * ```yaml
 * apiVersion: proxmox.sankofa.io/v1alpha1
 * kind: ProxmoxTemplate
 * metadata: { name: ubuntu-2204, namespace: default }
 * spec:
 *   forProvider:
 *     imageRef: { name: ubuntu-2204 }
 *     storage: local-lvm
 * ```
 */
import Type, { type Static } from 'typebox';
import type { Managed } from '../engine/resource.ts';
import { builtOnce } from './built-once.ts';
import type { CrdSpec } from './crd.ts';
import {
  AGE_COLUMN,
  managedCrdDefaults,
  managedSpecFields,
  ObjectNameSchema,
  READY_COLUMN,
  SYNCED_COLUMN,
  statusSchema,
} from './proxmoximage.ts';
import { BRIDGE_PATTERN } from './proxmoxvm.ts';
import { schemaAt, toStructural } from './structural.ts';

export const TEMPLATE_KIND = 'ProxmoxTemplate';

export type TemplateForProvider = Static<ReturnType<typeof templateSpecSchemas>['TemplateForProviderSchema']>;

/**
 * The forProvider and spec schemas of a ProxmoxTemplate, built on first use
 * (proxmoxvm-schema.ts's vmSchemas says why).
 */
function buildSpecSchemas() {
  const TemplateForProviderSchema = Type.Object(
    {
      imageRef: Type.Object(
        { name: ObjectNameSchema('Name of the ProxmoxImage, in the namespace of this template.') },
        {
          additionalProperties: false,
          description:
            'The ProxmoxImage to build from (same namespace, as Crossplane resolves references of namespaced resources). The template is built once the image is Ready on the node; a change of the image builds a new template version.',
        },
      ),
      storage: Type.Optional(
        Type.String({
          minLength: 1,
          description:
            'Storage of the boot disk and the cloud-init drive; it must hold `images` and be lvmthin, zfspool, rbd or file based (dir, nfs, cifs...; qcow2 there), where Proxmox VE can make a template and linked clones of it. LVM (thick) is refused: it has no base volumes. A shared storage (rbd, nfs...) gets one template for the whole site. Default: local-lvm.',
        }),
      ),
      nodes: Type.Optional(
        Type.Array(Type.String({ minLength: 1 }), {
          description: 'The nodes to build a template on. Default: every node the image is present on.',
        }),
      ),
      name: Type.Optional(
        Type.String({
          minLength: 1,
          maxLength: 80,
          pattern: '^[a-zA-Z0-9]([a-zA-Z0-9-]*[a-zA-Z0-9])?$',
          description:
            "Prefix of the template VMs' names: each is named <name>-<version> (the version: 8 hex digits of the image and build settings). Default: metadata.name.",
        }),
      ),
      cpu: Type.Optional(
        Type.Integer({
          minimum: 1,
          maximum: 128,
          description: 'Cores of the template (clones set their own). Default: 1.',
        }),
      ),
      memory: Type.Optional(
        Type.Integer({
          minimum: 128,
          maximum: 65536,
          description: 'Memory of the template in MiB (clones set their own). Default: 1024.',
        }),
      ),
      network: Type.Optional(
        Type.String({ pattern: BRIDGE_PATTERN, description: 'Bridge of the template’s net0. Default: vmbr0.' }),
      ),
      site: Type.Optional(
        Type.String({
          minLength: 1,
          description:
            "The site (a spec.sites[].name of the ProviderConfig); required when the ProviderConfig has several sites. It must be the image's site. Default: the ProviderConfig's only site.",
        }),
      ),
    },
    { additionalProperties: false, description: 'The template to build and where.' },
  );

  const ProxmoxTemplateSpecSchema = Type.Object(
    { forProvider: TemplateForProviderSchema, ...managedSpecFields() },
    {
      additionalProperties: false,
      description: "The desired state: the template (forProvider) and Crossplane's fields.",
    },
  );

  return { TemplateForProviderSchema, ProxmoxTemplateSpecSchema };
}

/** TemplateForProviderSchema and ProxmoxTemplateSpecSchema, built once. */
export const templateSpecSchemas: () => ReturnType<typeof buildSpecSchemas> = builtOnce(buildSpecSchemas);

/**
 * The observed state's schemas, built when a CRD is written: validate reads no status
 * (proxmoximage.ts's imageAtProviderSchema says why that matters).
 */
function buildAtProvider() {
  const TemplateNodeSchema = Type.Object({
    node: Type.String({ description: 'The node VMs clone onto.' }),
    vmid: Type.Integer({ minimum: 100, description: 'VMID of the template VM that serves this node.' }),
    host: Type.String({ description: 'The node the template VM is on (another one on a shared storage).' }),
    version: Type.String({ description: 'The version the template VM was built for.' }),
    ready: Type.Boolean({ description: 'The template VM is built and converted (`template: 1`).' }),
    storage: Type.String({ description: 'The storage of its boot disk.' }),
    linkedClone: Type.Boolean({ description: 'Its storage supports linked clones.' }),
  });

  const TemplateAtProviderSchema = Type.Object(
    {
      version: Type.Optional(Type.String({ description: 'The version the spec and the image ask for now.' })),
      image: Type.Optional(Type.String({ description: 'The image volume the version is built from.' })),
      nodes: Type.Optional(
        Type.Array(TemplateNodeSchema, { description: 'Per node, the template VM of the current version.' }),
      ),
      retiring: Type.Optional(
        Type.Array(
          Type.Object({
            vmid: Type.Integer({ minimum: 100, description: 'VMID of an old template VM.' }),
            host: Type.String({ description: 'Its node.' }),
            version: Type.String({ description: 'Its version.' }),
            blockedBy: Type.Optional(
              Type.Array(Type.Integer(), { description: 'The VMIDs of the linked clones that still depend on it.' }),
            ),
          }),
          {
            description:
              'Template VMs of earlier versions (or duplicates): each is destroyed once no linked clone depends on it.',
          },
        ),
      ),
      tasks: Type.Optional(
        Type.Array(
          Type.Object({
            node: Type.String({ description: 'The node the task runs on.' }),
            vmid: Type.Integer({ description: 'The template VM.' }),
            upid: Type.String({ description: 'The task (UPID).' }),
            action: Type.String({ description: 'create, template or destroy.' }),
          }),
          { description: 'Proxmox VE tasks in flight.' },
        ),
      ),
      users: Type.Optional(
        Type.Array(Type.String(), {
          description:
            'The ProxmoxVMs that refer to this template (namespace/name): while there are any, a deletion waits (TemplateInUse).',
        }),
      ),
      step: Type.Optional(Type.String({ description: 'What the provider is doing now.' })),
      site: Type.Optional(Type.String({ description: 'The site of the template.' })),
    },
    { description: 'The observed state of the template.' },
  );
  return { TemplateNodeSchema, TemplateAtProviderSchema };
}

/** The observed state's schema (see buildAtProvider). */
export const templateAtProviderSchema = () => buildAtProvider().TemplateAtProviderSchema;

export type TemplateAtProvider = Static<ReturnType<typeof buildAtProvider>['TemplateAtProviderSchema']>;
export type TemplateNode = Static<ReturnType<typeof buildAtProvider>['TemplateNodeSchema']>;
export type ProxmoxTemplate = Managed<TemplateForProvider, TemplateAtProvider>;

export function templateCrdSpec(categories: string[]): CrdSpec {
  const spec = toStructural(templateSpecSchemas().ProxmoxTemplateSpecSchema, 'ProxmoxTemplate.spec');
  managedCrdDefaults(spec);
  schemaAt(spec, 'forProvider.nodes')['x-kubernetes-list-type'] = 'set';
  return {
    kind: TEMPLATE_KIND,
    plural: 'proxmoxtemplates',
    singular: 'proxmoxtemplate',
    listKind: 'ProxmoxTemplateList',
    scope: 'Namespaced',
    categories,
    description:
      'A ProxmoxTemplate is a cloud-init-ready template VM built from a ProxmoxImage on each node (once on a shared storage), for ProxmoxVMs to clone with templateRef.',
    properties: { spec, status: statusSchema(templateAtProviderSchema(), 'ProxmoxTemplate') },
    required: ['spec'],
    columns: [
      READY_COLUMN,
      SYNCED_COLUMN,
      { name: 'IMAGE', type: 'string', jsonPath: '.spec.forProvider.imageRef.name' },
      { name: 'VERSION', type: 'string', jsonPath: '.status.atProvider.version' },
      { name: 'VMIDS', type: 'string', jsonPath: '.status.atProvider.nodes[*].vmid' },
      AGE_COLUMN,
    ],
    status: true,
  };
}
