/**
 * `delete`: destroy the VMs the manifests own, after showing which (read from Proxmox) and a
 * confirmation; the engine's delete path does the destroying, so ownership is checked as always.
 */
import type { ProxmoxVM } from '../api/proxmoxvm.ts';
import { externalName } from '../engine/resource.ts';
import type { ResourcePlan } from '../vm/plan.ts';
import { chooseState } from '../workspace/arguments.ts';
import { write } from '../workspace/lines.ts';
import { manifestKey } from '../workspace/phases.ts';
import { readStateFile } from '../workspace/state-file.ts';
import { Progress, table } from './render.ts';
import { ageSpan } from './resource-view.ts';
import {
  type ApplyArgs,
  loadVms,
  missingDirs,
  openRuntime,
  planTarget,
  removeEmptyDirs,
  resolveConfig,
} from './setup.ts';

/**
 * What the delete does with a resource's plan, one answer for the list and the confirmation:
 * `destroy` its VM; `unplanned`, a plan refused (its node did not answer, a read failed, the spec
 * cannot be applied) whose VM is known (`vmid`: the plan's, or the state's record), which the delete
 * still destroys if it is still this resource's (before, it was listed `kept` while the delete went
 * on to destroy it, without asking when nothing else was to go); `kept`, a VMID another VM holds
 * (VMIDConflict), or a refused plan with no VM known; `none`, no VM in Proxmox.
 */
type Deletion = { kind: 'destroy' | 'unplanned'; vmid: string } | { kind: 'kept' } | { kind: 'none' };

function deletionOf(p: ResourcePlan, recorded: (key: string) => string | undefined): Deletion {
  if (p.action === 'refused') {
    const vmid = p.reason === 'VMIDConflict' ? undefined : p.vmid !== undefined ? String(p.vmid) : recorded(p.key);
    return vmid !== undefined ? { kind: 'unplanned', vmid } : { kind: 'kept' };
  }
  if (p.vmid === undefined || p.action === 'create') return { kind: 'none' };
  return { kind: 'destroy', vmid: String(p.vmid) };
}

/** Which VMs a delete destroys, and which resources have none (or one that is not theirs). */
function describeDeletion(planned: ResourcePlan[], recorded: (key: string) => string | undefined): string[] {
  const lines = ['Would destroy, read from Proxmox:'];
  let n = 0;
  let unread = 0;
  for (const p of planned) {
    const d = deletionOf(p, recorded);
    if (d.kind === 'unplanned') {
      unread++;
      lines.push(
        `  ? ${p.key}: VM ${d.vmid}${p.node ? ` on ${p.node}` : ''}, not planned (${p.reason}: ${p.message ?? ''}); the delete destroys it if it is still this resource's`,
      );
    } else if (d.kind === 'kept') lines.push(`  ! ${p.key}: kept, ${p.reason}: ${p.message ?? ''}`);
    else if (d.kind === 'none') lines.push(`    ${p.key}: no VM in Proxmox (nothing to destroy)`);
    else {
      n++;
      lines.push(
        `  - ${p.key}: VM ${d.vmid}${p.node ? ` on ${p.node}` : ''} (${p.state ?? 'unknown'})${p.action === 'adopt' ? ', found by its ownership marker' : ''}`,
      );
    }
  }
  lines.push(`${n} VM(s) to destroy${unread ? `, and ${unread} more not planned (?)` : ''}.`);
  return lines;
}

/**
 * Delete what the manifests own: which VMs that means is read from Proxmox and shown first
 * (`--dry-run` stops there), confirmed (a prompt, or --yes), then each is stopped, destroyed and
 * confirmed gone.
 */
export async function deleteCommand(args: ApplyArgs): Promise<number> {
  const { vms, others } = loadVms(args.files);
  const config = await resolveConfig(args, others);
  const state = chooseState(args, config);
  // A dry run only reads the state file (as apply's does): what it records is planned from.
  const dryState = args.dryRun
    ? new Map((readStateFile<ProxmoxVM>(state)?.objects ?? []).map((o) => [manifestKey(o), o]))
    : undefined;
  const made = missingDirs(args.dryRun ? undefined : state);
  const rt = openRuntime(config, args.dryRun ? undefined : state, args, others);
  const stored = (key: string) => (dryState ? dryState.get(key) : rt.store.getSync(key));
  const progress = new Progress(args.out);
  try {
    const keys = vms.map(manifestKey);
    const byKey = new Map(vms.map((v) => [manifestKey(v), v]));
    const planned = await rt.plan(keys.map((k) => planTarget(stored(k), byKey.get(k)!)));
    const recorded = (key: string) => {
      const r = stored(key);
      return r ? externalName(r) : undefined;
    };
    const doomed = planned.filter((p) => {
      const d = deletionOf(p, recorded).kind;
      return d === 'destroy' || d === 'unplanned';
    });
    if (!args.quiet || args.dryRun) write(args.out, describeDeletion(planned, recorded).join('\n'));
    if (args.dryRun) return 0;
    if (doomed.length && args.confirm && !(await args.confirm(planned))) {
      write(args.out, 'Delete cancelled: nothing was destroyed.');
      return 1;
    }
    const known = new Set(keys.filter((k) => rt.store.getSync(k)));
    // Which resources turned out to have a VM (held or adopted by marker), for the summary.
    const hadVm = new Set<string>();
    const unwatch = rt.store.watch((key, _event, obj) => {
      if (obj && externalName(obj)) hadVm.add(key);
    });
    for (const k of known) if (externalName(rt.store.getSync(k)!)) hadVm.add(k);
    rt.markDeleted([...known]);
    const unknown = vms.filter((v) => !known.has(manifestKey(v)));
    if (unknown.length && !args.quiet)
      write(
        args.out,
        `${unknown.length} of these resources are not in the state file: looking for their VMs by ownership marker`,
      );
    // Not in this state (lost, or another state file): Proxmox may still hold their VMs.
    rt.deleteUnknown(unknown);
    const deleting = new Set(keys);
    const res = await rt.run({
      keys,
      until: 'gone',
      timeoutMs: args.timeoutMs ?? 30 * 60_000,
      tick: () => {
        if (!args.quiet)
          progress.update(
            rt.rows().filter((r) => deleting.has(r.key)),
            `Deleting ${keys.length} VM${keys.length === 1 ? '' : 's'}`,
          );
      },
    });
    progress.done();
    unwatch();
    const left = rt.rows().filter((r) => deleting.has(r.key));
    const none = keys.length - hadVm.size;
    if (left.length) {
      write(args.out, `\n${table(left)}\n\n${left.length} VM(s) not deleted`);
      const offline = left.filter((r) => rt.offlineTooLong(r.key));
      if (offline.length)
        write(
          args.out,
          `${offline.length} of them on a node offline for longer than --offline-grace (${ageSpan(0, args.offlineGraceMs ?? 0).text}): ${offline.map((r) => r.key.split('/')[1]).join(', ')}; the MESSAGE column says what to do`,
        );
    } else
      write(
        args.out,
        `deleted ${hadVm.size} VM(s)${none ? `; ${none} resource(s) had no VM in Proxmox (nothing to delete)` : ''}`,
      );
    return res.ok ? 0 : 1;
  } finally {
    await rt.close();
    // Nothing written (declined, refused, or nothing to delete): no empty state directory left behind.
    removeEmptyDirs(made);
  }
}
