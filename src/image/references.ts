/**
 * How images, templates and VMs refer to each other, resolved the way Crossplane resolves the
 * references of namespaced managed resources (by name, in the referring object's namespace), and
 * who uses whom: a ProxmoxImage is used by the ProxmoxTemplates built from it and the ProxmoxVMs
 * that import its file; a ProxmoxTemplate by the ProxmoxVMs that clone it. While an object has
 * users its deletion waits (ImageInUse, TemplateInUse). Both runtimes answer from their stores
 * through a Catalog, so the rule is the same with and without a cluster.
 *
 * The reasons these kinds report are defined here (the VM's live in src/vm/conditions.ts).
 */
import type { ProxmoxImage } from '../api/proxmoximage.ts';
import { imageFileName } from '../api/proxmoximage.ts';
import type { ProxmoxTemplate, TemplateNode } from '../api/proxmoxtemplate.ts';
import type { ProxmoxVM } from '../api/proxmoxvm.ts';
import { getCondition } from '../engine/resource.ts';
import { ReasonedError } from '../engine/types.ts';
import type { VmClientOptions } from '../vm/context.ts';

/** Reasons only a change of the spec, the storage or the site fixes (apply stops waiting for them). */
export const IMAGE_PERMANENT_REASONS: ReadonlySet<string> = new Set([
  'InvalidSpec',
  'ChecksumMismatch',
  'DownloadFailed',
  'DownloadUnsupported',
  'ImportContentUnsupported',
  'StorageContentMissing',
  'StorageNotFound',
  'StorageCannotHoldImages',
  'StorageCannotHoldTemplates',
  'NodeNotFound',
  'ImageNotImportable',
  'TemplateBuildFailed',
]);

/** The referred object is not there or not Ready yet: wait (retried with the normal backoff). */
export const REFERENCE_NOT_READY = 'ReferenceNotReady';

export function refuse(reason: string, message: string, retryable = false): ReasonedError {
  const e = new ReasonedError(reason, message, retryable);
  e.permanent = !retryable && IMAGE_PERMANENT_REASONS.has(reason);
  return e;
}

/** What a runtime's stores hold, for references and usages. */
export interface Catalog {
  images(): Iterable<ProxmoxImage>;
  templates(): Iterable<ProxmoxTemplate>;
  vms(): Iterable<ProxmoxVM>;
}

const ns = (o: { metadata: { namespace?: string } }) => o.metadata.namespace ?? 'default';

function isReady(o: ProxmoxImage | ProxmoxTemplate): boolean {
  return getCondition(o, 'Ready')?.status === 'True';
}

/** The ProxmoxImage `ref` names, in the namespace of `from`. */
export function imageOf(cat: Catalog, ref: { name: string }, from: { metadata: { namespace?: string } }) {
  for (const i of cat.images()) if (i.metadata.name === ref.name && ns(i) === ns(from)) return i;
  return undefined;
}

export function templateOf(cat: Catalog, ref: { name: string }, from: { metadata: { namespace?: string } }) {
  for (const t of cat.templates()) if (t.metadata.name === ref.name && ns(t) === ns(from)) return t;
  return undefined;
}

/** The image a template is built from, Ready: else ReferenceNotReady with what is missing. */
export function readyImage(cat: Catalog, t: ProxmoxTemplate): ProxmoxImage {
  const ref = t.spec.forProvider.imageRef;
  const img = imageOf(cat, ref, t);
  if (!img)
    throw refuse(
      REFERENCE_NOT_READY,
      `spec.forProvider.imageRef: no ProxmoxImage ${ns(t)}/${ref.name}; create it (the template is built once it is Ready)`,
      true,
    );
  if (!isReady(img) || !img.status?.atProvider?.volid || img.metadata.deletionTimestamp)
    throw refuse(
      REFERENCE_NOT_READY,
      `ProxmoxImage ${ns(t)}/${ref.name} is not Ready yet${img.metadata.deletionTimestamp ? ' (it is being deleted)' : ''}: ${getCondition(img, 'Synced')?.message ?? getCondition(img, 'Ready')?.message ?? 'not reconciled yet'}`,
      true,
    );
  return img;
}

/** `Kind namespace/name` of every template and VM that uses the image. */
export function imageUsers(cat: Catalog, img: ProxmoxImage): string[] {
  const out: string[] = [];
  for (const t of cat.templates())
    if (t.spec.forProvider.imageRef.name === img.metadata.name && ns(t) === ns(img))
      out.push(`ProxmoxTemplate ${ns(t)}/${t.metadata.name}`);
  for (const v of cat.vms()) if (importsFileOf(v, img)) out.push(`ProxmoxVM ${ns(v)}/${v.metadata.name}`);
  return out.sort();
}

/**
 * Whether the VM's `image:` names the image's file, as a create looks for it (preflight.ts
 * resolveSource): the bare file name, the volid the image has, or the volid it will have on its
 * storage (with its content type, or either while the site's version decides it).
 */
function importsFileOf(vm: ProxmoxVM, img: ProxmoxImage): boolean {
  const want = vm.spec.forProvider.image;
  if (!want || vm.spec.forProvider.template || vm.spec.forProvider.templateRef) return false;
  const fp = img.spec.forProvider;
  const file = imageFileName(fp);
  const storage = fp.storage ?? 'local';
  return (
    want === file ||
    want === img.status?.atProvider?.volid ||
    (fp.content ? [fp.content] : ['import', 'iso']).some((c) => want === `${storage}:${c}/${file}`)
  );
}

/**
 * The ProxmoxImage among `images` (the same apply's) that brings the file a VM's `image:` names to
 * `node` of the VM's site (a plan's VmClientOptions.imageToCome): apply downloads images before it
 * creates VMs, so the plan's create check plans the import of that file where it finds none yet.
 * `defaultSite`: the site of an object that names none (the config's only one).
 */
export function imageToCome(
  vm: ProxmoxVM,
  images: readonly ProxmoxImage[],
  defaultSite: string | undefined,
  node: string,
): ProxmoxImage | undefined {
  const site = vm.spec.forProvider.site ?? defaultSite;
  return images.find((img) => {
    const fp = img.spec.forProvider;
    if ((fp.site ?? defaultSite) !== site || (fp.nodes && !fp.nodes.includes(node))) return false;
    return importsFileOf(vm, img);
  });
}

/**
 * A plan's VmClientOptions.imageToCome over `images` (imageToCome), and the image each planned
 * resource's create waits for, by the resource's key, once the plan has asked.
 */
export function planImages(
  images: readonly ProxmoxImage[],
  defaultSite: string | undefined,
  keyOf: (r: ProxmoxVM) => string,
): { imageToCome: NonNullable<VmClientOptions['imageToCome']>; waitsFor: Map<string, ProxmoxImage> } {
  const waitsFor = new Map<string, ProxmoxImage>();
  const hook = (r: ProxmoxVM, node: string) => {
    const img = imageToCome(r, images, defaultSite, node);
    if (!img) return undefined;
    waitsFor.set(keyOf(r), img);
    const fp = img.spec.forProvider;
    return { storage: fp.storage ?? 'local', file: imageFileName(fp), ...(fp.content ? { content: fp.content } : {}) };
  };
  return { imageToCome: hook, waitsFor };
}

/** `namespace/name` of every VM that clones the template. */
export function templateUsers(cat: Catalog, t: ProxmoxTemplate): string[] {
  const out: string[] = [];
  for (const v of cat.vms())
    if (v.spec.forProvider.templateRef?.name === t.metadata.name && ns(v) === ns(t))
      out.push(`${ns(v)}/${v.metadata.name}`);
  return out.sort();
}

/**
 * The template VM a ProxmoxVM's templateRef resolves to on `node`, or ReferenceNotReady naming
 * what is missing. Used by the VM's preflight (src/vm/preflight.ts) through VmClientOptions.
 */
export function templateOnNode(cat: Catalog, vm: ProxmoxVM, node: string): TemplateNode {
  const ref = vm.spec.forProvider.templateRef!;
  const t = templateOf(cat, ref, vm);
  if (!t)
    throw refuse(
      REFERENCE_NOT_READY,
      `spec.forProvider.templateRef: no ProxmoxTemplate ${ns(vm)}/${ref.name}; create it (the VM is cloned once it is built)`,
      true,
    );
  const a = t.status?.atProvider;
  const entry = a?.nodes?.find((n) => n.node === node && n.version === a.version && n.ready);
  if (!entry) {
    const built = (a?.nodes ?? []).filter((n) => n.version === a?.version && n.ready).map((n) => n.node);
    throw refuse(
      REFERENCE_NOT_READY,
      `ProxmoxTemplate ${ns(vm)}/${ref.name} is not built for node ${node} yet${built.length ? ` (built for: ${built.join(', ')})` : ''}: ${getCondition(t, 'Synced')?.status === 'False' ? getCondition(t, 'Synced')?.message : (getCondition(t, 'Ready')?.message ?? 'not reconciled yet')}`,
      true,
    );
  }
  return entry;
}
