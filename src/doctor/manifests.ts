/**
 * What ProxmoxVM manifests need from a site (for `doctor -f DIR`): nodes, bridges, storages,
 * images, templates and pools, with the file:line that asks for each. Lenient: it reads the
 * seed's fields (`spec.forProvider.{site,node,network,storage,disk,image,template,...}`) and the
 * richer ones (`networks[].bridge`, `disks[].storage`), from ProxmoxVM and ProxmoxVMScaleSet
 * documents, and ignores everything else. Validation proper is the engine's job.
 */
import { readdir, readFile, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { isMap, isPair, isScalar, LineCounter, parseAllDocuments, type YAMLMap } from 'yaml';

/** The forProvider fields whose problems doctor reports at their own line. */
export type NeedField = 'site' | 'node' | 'network' | 'networks' | 'storage' | 'disks' | 'image' | 'template' | 'pool';

export interface VmNeeds {
  /** `file:line` of the resource (its `spec:`). */
  where: string;
  /** `file:line` of each field it has: a problem points at the line to fix, not at `spec:`. */
  at: Partial<Record<NeedField, string>>;
  kind: string;
  name: string;
  site: string | undefined;
  node: string | undefined;
  bridges: string[];
  storages: string[];
  image: string | undefined;
  /** Template VM: a vmid or a name. */
  template: string | undefined;
  pool: string | undefined;
}

function str(v: unknown): string | undefined {
  return typeof v === 'string' && v !== '' ? v : typeof v === 'number' ? String(v) : undefined;
}

function forProviderOf(doc: Record<string, unknown>): Record<string, unknown> | undefined {
  const spec = doc.spec as Record<string, unknown> | undefined;
  if (!spec || typeof spec !== 'object') return undefined;
  if (doc.kind === 'ProxmoxVMScaleSet') {
    const t = spec.template as { spec?: { forProvider?: unknown } } | undefined;
    const fp = t?.spec?.forProvider;
    return fp && typeof fp === 'object' ? (fp as Record<string, unknown>) : undefined;
  }
  const fp = spec.forProvider;
  return fp && typeof fp === 'object' ? (fp as Record<string, unknown>) : undefined;
}

export function needsFromYaml(text: string, file: string): VmNeeds[] {
  const lc = new LineCounter();
  const out: VmNeeds[] = [];
  for (const d of parseAllDocuments(text, { lineCounter: lc })) {
    if (d.errors.length) continue;
    const v = d.toJS() as Record<string, unknown> | null;
    if (!v || typeof v !== 'object') continue;
    if (v.kind !== 'ProxmoxVM' && v.kind !== 'ProxmoxVMScaleSet') continue;
    const fp = forProviderOf(v);
    if (!fp) continue;
    let line: number | undefined;
    const contents = d.contents;
    if (isMap(contents)) {
      const specPair = (contents as YAMLMap).items.find((p) => isPair(p) && isScalar(p.key) && p.key.value === 'spec');
      const r = specPair && isPair(specPair) && isScalar(specPair.key) ? specPair.key.range : contents.range;
      if (r) line = lc.linePos(r[0]).line;
    }
    const base = v.kind === 'ProxmoxVMScaleSet' ? ['spec', 'template', 'spec', 'forProvider'] : ['spec', 'forProvider'];
    const at: VmNeeds['at'] = {};
    for (const f of ['site', 'node', 'network', 'networks', 'storage', 'disks', 'image', 'template', 'pool'] as const) {
      const node = d.getIn([...base, f], true) as { range?: [number, number, number] } | undefined;
      if (node?.range) at[f] = `${file}:${lc.linePos(node.range[0]).line}`;
    }
    const meta = (v.metadata ?? {}) as Record<string, unknown>;
    const bridges = new Set<string>();
    const storages = new Set<string>();
    const net = str(fp.network);
    if (net) bridges.add(net);
    if (Array.isArray(fp.networks))
      for (const n of fp.networks as Array<Record<string, unknown>>) if (str(n?.bridge)) bridges.add(str(n.bridge)!);
    const st = str(fp.storage);
    if (st) storages.add(st);
    if (Array.isArray(fp.disks))
      for (const x of fp.disks as Array<Record<string, unknown>>) if (str(x?.storage)) storages.add(str(x.storage)!);
    const tpl = fp.template;
    const template =
      str(tpl) ??
      (tpl && typeof tpl === 'object'
        ? (str((tpl as Record<string, unknown>).vmid) ?? str((tpl as Record<string, unknown>).name))
        : undefined);
    out.push({
      where: `${file}${line ? `:${line}` : ''}`,
      at,
      kind: String(v.kind),
      name: str(meta.name) ?? '(unnamed)',
      site: str(fp.site),
      node: str(fp.node),
      bridges: [...bridges],
      storages: [...storages],
      image: str(fp.image),
      template,
      pool: str(fp.pool),
    });
  }
  return out;
}

/** Every `*.yaml` / `*.yml` under a directory (or the file itself). */
export async function needsFromPath(path: string): Promise<VmNeeds[]> {
  const st = await stat(path);
  if (st.isFile()) return needsFromYaml(await readFile(path, 'utf8'), path);
  const out: VmNeeds[] = [];
  const entries = (await readdir(path, { withFileTypes: true })).sort((a, b) => a.name.localeCompare(b.name));
  for (const e of entries) {
    const p = join(path, e.name);
    if (e.isDirectory()) out.push(...(await needsFromPath(p)));
    else if (/\.ya?ml$/.test(e.name)) out.push(...needsFromYaml(await readFile(p, 'utf8'), p));
  }
  return out;
}
