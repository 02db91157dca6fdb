/**
 * `apply`: make Proxmox hold what the manifests say, phase by phase, after showing the plan read
 * from Proxmox and a confirmation; `--dry-run` stops after the plan.
 */
import { stringify } from 'yaml';
import type { ProxmoxImage } from '../api/proxmoximage.ts';
import type { ProxmoxVM } from '../api/proxmoxvm.ts';
import { getCondition } from '../engine/resource.ts';
import type { ResourcePlan } from '../vm/plan.ts';
import { describePlans, plansChange, planWarnings } from '../vm/plan-text.ts';
import {
  chooseState,
  cliInstallationOf,
  configAmong,
  loadConfigArg,
  nothingToApply,
  stateFileFor,
  UsageError,
} from '../workspace/arguments.ts';
import { formatWarning, type ManifestDoc } from '../workspace/manifests.ts';
import {
  loadFleetFile,
  manifestKey,
  nextAdmissions,
  PHASE_ANNOTATION,
  phaseToPrepare,
  planRollout,
  type ResourceState,
  RolloutError,
  type RolloutPlan,
} from '../workspace/phases.ts';
import { readStateFile } from '../workspace/state-file.ts';
import { fleetFileProblems, formatFleetProblems } from './fleet-file.ts';
import { outputFor } from './output.ts';
import { formatRows } from './render.ts';
import { ageSpan } from './resource-view.ts';
import {
  type ApplyArgs,
  loadVms,
  missingDirs,
  openRuntime,
  planChanges,
  planTarget,
  removeEmptyDirs,
  resolveConfig,
} from './setup.ts';

/**
 * Reconcile the manifests phase by phase until every VM is Ready (exit 0) or failed clearly
 * (exit 1), as reconciles of this run observed them: every resource is reconciled on every run, so
 * what changed in Proxmox since the state file was written (a VM stopped, resized or destroyed by
 * hand) is repaired, not taken for Ready.
 */
export async function applyCommand(args: ApplyArgs): Promise<number> {
  // (loadVms refuses every manifest problem, these kinds' included)
  const { vms, others, images, templates, warnings } = loadVms(args.files);
  if (!vms.length && !images.length && !templates.length) throw nothingToApply(args.files);
  // stdout: the table or, with -o json|yaml, the document alone; the human lines go to o.say (src/local/output.ts).
  const o = outputFor(args);
  for (const w of warnings) o.note(formatWarning(w));
  // A fleet file with a problem stops apply as a bad flag does (exit 2), each problem at its line.
  const fleetProblems = args.fleet ? fleetFileProblems(args.fleet, vms) : [];
  if (fleetProblems.length) throw new UsageError(formatFleetProblems(fleetProblems));
  let plan: RolloutPlan;
  try {
    plan = planRollout(vms, {
      ...(args.fleet ? { fleet: loadFleetFile(args.fleet) } : {}),
      ...(args.maxParallel ? { maxParallel: args.maxParallel } : {}),
    });
  } catch (e) {
    if (e instanceof RolloutError) throw new UsageError(e.message);
    throw e;
  }
  const byKey = new Map(vms.map((v) => [manifestKey(v), v]));
  const keys = [...byKey.keys()];
  // With a fleet file the phase comes from the file: record it where `status` shows it.
  if (args.fleet)
    for (const p of plan.phases)
      for (const k of p.members) {
        const vm = byKey.get(k)!;
        vm.metadata.annotations = { ...vm.metadata.annotations, [PHASE_ANNOTATION]: p.name };
      }
  if (args.rebootPolicy) for (const vm of vms) vm.spec.forProvider.rebootPolicy ??= args.rebootPolicy;
  if (args.dryRun)
    return dryRun(
      args,
      plan,
      byKey,
      others,
      images.map((x) => x.obj),
    );
  const config = await resolveConfig(args, others);
  const stateFile = chooseState(args, config);
  const made = missingDirs(stateFile);
  const rt = openRuntime(config, stateFile, args, others);
  // Before the changes start: nothing was written, so no state directory is left behind either.
  const closeUnchanged = async () => {
    await rt.close();
    removeEmptyDirs(made);
  };
  let planned: ResourcePlan[];
  const firstPhase = new Set(plan.phases[0]?.members ?? []);
  try {
    planned = await rt.plan(
      keys.map((k) => planTarget(rt.store.getSync(k), byKey.get(k)!)),
      // Unless a confirmation stands between the plan and the changes, the reads of the creates
      // that start at once (the first phase's, or all without --wait) start now.
      {
        readAhead: (k) => !args.confirm && (args.noWait || firstPhase.has(k)),
        images: images.map((x) => x.obj),
      },
    );
  } catch (e) {
    await closeUnchanged();
    throw e;
  }
  if (!args.quiet) o.say([...describePlans(planned, { header: true }), ''].join('\n'));
  if (
    args.confirm &&
    plansChange(planned) &&
    !(await args.confirm(planned).catch(async (e) => {
      await closeUnchanged();
      throw e;
    }))
  ) {
    o.say('Apply cancelled: nothing was changed.');
    await closeUnchanged();
    return 1;
  }
  const progress = o.progress();
  // The VMs this run rebooted (a status written with the step Rebooting): the Done line counts
  // what happened, and the plan's action says only whether a reboot was expected.
  const rebooted = new Set<string>();
  let watching = false;
  const stopWatching = rt.store.addIndex((key, obj) => {
    if (watching && obj?.status?.atProvider?.step === 'Rebooting') rebooted.add(key);
  });
  watching = true;
  const abort = new AbortController();
  const onSignal = () => abort.abort();
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);
  if (args.signal?.aborted) abort.abort();
  args.signal?.addEventListener('abort', onSignal, { once: true });
  try {
    // Images first, then templates, then the VMs: each waits for what it is made from.
    rt.applyImages(
      'ProxmoxImage',
      images.map((x) => x.obj),
    );
    const imageKeys = images.map((x) => manifestKey(x.obj));
    const templateKeys = templates.map((x) => manifestKey(x.obj));
    const imagesReady = () => imageKeys.every((k) => rt.stateOfImage('ProxmoxImage', k) === 'ready');
    const templatesReady = () => templateKeys.every((k) => rt.stateOfImage('ProxmoxTemplate', k) === 'ready');
    const imageFailed = () =>
      [
        ...imageKeys.map((k) => ['ProxmoxImage', k] as const),
        ...templateKeys.map((k) => ['ProxmoxTemplate', k] as const),
      ].filter(([kind, k]) => rt.stateOfImage(kind, k) === 'failed');
    let templatesApplied = false;
    // Resume: what an earlier run already started keeps going, with the manifests' current spec.
    rt.applyManifests(keys.filter((k) => rt.store.getSync(k)).map((k) => byKey.get(k)!));
    const started = Date.now();
    let blocked: string | undefined;
    const prepared = new Set<string>();
    const res = await rt.runUntil({
      timeoutMs: args.timeoutMs ?? 30 * 60_000,
      signal: abort.signal,
      // A phase whose last VM boots prepares the next one (below): a check then.
      wakeWhenBooting: !args.noWait && plan.phases.length > 1,
      check: () => {
        if (imageFailed().length) return 'fail';
        if (!templatesApplied && imagesReady()) {
          rt.applyImages(
            'ProxmoxTemplate',
            templates.map((x) => x.obj),
          );
          templatesApplied = true;
        }
        if (!templatesApplied || !templatesReady()) {
          blocked = templatesApplied
            ? 'the ProxmoxTemplates are being built'
            : 'the ProxmoxImages are being downloaded';
          if (!args.quiet)
            progress.update(
              rt.rows().filter((r) => byKey.has(r.key)),
              `${args.header ?? 'Applying'}: ${blocked} (${((Date.now() - started) / 1000).toFixed(0)}s)`,
            );
          return 'continue';
        }
        // Where each resource stands, read once per check (it is asked for every key several times
        // below): a check costs O(N), not a multiple of it.
        const states = new Map(keys.map((k) => [k, rt.stateOf(k)]));
        const stateNow = (k: string) => states.get(k) ?? rt.stateOf(k);
        const adm = nextAdmissions(plan, stateNow, { noWait: Boolean(args.noWait) });
        if (adm.admit.length) {
          rt.applyManifests(adm.admit.map((k) => byKey.get(k)!));
          for (const k of adm.admit) states.set(k, rt.stateOf(k));
        }
        blocked = adm.blocked?.reason;
        // While the last phase started boots, the next one's snippets go up (runtime.prepare).
        if (adm.blocked && !args.noWait) {
          const ahead = phaseToPrepare(plan, stateNow, (k) => rt.booting(k)).filter((k) => !prepared.has(k));
          for (const k of ahead) prepared.add(k);
          if (ahead.length) void rt.prepare(ahead.map((k) => planTarget(undefined, byKey.get(k)!)));
        }
        args.onTick?.(new Map(states));
        if (!args.quiet) {
          const rows = rt.rows().filter((r) => byKey.has(r.key));
          const ready = keys.filter((k) => stateNow(k) === 'ready').length;
          const phases = plan.phases
            .map((p) => `${p.name}:${p.members.filter((m) => stateNow(m) === 'ready').length}/${p.members.length}`)
            .join(' ');
          // Not a terminal: the per-VM lines, and a line whenever the phases move on (when there are phases).
          const phaseLine = `phases ${phases}${blocked ? ` — waiting: ${blocked}` : ''}`;
          if (plan.phases.length > 1) progress.log(phaseLine);
          progress.update(
            rows,
            `${args.header ?? 'Applying'} ${keys.length} VM${keys.length === 1 ? '' : 's'}, ${ready} ready (${((Date.now() - started) / 1000).toFixed(0)}s) ${phaseLine}`,
          );
        }
        if (keys.every((k) => stateNow(k) === 'ready')) return 'ok';
        if (adm.stuck) return 'fail';
        return 'continue';
      },
    });
    progress.done();
    for (const [kind, k] of imageFailed()) {
      const obj = (kind === 'ProxmoxImage' ? rt.images : rt.templates).getSync(k);
      const c = obj?.status?.conditions?.find((x) => x.type === 'Synced');
      o.say(`${kind} ${k} failed: ${c?.reason}: ${c?.message}`);
    }
    const rows = rt.rows().filter((r) => byKey.has(r.key));
    if (o.machine) o.result(formatRows(rows, o.format));
    else o.resultTable(rows);
    const notStarted = keys.filter((k) => !rt.store.getSync(k));
    const failed = rows.filter((r) => !(r.ready === 'True' && r.synced === 'True'));
    if (abort.signal.aborted) o.say('\ninterrupted: run apply again to continue where it stopped');
    // Not ready: as this run saw them (a row may still show an earlier run's Ready).
    else if (res.timedOut)
      o.say(`\ntimed out with ${keys.filter((k) => rt.stateOf(k) !== 'ready').length} VM(s) not ready`);
    else if (failed.length || notStarted.length) {
      o.say(`\n${failed.length} VM(s) failed; the MESSAGE column says why and how to fix it`);
      const offline = keys.filter((k) => rt.offlineTooLong(k));
      if (offline.length)
        o.say(
          `${offline.length} VM(s) on a node offline for longer than --offline-grace (${ageSpan(0, args.offlineGraceMs ?? 0).text}): ${offline.map((k) => k.split('/')[1]).join(', ')}; run apply again once the node is back (Proxmox: pvecm status)`,
        );
      if (notStarted.length) {
        // Why: the gate of an earlier phase (one line), or a dependency that is not Ready (one line each).
        const name = (k: string) => k.split('/')[1]!;
        const lines = [`${notStarted.length} VM(s) not started: ${blocked ?? 'an earlier phase did not become Ready'}`];
        for (const k of notStarted) {
          const bad = (plan.dependsOn.get(k) ?? []).filter((d) => rt.stateOf(d) !== 'ready');
          if (bad.length)
            lines.push(
              `  ${name(k)} waits for ${bad.map((d) => `${name(d)} (${rt.stateOf(d) === 'absent' ? 'not started' : rt.stateOf(d)})`).join(', ')}`,
            );
        }
        o.say(lines.join('\n'));
      }
    } else o.say(rows.length === 1 ? '\nthe VM is ready' : `\nall ${rows.length} VMs ready`);
    if (!args.quiet)
      o.say(
        done(
          planned,
          // Ended ok: every VM was ready when the run's check said so; a reconcile that ran on
          // since (a guest poll) may count one as progressing again ("all 2 VMs ready" over
          // "1 not finished").
          (k) => (res.ok ? 'ready' : rt.stateOf(k)),
          rebooted,
          keys.map((k) => rt.store.getSync(k)),
        ),
      );
    // Interrupted is never "done", even when every VM happened to be Ready by then.
    return res.ok && !abort.signal.aborted ? 0 : 1;
  } finally {
    stopWatching();
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
    args.signal?.removeEventListener('abort', onSignal);
    await rt.close();
  }
}

/**
 * What apply did, VM by VM: a VM this run saw Ready counts as its planned action (create, adopt,
 * update...), one that failed as failed, one never started or still in progress (a timeout, an
 * interruption) as such; a reboot counts when this run rebooted the VM. The VMs that wait for a
 * reboot are named.
 */
function done(
  planned: ResourcePlan[],
  stateOf: (key: string) => ResourceState,
  rebooted: ReadonlySet<string>,
  after: Array<ProxmoxVM | undefined>,
): string {
  const counts = new Map<string, number>();
  const add = (what: string) => counts.set(what, (counts.get(what) ?? 0) + 1);
  for (const p of planned) {
    const state = stateOf(p.key);
    if (state === 'failed') add('failed');
    else if (state === 'absent') add('not started');
    else if (state === 'progressing') add('not finished');
    else if (p.action === 'update' || p.action === 'update-reboot') add('updated');
    else if (p.action !== 'reboot') add(DONE_OF[p.action]);
    // A planned reboot that turned out not to be needed (the VM was rebooted by hand meanwhile).
    else if (!rebooted.has(p.key)) add('unchanged');
    if (rebooted.has(p.key)) add('rebooted');
  }
  const n = (what: string) => counts.get(what) ?? 0;
  const some = (what: string, label = what) => (n(what) ? `, ${n(what)} ${label}` : '');
  const waiting = after.filter(
    (r): r is ProxmoxVM => r !== undefined && getCondition(r, 'PendingReboot')?.status === 'True',
  );
  const lines = [
    `Done: ${n('created')} created, ${n('adopted')} adopted, ${n('updated')} updated, ${n('rebooted')} rebooted, ${n('unchanged')} unchanged${some('replaced')}${some('duplicates', 'duplicate VM(s) destroyed')}, ${n('failed')} failed${some('not started')}${some('not finished')}.`,
  ];
  if (waiting.length)
    lines.push(
      `${waiting.length} VM(s) run with changes Proxmox applies only at the next boot: ${waiting.map((r) => `${r.metadata.name} (${(r.status?.atProvider?.pendingChanges ?? []).join(', ')})`).join('; ')}. Reboot them, or apply with --reboot-policy IfNeeded (spec.forProvider.rebootPolicy).`,
    );
  return lines.join('\n');
}

/** The Done line's word for a planned action carried out (update and reboot are counted apart). */
const DONE_OF: Record<Exclude<ResourcePlan['action'], 'update' | 'update-reboot' | 'reboot'>, string> = {
  create: 'created',
  adopt: 'adopted',
  'no-op': 'unchanged',
  // (a change the plan refused, whose VM this run still found Ready: nothing was changed)
  refused: 'unchanged',
  replace: 'replaced',
  'retire-duplicate': 'duplicates',
};

/** `phase 1 (at most 2 at once): 3 VM(s), after the previous phase is Ready`. */
function phaseLine(p: RolloutPlan['phases'][number], first: boolean, noWait: boolean): string {
  return `phase ${p.name}${p.maxParallel ? ` (at most ${p.maxParallel} at once)` : ''}: ${p.members.length} VM(s)${first ? '' : noWait ? ', at once (--no-wait)' : ', after the previous phase is Ready'}`;
}

/**
 * The plan without changing anything. With a ProviderConfig, read from Proxmox: as text, phase by
 * phase; with `-o json|yaml`, the ResourcePlan[] alone on stdout (the document `plan -o json` has
 * as `changes`), the header line on stderr. Without one, from the manifests and the state file
 * alone (text only: there is no plan to type).
 */
async function dryRun(
  args: ApplyArgs,
  plan: RolloutPlan,
  byKey: Map<string, ProxmoxVM>,
  others: ManifestDoc[],
  images: ProxmoxImage[],
): Promise<number> {
  const o = outputFor(args);
  // The state file is found as apply finds it (the config, when there is one, names the
  // installation); it is only read, and Proxmox only asked.
  const config = args.loadedConfig ?? (args.config ? await loadConfigArg(args.config) : configAmong(others));
  if (!config && o.machine)
    throw new UsageError(
      `apply --dry-run -o ${o.format} prints the plan read from Proxmox: pass --config FILE or put a ProviderConfig in the manifests (without one, the dry run prints text)`,
    );
  const where = stateFileFor({
    state: args.state,
    installation: config ? cliInstallationOf(config) : undefined,
    cwd: args.cwd,
  });
  if ('file' in where && where.note) o.note(where.note);
  const data = 'file' in where ? readStateFile<ProxmoxVM>(where.file) : undefined;
  const existing = new Set((data?.objects ?? []).map(manifestKey));
  const header = 'Dry run: Proxmox was only read; nothing was changed.';
  if (config) {
    const planned = await planChanges(config, [...byKey.values()], data?.objects ?? [], others, images, args);
    if (o.machine) {
      if (!o.quiet) o.say(header);
      o.result(o.format === 'json' ? JSON.stringify(planned, null, 2) : stringify(planned));
      return 0;
    }
    const lines = [header, ''];
    const byPlan = new Map(planned.map((p) => [p.key, p]));
    for (const p of plan.phases) {
      lines.push(phaseLine(p, plan.phases[0] === p, Boolean(args.noWait)));
      lines.push(
        ...describePlans(
          p.members.map((k) => byPlan.get(k)!),
          {
            unchanged: true,
            summary: false,
            suffix: (x) => (plan.dependsOn.get(x.key) ? `; after ${plan.dependsOn.get(x.key)!.join(', ')}` : ''),
          },
        ),
      );
    }
    o.result([...lines, ...planWarnings(planned), describePlans(planned).at(-1)!].join('\n'));
    return 0;
  }
  const lines: string[] = ['Dry run without a ProviderConfig: from the manifests and the state file alone.', ''];
  for (const p of plan.phases) {
    lines.push(phaseLine(p, plan.phases[0] === p, Boolean(args.noWait)));
    for (const k of p.members) {
      const fp = byKey.get(k)!.spec.forProvider;
      const deps = plan.dependsOn.get(k);
      lines.push(
        `  ${existing.has(k) ? 'update' : 'create'} ${k}: ${fp.cpu ?? 1} cpu, ${fp.memory ?? '2048Mi'}, disk ${fp.disk ?? '(image size)'} on ${fp.site ?? '(only site)'}/${fp.node ?? '(placed)'}${fp.storage ? `:${fp.storage}` : ''}${deps ? `; after ${deps.join(', ')}` : ''}`,
      );
    }
  }
  o.result(lines.join('\n'));
  return 0;
}
