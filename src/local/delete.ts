import { externalName } from '../engine/resource.ts';
import { manifestKey } from '../fleet/phases.ts';
import { Progress, table } from './render.ts';
import { type ApplyArgs, chooseState, loadVms, openRuntime, resolveConfig, write } from './setup.ts';

/** Delete what the manifests own: stop, destroy, confirm gone. */
export async function deleteCommand(args: ApplyArgs): Promise<number> {
  const { vms, others } = loadVms(args.files);
  const config = await resolveConfig(args, others);
  const rt = openRuntime(config, chooseState(args, config), args, others);
  const progress = new Progress(args.out);
  try {
    const keys = vms.map(manifestKey);
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
    const res = await rt.run({
      keys,
      until: 'gone',
      timeoutMs: args.timeoutMs ?? 30 * 60_000,
      tick: () => {
        if (!args.quiet)
          progress.update(
            rt.rows().filter((r) => keys.includes(r.key)),
            `Deleting ${keys.length} VMs`,
          );
      },
    });
    progress.done();
    unwatch();
    const left = rt.rows().filter((r) => keys.includes(r.key));
    const none = keys.length - hadVm.size;
    if (left.length) write(args.out, `\n${table(left)}\n\n${left.length} VM(s) not deleted`);
    else
      write(
        args.out,
        `deleted ${hadVm.size} VM(s)${none ? `; ${none} resource(s) had no VM in Proxmox (nothing to delete)` : ''}`,
      );
    return res.ok ? 0 : 1;
  } finally {
    await rt.close();
  }
}
