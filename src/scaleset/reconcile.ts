/**
 * ProxmoxVMScaleSet: keeps `replicas` ProxmoxVMs named `<set>-<index>`, made from the template,
 * spread over the site's nodes (round robin by index when the template pins no node), owned by
 * the set. Scale down removes the highest indexes first (the newest replicas), so the oldest,
 * longest-serving VMs stay. Replicas resolve credentials through their ProviderConfig like every
 * ProxmoxVM (the seed's scale-set controller had none).
 */
import { createHash } from 'node:crypto';
import type { ProxmoxVM } from '../api/proxmoxvm.ts';
import { API_VERSION } from '../api/proxmoxvm.ts';
import type { ProxmoxVMScaleSet } from '../api/scaleset.ts';

export const LABEL_SCALESET = 'proxmox.sankofa.io/scaleset';
export const ANNOTATION_TEMPLATE_HASH = 'proxmox.sankofa.io/template-hash';
export const ANNOTATION_INDEX = 'proxmox.sankofa.io/replica-index';

export function templateHash(set: ProxmoxVMScaleSet): string {
  return createHash('sha256').update(JSON.stringify(set.spec.template)).digest('hex').slice(0, 16);
}

export interface ScaleActions {
  create: ProxmoxVM[];
  update: ProxmoxVM[];
  delete: ProxmoxVM[];
  status: {
    replicas: number;
    readyReplicas: number;
    updatedReplicas: number;
    selector: string;
    observedGeneration: number;
  };
}

/** Desired replica `index` of a set; `nodes` are the site's nodes for spreading. */
export function desiredReplica(set: ProxmoxVMScaleSet, index: number, nodes: string[]): ProxmoxVM {
  const t = structuredClone(set.spec.template);
  const fp = { ...t.spec.forProvider };
  const name = `${set.metadata.name}-${index}`;
  fp.name = fp.name ? `${fp.name}-${index}` : name;
  if (!fp.node && nodes.length) fp.node = nodes[index % nodes.length]!;
  return {
    apiVersion: API_VERSION,
    kind: 'ProxmoxVM',
    metadata: {
      name,
      namespace: set.metadata.namespace ?? 'default',
      uid: '',
      generation: 0,
      labels: { ...t.metadata?.labels, ...set.spec.selector?.matchLabels, [LABEL_SCALESET]: set.metadata.name },
      annotations: {
        ...t.metadata?.annotations,
        [ANNOTATION_TEMPLATE_HASH]: templateHash(set),
        [ANNOTATION_INDEX]: String(index),
      },
      ownerReferences: [
        {
          apiVersion: set.apiVersion,
          kind: set.kind,
          name: set.metadata.name,
          uid: set.metadata.uid,
          controller: true,
          blockOwnerDeletion: true,
        },
      ],
    } as ProxmoxVM['metadata'],
    spec: { ...t.spec, forProvider: fp },
  };
}

/** What to do to bring `children` to the set's spec. */
export function planScale(set: ProxmoxVMScaleSet, children: ProxmoxVM[], nodes: string[]): ScaleActions {
  const want = set.metadata.deletionTimestamp ? 0 : set.spec.replicas;
  const hash = templateHash(set);
  const byIndex = new Map<number, ProxmoxVM>();
  for (const c of children) {
    const i = Number(c.metadata.annotations?.[ANNOTATION_INDEX] ?? /-(\d+)$/.exec(c.metadata.name)?.[1] ?? Number.NaN);
    if (Number.isInteger(i)) byIndex.set(i, c);
  }
  const create: ProxmoxVM[] = [];
  const update: ProxmoxVM[] = [];
  const del: ProxmoxVM[] = [];
  for (let i = 0; i < want; i++) {
    const cur = byIndex.get(i);
    const desired = desiredReplica(set, i, nodes);
    if (!cur) create.push(desired);
    else if (cur.metadata.annotations?.[ANNOTATION_TEMPLATE_HASH] !== hash && !cur.metadata.deletionTimestamp) {
      // Keep the node it runs on: moving a VM is not an update.
      const spec = {
        ...desired.spec,
        forProvider: {
          ...desired.spec.forProvider,
          ...(cur.spec.forProvider.node ? { node: cur.spec.forProvider.node } : {}),
        },
      };
      update.push({
        ...cur,
        metadata: { ...cur.metadata, annotations: { ...cur.metadata.annotations, [ANNOTATION_TEMPLATE_HASH]: hash } },
        spec,
      });
    }
  }
  // Scale down: highest index first.
  const extra = [...byIndex.entries()]
    .filter(([i, c]) => i >= want && !c.metadata.deletionTimestamp)
    .sort((a, b) => b[0] - a[0]);
  for (const [, c] of extra) del.push(c);
  const live = children.filter((c) => !c.metadata.deletionTimestamp);
  const ready = live.filter((c) => c.status?.conditions?.some((x) => x.type === 'Ready' && x.status === 'True'));
  const updated = live.filter((c) => c.metadata.annotations?.[ANNOTATION_TEMPLATE_HASH] === hash);
  return {
    create,
    update,
    delete: del,
    status: {
      replicas: live.length,
      readyReplicas: ready.length,
      updatedReplicas: updated.length,
      selector: `${LABEL_SCALESET}=${set.metadata.name}`,
      observedGeneration: set.metadata.generation,
    },
  };
}
