/**
 * `validate`: every problem of a set of manifests in one run, each with file:line:column, the
 * field, what was found and what is allowed. Nothing is contacted; a ProviderConfig (given or
 * found among the manifests) lets it check site references too.
 *
 * A document with schema problems is still checked for everything else (range limits, sites,
 * ProviderConfig, duplicate names, phases and dependencies), so that one run lists all of it.
 */
import { readFileSync } from 'node:fs';
import { ConfigError, type LoadedProviderConfig, parseProviderConfig } from '../api/provider-config-load.ts';
import type { ProxmoxVM } from '../api/proxmoxvm.ts';
import { needsSnippet, parseUserData, validateSpec } from '../vm/spec.ts';
import {
  checkProxmoxVM,
  didYouMean,
  loadManifests,
  type ManifestDoc,
  type ManifestProblem,
} from '../workspace/manifests.ts';
import {
  comparePhases,
  DEFAULT_PHASE,
  DEPENDS_ANNOTATION,
  manifestKey,
  PHASE_ANNOTATION,
  parseDepends,
} from '../workspace/phases.ts';

export interface ValidateResult {
  files: number;
  resources: number;
  /** ProxmoxImages and ProxmoxTemplates: with `resources`, whether there is anything to apply. */
  images: number;
  templates: number;
  problems: ManifestProblem[];
  /** Valid but rarely meant (loadManifests' warnings): shown, exit 0 all the same. */
  warnings: ManifestProblem[];
}

/** Kinds a manifest directory of ours may hold besides ProxmoxVM; anything else of our group is a typo. */
const KNOWN_KINDS = [
  'ProxmoxVM',
  'ProxmoxImage',
  'ProxmoxTemplate',
  'ProxmoxVMScaleSet',
  'ProviderConfig',
  'ClusterProviderConfig',
  'ProviderConfigUsage',
  'ClusterProviderConfigUsage',
];

function str(v: unknown): string | undefined {
  return typeof v === 'string' ? v : undefined;
}

/** `fastYaml: false`: read the manifests with `yaml` alone (loadManifests), for the tests that compare. */
export function validateManifests(
  paths: string[],
  opts: { config?: LoadedProviderConfig; fastYaml?: boolean } = {},
): ValidateResult {
  const m = loadManifests(paths, process.cwd(), opts.fastYaml === false ? { fastYaml: false } : {});
  const problems = [...m.problems];
  const at = (doc: ManifestDoc, field: string, key = false) => doc.lineOf(field, { key }) ?? { line: doc.line };
  let config = opts.config;
  if (!config) {
    const doc = m.others.find((d) => d.kind === 'ProviderConfig' || d.kind === 'ClusterProviderConfig');
    if (doc) {
      try {
        config = parseProviderConfig(readFileSync(doc.file, 'utf8'), doc.file);
      } catch (e) {
        if (e instanceof ConfigError) problems.push({ file: doc.file, line: doc.line, message: e.message });
        else throw e;
      }
    }
  }
  for (const d of m.others) {
    if (KNOWN_KINDS.includes(d.kind) || d.kind === 'Secret') continue;
    const ours = d.apiVersion.startsWith('proxmox.sankofa.io/');
    const hint = didYouMean(d.kind, KNOWN_KINDS);
    if (!ours && !hint) continue; // somebody else's manifest (a Deployment...): not ours to judge
    problems.push({
      file: d.file,
      ...at(d, 'kind'),
      field: 'kind',
      message: d.kind
        ? `unknown kind '${d.kind}'${hint ? ` (did you mean '${hint}'?)` : ` (known: ${KNOWN_KINDS.join(', ')})`}`
        : `required (one of ${KNOWN_KINDS.join(', ')})`,
    });
  }

  // Every ProxmoxVM document, valid or not: the rejected ones are checked for what can be checked.
  const docs: Array<{ doc: ManifestDoc; vm: ProxmoxVM; reported: Set<string> }> = m.vms.map((x) => ({
    doc: x.doc,
    vm: x.vm,
    reported: new Set<string>(),
  }));
  const seen = new Map(m.vms.map((x) => [manifestKey(x.vm), x.doc]));
  for (const doc of m.rejected) {
    const md = doc.value.metadata as Record<string, unknown> | undefined;
    const name = str(md?.name);
    if (name) {
      const key = `${str(md?.namespace) ?? 'default'}/${name}`;
      const prev = seen.get(key);
      if (prev) {
        const pl = prev.lineOf('metadata.name')?.line ?? prev.line;
        problems.push({
          file: doc.file,
          ...at(doc, 'metadata.name'),
          field: 'metadata.name',
          message: `duplicate ProxmoxVM ${key} (also in ${prev.file}:${pl})`,
        });
      } else seen.set(key, doc);
    }
    docs.push({
      doc,
      vm: doc.value as unknown as ProxmoxVM,
      reported: new Set(checkProxmoxVM(doc).map((p) => p.field ?? '')),
    });
  }
  const names = new Set(docs.map((x) => str((x.doc.value.metadata as Record<string, unknown> | undefined)?.name)));

  for (const { vm, doc, reported } of docs) {
    const push = (field: string, message: string, key = false) => {
      if ([...reported].some((r) => r && (field === r || field.startsWith(`${r}.`) || field.startsWith(`${r}[`))))
        return; // the schema check already said what is wrong with this field
      problems.push({ file: doc.file, ...at(doc, field, key), field, message });
    };
    const fp = (vm.spec as unknown as Record<string, unknown> | undefined)?.forProvider as
      | Record<string, unknown>
      | undefined;
    if (fp && typeof fp === 'object' && !Array.isArray(fp)) {
      let specProblems: ReturnType<typeof validateSpec> = [];
      try {
        specProblems = validateSpec(vm);
      } catch {
        // a field of the wrong type that the schema check reported already
      }
      for (const p of specProblems) push(p.field, p.message);
      if (config) {
        const cfgName = config.config.metadata.name;
        const ref = str((vm.spec as { providerConfigRef?: { name?: unknown } }).providerConfigRef?.name) ?? 'default';
        if (ref !== cfgName) {
          const hint = didYouMean(ref, [cfgName]);
          push(
            'spec.providerConfigRef.name',
            `unknown ProviderConfig '${ref}' (known: ${cfgName}${hint ? `; did you mean '${hint}'?` : ''})`,
          );
        }
        const sites = config.config.spec.sites;
        const siteName = str(fp.site);
        const node = str(fp.node);
        if (siteName && !sites.some((s) => s.name === siteName)) {
          push(
            'spec.forProvider.site',
            `unknown site '${siteName}' (sites of ${cfgName}: ${sites.map((s) => s.name).join(', ')})`,
          );
        }
        const site = sites.find((s) => s.name === siteName) ?? (sites.length === 1 ? sites[0] : undefined);
        if (site && node && site.nodes?.length && !site.nodes.includes(node)) {
          push(
            'spec.forProvider.node',
            `node '${node}' is not a node of site ${site.name} (nodes: ${site.nodes.join(', ')})`,
          );
        }
        if (!siteName && sites.length > 1) {
          push(
            'spec.forProvider.site',
            `required: ${cfgName} has several sites (${sites.map((s) => s.name).join(', ')})`,
            true,
          );
        }
        let snippet = false;
        try {
          snippet = needsSnippet(vm);
        } catch {
          // userData of the wrong type: the schema check reported it
        }
        if (site && snippet && !site.ssh)
          push(
            'spec.forProvider.userData',
            `has keys the Proxmox VE API cannot set (${parseUserData(vm.spec.forProvider.userData).unsupported.join(', ')}): they go into a cloud-init snippet uploaded over SSH, and site ${site.name} of ${cfgName} has no ssh. Fix: add spec.sites[].ssh to the ProviderConfig (docs/cloud-init.md), or set spec.forProvider.cloudInit.userDataMode: NativeOnly to apply only users and SSH keys`,
          );
        if (snippet && vm.spec.forProvider.cloudInit?.passwordSecretRef)
          push(
            'spec.forProvider.cloudInit.passwordSecretRef',
            'cannot be used with a userData that needs a snippet: Proxmox VE ignores cipassword once `cicustom user=` is set. Put a hashed password into userData (users[].hashed_passwd, from `mkpasswd -m sha-512`), or remove passwordSecretRef',
          );
      }
    }
    const annotations = (vm.metadata as { annotations?: Record<string, unknown> } | undefined)?.annotations;
    const phase = annotations?.[PHASE_ANNOTATION];
    if (phase !== undefined && (typeof phase !== 'string' || !/^[A-Za-z0-9][A-Za-z0-9._-]*$/.test(phase))) {
      push(
        `metadata.annotations.${PHASE_ANNOTATION}`,
        `phase must be a number or a name (letters, digits, '.', '_', '-'); found ${JSON.stringify(phase)}`,
      );
    }
    const deps = annotations?.[DEPENDS_ANNOTATION];
    const self = str((vm.metadata as { name?: unknown } | undefined)?.name);
    for (const d of parseDepends(str(deps))) {
      if (d === self) push(`metadata.annotations.${DEPENDS_ANNOTATION}`, `'${d}' depends on itself`);
      else if (!names.has(d)) {
        // (Never the resource itself: web-9's depends-on: web-10 suggested web-9.)
        const hint = didYouMean(
          d,
          [...names].filter((n): n is string => Boolean(n) && n !== self),
        );
        push(
          `metadata.annotations.${DEPENDS_ANNOTATION}`,
          `depends on '${d}', which is not among the manifests${hint ? ` (did you mean '${hint}'?)` : ''}`,
        );
      }
    }
  }
  // References: apply (and validate) see only the manifests, so what a reference names must be among them.
  const imageNames = new Set(m.images.map((x) => `${x.obj.metadata.namespace}/${x.obj.metadata.name}`));
  const templateNames = new Set(m.templates.map((x) => `${x.obj.metadata.namespace}/${x.obj.metadata.name}`));
  for (const { obj, doc } of m.templates) {
    const ref = `${obj.metadata.namespace}/${obj.spec.forProvider.imageRef.name}`;
    if (!imageNames.has(ref)) {
      const hint = didYouMean(
        obj.spec.forProvider.imageRef.name,
        m.images.map((x) => x.obj.metadata.name),
      );
      problems.push({
        file: doc.file,
        ...at(doc, 'spec.forProvider.imageRef.name'),
        field: 'spec.forProvider.imageRef.name',
        message: `names no ProxmoxImage among the manifests (${ref}; a reference resolves in the template's namespace)${hint ? ` (did you mean '${hint}'?)` : ''}`,
      });
    }
    if (config) {
      const site = obj.spec.forProvider.site;
      const sites = config.config.spec.sites;
      if (site && !sites.some((x) => x.name === site))
        problems.push({
          file: doc.file,
          ...at(doc, 'spec.forProvider.site'),
          field: 'spec.forProvider.site',
          message: `unknown site '${site}' (sites of ${config.config.metadata.name}: ${sites.map((x) => x.name).join(', ')})`,
        });
    }
  }
  for (const { vm, doc } of docs) {
    const ref = (vm.spec?.forProvider as { templateRef?: { name?: unknown } } | undefined)?.templateRef?.name;
    if (typeof ref !== 'string') continue;
    const key = `${vm.metadata?.namespace ?? 'default'}/${ref}`;
    if (!templateNames.has(key)) {
      const hint = didYouMean(
        ref,
        m.templates.map((x) => x.obj.metadata.name),
      );
      problems.push({
        file: doc.file,
        ...at(doc, 'spec.forProvider.templateRef.name'),
        field: 'spec.forProvider.templateRef.name',
        message: `names no ProxmoxTemplate among the manifests (${key}; a reference resolves in the VM's namespace)${hint ? ` (did you mean '${hint}'?)` : ''}`,
      });
    }
  }
  // Dependencies must be satisfiable: no cycles, nothing that waits for a later phase.
  const depGraph = new Map<string, { doc: ManifestDoc; deps: string[]; phase: string }>();
  for (const { vm, doc } of docs) {
    const md = vm.metadata as { name?: unknown; annotations?: Record<string, unknown> } | undefined;
    const name = str(md?.name);
    if (!name || depGraph.has(name)) continue;
    const deps = parseDepends(str(md?.annotations?.[DEPENDS_ANNOTATION])).filter((d) => d !== name && names.has(d));
    depGraph.set(name, { doc, deps, phase: str(md?.annotations?.[PHASE_ANNOTATION]) ?? DEFAULT_PHASE });
  }
  const depField = `metadata.annotations.${DEPENDS_ANNOTATION}`;
  for (const [name, n] of depGraph) {
    for (const d of n.deps) {
      const dp = depGraph.get(d)?.phase ?? DEFAULT_PHASE;
      if (comparePhases(dp, n.phase) > 0)
        problems.push({
          file: n.doc.file,
          ...at(n.doc, depField),
          field: depField,
          message: `'${name}' (phase ${n.phase}) depends on '${d}', which is in the later phase ${dp}: it would wait forever`,
        });
    }
  }
  const color = new Map<string, 1 | 2>();
  const reportedCycles = new Set<string>();
  const visit = (name: string, path: string[]): void => {
    if (color.get(name) === 2) return;
    if (color.get(name) === 1) {
      const cycle = [...path.slice(path.indexOf(name)), name];
      const id = [...cycle.slice(0, -1)].sort().join(',');
      if (reportedCycles.has(id)) return;
      reportedCycles.add(id);
      const n = depGraph.get(name)!;
      problems.push({
        file: n.doc.file,
        ...at(n.doc, depField),
        field: depField,
        message: `dependency cycle: ${cycle.join(' -> ')}`,
      });
      return;
    }
    color.set(name, 1);
    for (const d of depGraph.get(name)?.deps ?? []) visit(d, [...path, name]);
    color.set(name, 2);
  };
  for (const name of depGraph.keys()) visit(name, []);

  problems.sort(
    (a, b) => a.file.localeCompare(b.file) || (a.line ?? 0) - (b.line ?? 0) || (a.column ?? 0) - (b.column ?? 0),
  );
  const files = new Set([
    ...m.vms.map((x) => x.doc.file),
    ...m.others.map((d) => d.file),
    ...m.rejected.map((d) => d.file),
    ...m.images.map((x) => x.doc.file),
    ...m.templates.map((x) => x.doc.file),
    ...m.problems.map((p) => p.file),
  ]);
  return {
    files: files.size,
    resources: m.vms.length,
    images: m.images.length,
    templates: m.templates.length,
    problems,
    warnings: m.warnings,
  };
}
