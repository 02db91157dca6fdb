/** `validate`, `plan`, `gc`: the fleet commands (the CLI only wires options to these). */
import { readFileSync } from 'node:fs';
import { stringify } from 'yaml';
import type { LoadedProviderConfig } from '../api/provider-config.ts';
import type { ProxmoxVM } from '../api/proxmoxvm.ts';
import { configAmong, DEFAULT_STATE, write as emit, loadConfigArg, UsageError } from '../local/commands.ts';
import { formatProblem, loadManifests, type ManifestDoc, ManifestError } from '../local/manifests.ts';
import { vmidHoldersOf } from '../vm/connector.ts';
import { collect, formatGc, type GcFinding, scanFleet } from './gc.ts';
import { RolloutError } from './phases.ts';
import { formatPlan, type PlanResult, planFleet } from './plan.ts';
import { validateManifests } from './validate.ts';

type Output = 'table' | 'json' | 'yaml';

function render(value: unknown, output: Output, human: () => string): string {
  if (output === 'json') return JSON.stringify(value, null, 2);
  if (output === 'yaml') return stringify(value);
  return human();
}

/** --config FILE, or the ProviderConfig among the manifests (`others` is read only without --config). */
async function configFrom(
  config: string | undefined,
  others: () => ManifestDoc[],
): Promise<LoadedProviderConfig | undefined> {
  return config ? loadConfigArg(config) : configAmong(others());
}

/** Exit 0 when the manifests are valid, 1 with every problem listed. */
export async function validateCommand(args: {
  files: string[];
  config?: string;
  output?: Output;
  out?: NodeJS.WriteStream;
}): Promise<number> {
  const config = args.config ? await loadConfigArg(args.config) : undefined;
  const r = validateManifests(args.files, config ? { config } : {});
  emit(
    args.out,
    render(r, args.output ?? 'table', () =>
      r.problems.length
        ? `${r.problems.map(formatProblem).join('\n')}\n\n${r.problems.length} problem(s) in ${new Set(r.problems.map((p) => p.file)).size} file(s); ${r.resources} valid ProxmoxVM(s)`
        : `${r.resources} ProxmoxVM(s) in ${r.files} file(s): valid`,
    ),
  );
  return r.problems.length ? 1 : 0;
}

/** Exit 0 when the fleet fits, 1 on hard violations. */
export async function planCommand(args: {
  files: string[];
  config?: string;
  output?: Output;
  out?: NodeJS.WriteStream;
}): Promise<number> {
  const m = loadManifests(args.files);
  if (m.problems.length) throw new ManifestError(m.problems);
  const config = await configFrom(args.config, () => m.others);
  if (!config)
    throw new UsageError('plan reads capacities live: pass --config FILE (a ProviderConfig with its Secret)');
  const vms: ProxmoxVM[] = m.vms.map((x) => x.vm);
  let p: PlanResult;
  try {
    p = await planFleet(vms, config);
  } catch (e) {
    if (e instanceof RolloutError) throw new UsageError(e.message); // a dependency cycle: fix the manifests
    throw e;
  }
  emit(
    args.out,
    render(p, args.output ?? 'table', () => formatPlan(p)),
  );
  return p.findings.some((f) => f.severity === 'violation') ? 1 : 0;
}

/** Report orphans (exit 0 when none, 1 when some); delete them with `--delete --yes`. */
export async function gcCommand(args: {
  config?: string;
  state?: string;
  files?: string[];
  delete?: boolean;
  yes?: boolean;
  includeHalfCreated?: boolean;
  output?: Output;
  out?: NodeJS.WriteStream;
}): Promise<number> {
  // Before anything is read or contacted: deleting needs the confirmation.
  if (args.delete && !args.yes) throw new UsageError('--delete removes VMs: add --yes to confirm');
  const config = await configFrom(args.config, () => loadManifests(args.files ?? []).others);
  if (!config) throw new UsageError('gc needs --config FILE (a ProviderConfig with its Secret)');
  const stateFile = args.state ?? DEFAULT_STATE;
  let objects: ProxmoxVM[];
  try {
    objects = (JSON.parse(readFileSync(stateFile, 'utf8')) as { objects?: ProxmoxVM[] }).objects ?? [];
  } catch (e) {
    throw new UsageError(
      `gc must know which resources exist and reads them from the state file: ${stateFile}: ${(e as NodeJS.ErrnoException).code === 'ENOENT' ? 'no such file' : (e as Error).message} (use --state FILE)`,
    );
  }
  const known = new Set(objects.map((o) => o.metadata.uid));
  const sites = config.config.spec.sites;
  const onlySite = sites.length === 1 ? sites[0]!.name : undefined;
  const found = await scanFleet(config, known, (site) =>
    vmidHoldersOf(
      objects,
      site,
      onlySite,
      (o) => `${o.metadata.namespace ? `${o.metadata.namespace}/` : ''}${o.metadata.name}`,
    ),
  );
  let result = found;
  let code = found.length ? 1 : 0;
  if (args.delete) {
    const done = await collect(config, found, { includeHalfCreated: Boolean(args.includeHalfCreated) });
    const same = (a: GcFinding, b: GcFinding) => a.site === b.site && a.vmid === b.vmid;
    // Everything found is listed: what was acted on with its outcome, the rest with why it was kept.
    result = found.map(
      (f) => done.find((d) => same(d, f)) ?? { ...f, action: 'kept: its resource exists (--include-half-created)' },
    );
    code = done.some((f) => f.action !== 'deleted') ? 1 : 0;
  }
  emit(
    args.out,
    render(result, args.output ?? 'table', () => formatGc(result)),
  );
  return code;
}
