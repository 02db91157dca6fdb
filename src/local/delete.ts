/**
 * `delete`: destroy the VMs the manifests own, after showing which (read from Proxmox) and a
 * confirmation; the engine's delete path does the destroying, so ownership is checked as always.
 */
import { externalName } from '../engine/resource.ts';
import type { ResourcePlan } from '../vm/plan.ts';
import { chooseState } from '../workspace/arguments.ts';
import { write } from '../workspace/lines.ts';
import { manifestKey } from '../workspace/phases.ts';
import { Progress, table } from './render.ts';
import { ageSpan } from './resource-view.ts';
import { type ApplyArgs, loadVms, openRuntime, planTarget, resolveConfig } from './setup.ts';

/** Which VMs a delete destroys, and which resources have none (or one that is not theirs). */
function describeDeletion(planned: ResourcePlan[]): string[] {
  const lines = ['Would destroy, read from Proxmox:'];
  let n = 0;
  for (const p of planned) {
    if (p.action === 'refused') lines.push(`  ! ${p.key}: kept, ${p.reason}: ${p.message ?? ''}`);
    else if (p.vmid === undefined || p.action === 'create')
      lines.push(`    ${p.key}: no VM in Proxmox (nothing to destroy)`);
    else {
      n++;
      lines.push(
        `  - ${p.key}: VM ${p.vmid}${p.node ? ` on ${p.node}` : ''} (${p.state ?? 'unknown'})${p.action === 'adopt' ? ', found by its ownership marker' : ''}`,
      );
    }
  }
  lines.push(`${n} VM(s) to destroy.`);
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
  const rt = openRuntime(config, args.dryRun ? undefined : chooseState(args, config), args, others);
  const progress = new Progress(args.out);
  try {
    const keys = vms.map(manifestKey);
    const byKey = new Map(vms.map((v) => [manifestKey(v), v]));
    const planned = await rt.plan(keys.map((k) => planTarget(rt.store.getSync(k), byKey.get(k)!)));
    const doomed = planned.filter((p) => p.vmid !== undefined && p.action !== 'refused' && p.action !== 'create');
    if (!args.quiet || args.dryRun) write(args.out, describeDeletion(planned).join('\n'));
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
            `Deleting ${keys.length} VMs`,
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
  }
}
