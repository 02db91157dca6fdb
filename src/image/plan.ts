/**
 * What `apply` would do for ProxmoxImages and ProxmoxTemplates, read live and changing nothing:
 * per image, download, adopt a file that is there, or the refusal (a storage without the content
 * type, a version without `import`); per template, the nodes it would be built on. `plan` shows it
 * before the VMs (src/fleet/plan.ts), as apply runs them first.
 */
import type { LoadedProviderConfig } from '../api/provider-config-load.ts';
import { imageContent, imageFileName, type ProxmoxImage } from '../api/proxmoximage.ts';
import type { ProxmoxTemplate } from '../api/proxmoxtemplate.ts';
import { clientForSite } from '../proxmox/site.ts';
import { FILE_STORAGES } from './image-external.ts';

/** One ProxmoxImage or ProxmoxTemplate: what apply would do for it on each node. */
export interface ImagePlan {
  kind: 'ProxmoxImage' | 'ProxmoxTemplate';
  key: string;
  action: 'download' | 'adopt' | 'present' | 'build' | 'refused';
  nodes: string[];
  message: string;
}

/**
 * What apply would do for the images (download, adopt a file that is there, or a refusal: a
 * storage without the content type, a version without `import`) and the templates (build per
 * node, or keep those there), read live and changing nothing. Runs before the VMs in apply.
 */
export async function planImages(
  images: ProxmoxImage[],
  templates: ProxmoxTemplate[],
  config: LoadedProviderConfig,
): Promise<ImagePlan[]> {
  const out: ImagePlan[] = [];
  const sites = config.config.spec.sites;
  const siteOf = (s: string | undefined) => s ?? (sites.length === 1 ? sites[0]!.name : undefined);
  const key = (o: { metadata: { namespace?: string; name: string } }) =>
    `${o.metadata.namespace ?? 'default'}/${o.metadata.name}`;
  const present = new Map<string, string[]>();
  for (const img of images) {
    const fp = img.spec.forProvider;
    const site = siteOf(fp.site);
    const k = key(img);
    if (!site || !sites.some((x) => x.name === site)) {
      out.push({
        kind: 'ProxmoxImage',
        key: k,
        action: 'refused',
        nodes: [],
        message: 'no such site (fix spec.forProvider.site)',
      });
      continue;
    }
    const client = clientForSite(config, site);
    try {
      const caps = await client.capabilities();
      if (fp.content === 'import' && !caps.importContent) {
        out.push({
          kind: 'ProxmoxImage',
          key: k,
          action: 'refused',
          nodes: [],
          message: `PVE ${caps.version.text} has no 'import' content (8.3)`,
        });
        continue;
      }
      const content = imageContent(fp, caps.importContent);
      const storage = fp.storage ?? 'local';
      const volid = `${storage}:${content}/${imageFileName(fp)}`;
      const nodes = (await client.clusterResources('node')).filter((n) => n.status === 'online').map((n) => n.node!);
      const targets = fp.nodes ?? nodes;
      const have: string[] = [];
      const missing: string[] = [];
      let refused: string | undefined;
      for (const n of targets) {
        const s = (await client.nodeStorages(n)).find((x) => x.storage === storage);
        if (!s?.content.split(',').includes(content) || !FILE_STORAGES.has(s.type)) {
          refused = `storage '${storage}' on node ${n} does not hold '${content}' files`;
          break;
        }
        const vols = await client.storageContent(n, storage, { content });
        (vols.some((v) => v.volid === volid) ? have : missing).push(n);
      }
      present.set(k, have.concat(missing));
      if (refused) out.push({ kind: 'ProxmoxImage', key: k, action: 'refused', nodes: [], message: refused });
      else if (missing.length)
        out.push({
          kind: 'ProxmoxImage',
          key: k,
          action: 'download',
          nodes: missing,
          message: `download ${volid} (${fp.checksum.algorithm} verified by Proxmox VE)`,
        });
      else
        out.push({
          kind: 'ProxmoxImage',
          key: k,
          action: have.length ? 'adopt' : 'present',
          nodes: have,
          message: `${volid} is there`,
        });
    } catch (e) {
      out.push({
        kind: 'ProxmoxImage',
        key: k,
        action: 'refused',
        nodes: [],
        message: e instanceof Error ? e.message : String(e),
      });
    } finally {
      await client.close();
    }
  }
  for (const t of templates) {
    const fp = t.spec.forProvider;
    const imgKey = `${t.metadata.namespace ?? 'default'}/${fp.imageRef.name}`;
    const nodes = fp.nodes ?? present.get(imgKey) ?? [];
    out.push({
      kind: 'ProxmoxTemplate',
      key: key(t),
      action: present.has(imgKey) ? 'build' : 'refused',
      nodes,
      message: present.has(imgKey)
        ? `a template VM per node on ${fp.storage ?? 'local-lvm'} (kept where one of this version is there), from ProxmoxImage ${imgKey}`
        : `imageRef names no ProxmoxImage among the manifests (${imgKey})`,
    });
  }
  return out;
}

/** The images' lines of the plan. */
export function formatImagePlans(plans: ImagePlan[]): string[] {
  return plans.map(
    (p) => `  ${p.action} ${p.kind} ${p.key}${p.nodes.length ? ` on ${p.nodes.join(', ')}` : ''}: ${p.message}`,
  );
}
