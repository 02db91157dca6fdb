/**
 * `validate`, `plan`, `gc`: the fleet commands (the CLI only wires options to these). They read
 * what src/workspace reads (manifests, --config, the state file) and never run the engine.
 *
 * `plan` also shows what apply would do to each resource, which only the local runtime can tell
 * (the engine's observe and drift, over the state file's view of the resource). Rather than
 * importing src/local (fleet and local sit side by side; neither imports the other), planCommand
 * takes that as a function, `changesOf`, which the CLI, the one place that wires both, passes
 * from src/local (planChanges). So fleet keeps the capacity plan and the output, local keeps the
 * runtime, and a test can pass its own changesOf. `plan` and `gc` load the engine and the client
 * when they run, so that `validate` starts without them.
 */
import { stringify } from 'yaml';
import { cliInstallation, installationOf } from '../api/provider-config.ts';
import type { LoadedProviderConfig } from '../api/provider-config-load.ts';
import type { ProxmoxImage } from '../api/proxmoximage.ts';
import type { ProxmoxVM } from '../api/proxmoxvm.ts';
import type { ResourcePlan } from '../vm/plan.ts';
import { chooseState, configAmong, loadConfigArg, nothingToApply, UsageError } from '../workspace/arguments.ts';
import { write as emit } from '../workspace/lines.ts';
import {
  formatProblem,
  formatWarning,
  loadManifests,
  type ManifestDoc,
  ManifestError,
} from '../workspace/manifests.ts';
import { RolloutError } from '../workspace/phases.ts';
import { readStateFile, type StateFile, StateFileError } from '../workspace/state-file.ts';
import type { GcFinding } from './gc.ts';
import type { SnippetFinding } from './gc-snippets.ts';
import type { PlanResult } from './plan.ts';
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

/** Exit 0 when the manifests are valid, 1 with every problem listed, 2 when there are none at all. */
export async function validateCommand(args: {
  files: string[];
  config?: string;
  output?: Output;
  out?: NodeJS.WriteStream;
}): Promise<number> {
  const config = args.config ? await loadConfigArg(args.config) : undefined;
  const r = validateManifests(args.files, config ? { config } : {});
  // Valid because there is nothing in it is no answer: refused as apply refuses it (exit 2).
  if (!r.problems.length && !r.resources && !r.images && !r.templates) throw nothingToApply(args.files);
  emit(
    args.out,
    render(r, args.output ?? 'table', () =>
      [
        ...r.warnings.map(formatWarning),
        ...(r.warnings.length ? [''] : []),
        r.problems.length
          ? `${r.problems.map(formatProblem).join('\n')}\n\n${r.problems.length} problem(s) in ${new Set(r.problems.map((p) => p.file)).size} file(s); ${r.resources} valid ProxmoxVM(s)`
          : `${r.resources} ProxmoxVM(s) in ${r.files} file(s): valid${r.warnings.length ? `, ${r.warnings.length} warning(s)` : ''}`,
      ].join('\n'),
    ),
  );
  return r.problems.length ? 1 : 0;
}

/** `plan --detailed-exitcode`: no violation, no refusal, but something would change. */
export const CHANGES_PENDING = 3;

/**
 * What apply would do to each of `manifests`, read from Proxmox and changing nothing; `stored`:
 * the state file's resources (apply plans a manifest against its resource there), `others`: the
 * manifests' other documents (Secrets for cloud-init references), `images`: their ProxmoxImages
 * (a file one of them downloads first is no refusal of a VM's create).
 */
export type ChangesOf = (
  config: LoadedProviderConfig,
  manifests: ProxmoxVM[],
  stored: ProxmoxVM[],
  others: ManifestDoc[],
  images: ProxmoxImage[],
) => Promise<ResourcePlan[]>;

/**
 * Capacity (requested against what Proxmox has) and, per resource, what apply would do, field by
 * field, read from the live VMs. Exit 1 on hard violations or refused changes; with
 * `detailedExitCode`, 3 when the plan changes something (0: nothing to do).
 */
export async function planCommand(args: {
  files: string[];
  /** What apply would do to each manifest, read from Proxmox (src/local planChanges; see the top of this file). */
  changesOf: ChangesOf;
  config?: string;
  state?: string;
  output?: Output;
  out?: NodeJS.WriteStream;
  detailedExitCode?: boolean;
}): Promise<number> {
  const m = loadManifests(args.files);
  if (m.problems.length) throw new ManifestError(m.problems);
  if (!m.vms.length && !m.images.length && !m.templates.length) throw nothingToApply(args.files);
  const config = await configFrom(args.config, () => m.others);
  if (!config)
    throw new UsageError('plan reads capacities live: pass --config FILE (a ProviderConfig with its Secret)');
  const vms: ProxmoxVM[] = m.vms.map((x) => x.vm);
  // Loaded here, not at start: `validate` (and `--help`) need none of the engine or the client.
  const [{ formatPlan, planFleet }, { describePlans, plansChange }, { planImages }] = await Promise.all([
    import('./plan.ts'),
    import('../vm/plan-text.ts'),
    import('../image/plan.ts'),
  ]);
  let p: PlanResult;
  try {
    p = await planFleet(vms, config);
  } catch (e) {
    if (e instanceof RolloutError) throw new UsageError(e.message); // a dependency cycle: fix the manifests
    throw e;
  }
  // Images and templates come before the VMs (apply makes them first).
  if (m.images.length || m.templates.length)
    p.images = await planImages(
      m.images.map((x) => x.obj),
      m.templates.map((x) => x.obj),
      config,
    );
  // What apply would do to each resource: the state file's view of it (as apply finds the file),
  // with the manifest's spec, observed against Proxmox without changing anything.
  const stored = readStateFile<ProxmoxVM>(chooseState({ state: args.state }, config));
  const changes = await args.changesOf(
    config,
    vms,
    stored?.objects ?? [],
    m.others,
    m.images.map((x) => x.obj),
  );
  emit(
    args.out,
    render({ ...p, changes, warnings: m.warnings }, args.output ?? 'table', () =>
      // (A site without quorum is among formatPlan's warnings already.)
      [
        ...m.warnings.map(formatWarning),
        ...(m.warnings.length ? [''] : []),
        formatPlan(p),
        '',
        ...describePlans(changes, { warnings: false, header: true }),
      ].join('\n'),
    ),
  );
  const refusedImage = (p.images ?? []).some((i) => i.action === 'refused');
  if (p.findings.some((f) => f.severity === 'violation') || changes.some((c) => c.action === 'refused') || refusedImage)
    return 1;
  const imagesChange = (p.images ?? []).some((i) => i.action === 'download' || i.action === 'build');
  return args.detailedExitCode && (plansChange(changes) || imagesChange) ? CHANGES_PENDING : 0;
}

/**
 * Report orphans (exit 0 when there is nothing to collect, 1 when there is); delete them with
 * `--delete --yes`. Scoped to the config's installation: other installations' VMs and copies are
 * listed, never deleted. The state file must be a good one (missing or unusable: a usage error,
 * exit 2, since exit 1 means "found something"): an unreadable file must never read as an empty
 * fleet, which would make every VM an orphan.
 */
export async function gcCommand(args: {
  config?: string;
  state?: string;
  files?: string[];
  delete?: boolean;
  yes?: boolean;
  includeHalfCreated?: boolean;
  /** Also delete stopped VMs of this installation whose uid the state file never held. */
  includeUnknown?: boolean;
  /** Also look for this installation's snippet files that no VM reads (gc-snippets.ts). */
  snippets?: boolean;
  output?: Output;
  out?: NodeJS.WriteStream;
  /** This process's clock (ms), which the scan start is taken from (tests: the simulator's). */
  now?: () => number;
}): Promise<number> {
  // Before anything is read or contacted: deleting needs the confirmation.
  if (args.delete && !args.yes) throw new UsageError('--delete removes VMs: add --yes (or --auto-approve) to confirm');
  const config = await configFrom(args.config, () => loadManifests(args.files ?? []).others);
  if (!config) throw new UsageError('gc needs --config FILE (a ProviderConfig with its Secret)');
  const { collect, INFORMATIONAL, knownResources, scanFleet } = await import('./gc.ts');
  const { formatGc, wrongStoreNote } = await import('./gc-text.ts');
  // The state file apply writes for this installation (or --state, or the old ./.provider-proxmox one).
  const stateFile = chooseState({ state: args.state }, config);
  const installation = installationOf(config.config, cliInstallation);
  const sites = config.config.spec.sites;
  const onlySite = sites.length === 1 ? sites[0]!.name : undefined;
  // Read at the scan and again right before each deletion (another process may apply meanwhile).
  const knownOf = (state: StateFile<ProxmoxVM>) => knownResources(state.objects, state.retired, onlySite);
  const readKnown = () => knownOf(readState(stateFile, installation));
  // Read once for the scan (the VMs' and the snippet files'); again right before each deletion.
  const state = readState(stateFile, installation);
  // The snippet scan's start, taken before anything is read (files written since are not its own).
  const scanStartedAt = (args.now ?? Date.now)();
  const policy = {
    installation,
    known: knownOf(state),
    includeUnknown: Boolean(args.includeUnknown),
    storeName: 'this state file',
  };
  const found = await scanFleet(config, policy, args.now ? { now: args.now } : {});
  let result = found;
  const toCollect = (f: GcFinding) => !INFORMATIONAL.has(f.kind);
  let code = found.some(toCollect) ? 1 : 0;
  if (args.delete) {
    const done = await collect(config, found, {
      includeHalfCreated: Boolean(args.includeHalfCreated),
      known: readKnown,
    });
    const same = (a: GcFinding, b: GcFinding) => a.site === b.site && a.vmid === b.vmid;
    // Everything found is listed: what was acted on with its outcome, the rest with why it was kept.
    result = found.map((f) => {
      const kept = keptBecause(f);
      return done.find((d) => same(d, f)) ?? (kept ? { ...f, action: kept } : f);
    });
    code = done.some((f) => f.action !== 'deleted') || found.some((f) => refused(f)) ? 1 : 0;
  }
  let snippets: SnippetFinding[] = [];
  let snippetTable: string | undefined;
  if (args.snippets) {
    const { collectSnippets, formatSnippets, scanSnippets } = await import('./gc-snippets.ts');
    // A file's identity is tried in the namespaces the state file knows, and none; a name cut to
    // 40 characters in the file's name, against the state file's full names.
    const objects = state.objects;
    const namespaces = ['default', '', ...objects.map((r) => r.metadata.namespace ?? '')];
    const names = objects.map((r) => r.metadata.name);
    const files = await scanSnippets(config, { installation, known: policy.known, namespaces, names }, scanStartedAt);
    snippets = args.delete ? await collectSnippets(config, files) : files;
    if (args.delete ? snippets.some((f) => f.action !== 'deleted') : snippets.length > 0) code = 1;
    snippetTable = formatSnippets(snippets);
  }
  const note = wrongStoreNote(found);
  const table = () => [formatGc(result, note ? { note } : {}), ...(snippetTable ? ['', snippetTable] : [])].join('\n');
  emit(args.out, render(args.snippets ? [...result, ...snippets] : result, args.output ?? 'table', table));
  return code;
}

/** A candidate gc would not delete (another fleet's, a stopped unknown without --include-unknown). */
function refused(f: GcFinding): boolean {
  return (f.kind === 'orphan' || f.kind === 'legacy-unknown') && !f.deletable;
}

function keptBecause(f: GcFinding): string | undefined {
  if (f.kind === 'half-created' || f.kind === 'stuck-lock') return 'kept: its resource exists (--include-half-created)';
  if (f.kind === 'managed-elsewhere') return undefined;
  return `kept: ${f.detail}`;
}

/** The state file of this installation, or a usage error naming the file (never an empty fleet). */
function readState(file: string, installation: string): StateFile<ProxmoxVM> {
  let state: StateFile<ProxmoxVM> | undefined;
  try {
    state = readStateFile<ProxmoxVM>(file);
  } catch (e) {
    if (e instanceof StateFileError) throw new UsageError(e.message);
    throw e;
  }
  if (!state)
    throw new UsageError(
      `gc must know which resources exist and reads them from the state file: ${file}: no such file (use --state FILE)`,
    );
  if (state.installation !== undefined && state.installation !== installation)
    throw new UsageError(
      `${file}: this state file belongs to installation '${state.installation}', but the ProviderConfig says '${installation}': gc would take the other installation's VMs for its own. Pass the state file of '${installation}' with --state, or the ProviderConfig of '${state.installation}'`,
    );
  return state;
}
