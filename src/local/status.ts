/**
 * `status`: the VMs as the state file has them (with --live, as Proxmox has them; with
 * --kubeconfig, as a cluster's controller has them), once or redrawn with --watch, as a table or
 * a StatusList document.
 */
import type { LoadedProviderConfig } from '../api/provider-config-load.ts';
import type { ProxmoxVM } from '../api/proxmoxvm.ts';
import { externalName, keyOf } from '../engine/resource.ts';
import { clientForSite } from '../proxmox/site.ts';
import { classify, inventory } from '../vm/inventory.ts';
import { chooseState, cliInstallationOf, loadConfigArg, stateFileFor, UsageError } from '../workspace/arguments.ts';
import { write } from '../workspace/lines.ts';
import { existingState, readStateFile, stateRoot } from '../workspace/state-file.ts';
import { outputFor } from './output.ts';
import { formatLive, formatRows, formatRowsLine, isLiveTerminal, type LiveView, StatusScreen } from './render.ts';
import { type Row, rowOf, sortRows } from './resource-view.ts';

export interface StatusArgs {
  /** The state file; default: as apply finds it (see stateFileFor). */
  state?: string;
  /** A ProviderConfig: its installation's state file; with `live`, the sites to read. */
  config?: string;
  loadedConfig?: LoadedProviderConfig;
  /** Rebuild the view from Proxmox (the ownership markers of every site), not from the state file. */
  live?: boolean;
  output?: 'table' | 'json' | 'yaml';
  out?: NodeJS.WriteStream;
  /** Notes (the legacy state file place) go here; default stderr. */
  err?: NodeJS.WriteStream;
  /** Where the legacy `./.provider-proxmox/state.json` is looked for; default the current directory. */
  cwd?: string;
  /** Redraw every `intervalMs` until SIGINT/SIGTERM (or `signal`). */
  watch?: boolean;
  intervalMs?: number;
  signal?: AbortSignal;
  /** Read ProxmoxVMs from a cluster (the controller's resources) instead of a state file. */
  kubeconfig?: string;
  /** With kubeconfig: one namespace (default: all). */
  namespace?: string;
}

/** The rows of every ProxmoxVM in a cluster (what `kubectl get proxmoxvm -A` lists). */
export async function readKubeStatus(
  kubeconfig: string,
  namespace?: string,
): Promise<{ rows: Row[] } | { missing: string }> {
  const { KubeApi, loadKubeConfig, collectionPath } = await import('../kube/api.ts');
  const api = new KubeApi(loadKubeConfig(kubeconfig));
  try {
    const list = await api.request<{ items: ProxmoxVM[] }>(
      'GET',
      collectionPath('proxmox.sankofa.io', 'v1alpha1', 'proxmoxvms', namespace),
    );
    const now = Date.now();
    return { rows: sortRows(list.items.map((o) => rowOf(o, now))) };
  } finally {
    api.close();
  }
}

/** Where `status` reads: the file (with what to say when it does not exist yet), or why there is none. */
type StatusSource = { file: string; missing: string; note?: string } | { none: string };

/** `status`'s ProviderConfig, when given: it names the installation, so the state file. */
export async function statusConfig(args: StatusArgs): Promise<LoadedProviderConfig | undefined> {
  return args.loadedConfig ?? (args.config ? await loadConfigArg(args.config) : undefined);
}

export function statusSource(args: StatusArgs, config: LoadedProviderConfig | undefined): StatusSource {
  const installation = config ? cliInstallationOf(config) : undefined;
  const c = stateFileFor({ state: args.state, installation, cwd: args.cwd });
  if ('none' in c) return c;
  // (An explicit --state that does not exist stops `status` before this, see statusCommand: only
  // --watch waits for it.)
  const missing = args.state
    ? `no state file at ${c.file} yet: waiting for an apply with --state ${args.state} to write it`
    : `no state file at ${c.file}: nothing has been applied${installation ? ` for installation ${installation}` : ''} (status --live --config FILE lists its VMs in Proxmox)`;
  return { file: c.file, missing, ...(c.note ? { note: c.note } : {}) };
}

/**
 * The rows of a state file, or what to say when it does not exist. A file that exists and is not a
 * usable state file throws StateFileError (exit 1, the file named): it is never an empty fleet.
 */
export function readStatus(file: string, missing: string): { rows: Row[] } | { missing: string } {
  const data = readStateFile<ProxmoxVM>(file);
  if (!data) return { missing };
  const now = Date.now();
  return { rows: sortRows(data.objects.map((o) => rowOf(o, now))) };
}

/**
 * The table, from the state file (read-only; works while apply runs), or with `live` from Proxmox.
 * With `watch`: until a signal.
 */
export async function statusCommand(args: StatusArgs): Promise<number> {
  // A state file has no namespaces to pick from: -n alone would be ignored, and read as filtered.
  if (args.namespace && !args.kubeconfig)
    throw new UsageError(
      `-n ${args.namespace} picks a namespace of a cluster: add --kubeconfig FILE, or leave -n out (a state file lists every namespace)`,
    );
  if (args.live) return liveStatus(args);
  if (args.watch) return watchStatus(args);
  let r: { rows: Row[] } | { missing: string };
  if (args.kubeconfig) r = await readKubeStatus(args.kubeconfig, args.namespace);
  else if (args.state && !existingState(args.state))
    // A path given by hand that is not there is a typo far more often than a fleet never applied.
    throw new UsageError(
      `--state ${args.state}: no such state file; pass the file an apply wrote (apply --state FILE), or leave --state out for the installation's own under ${stateRoot()}`,
    );
  else {
    const src = statusSource(args, await statusConfig(args));
    if ('file' in src && src.note) write(args.err ?? process.stderr, src.note);
    r = 'none' in src ? { missing: src.none } : readStatus(src.file, src.missing);
  }
  // With -o json|yaml stdout is always a StatusList (empty when nothing was applied); the why on stderr.
  const o = outputFor(args);
  if (!('missing' in r)) o.result(formatRows(r.rows, o.format));
  else if (!o.machine) o.result(r.missing);
  else {
    o.note(r.missing);
    o.result(formatRows([], o.format));
  }
  return 0;
}

/**
 * `status --watch`: the table every `intervalMs` (2 s) until SIGINT/SIGTERM. On a terminal it is
 * redrawn in place (like watch(1)); otherwise it is printed again only when something other than
 * the AGE column changed (JSON: one line per change; YAML: one document per change). A state file
 * that does not exist yet is waited for; one that is not a usable state file stops it (exit 1).
 */
export async function watchStatus(args: StatusArgs): Promise<number> {
  const config = args.kubeconfig ? undefined : await statusConfig(args);
  const out = args.out ?? process.stdout;
  const output = args.output ?? 'table';
  const interval = args.intervalMs ?? 2000;
  const screen = isLiveTerminal(out) && output === 'table' ? new StatusScreen(out) : undefined;
  const stop = new AbortController();
  const onSignal = () => stop.abort();
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);
  if (args.signal?.aborted) stop.abort();
  args.signal?.addEventListener('abort', onSignal, { once: true });
  let last: string | undefined;
  let noted = false;
  try {
    while (!stop.signal.aborted) {
      let r: { rows: Row[] } | { missing: string };
      let where = args.kubeconfig ?? '';
      if (args.kubeconfig) {
        try {
          r = await readKubeStatus(args.kubeconfig, args.namespace);
        } catch (e) {
          r = { missing: (e as Error).message };
        }
      } else {
        // Looked up again each time: without --state the file's installation may appear meanwhile.
        const src = statusSource(args, config);
        if ('file' in src && src.note && !noted) write(args.err ?? process.stderr, src.note);
        noted = true;
        where = 'file' in src ? src.file : stateRoot();
        r = 'none' in src ? { missing: src.none } : readStatus(src.file, src.missing);
      }
      // What counts as a change: everything but the age, which changes every second.
      const key = 'missing' in r ? r.missing : JSON.stringify(r.rows.map(({ age: _age, ...rest }) => rest));
      if (screen) {
        const head = `Every ${interval / 1000}s: ${where}  ${new Date().toISOString().replace(/\.\d+Z$/, 'Z')}  (Ctrl-C to stop)`;
        screen.draw(head, 'missing' in r ? r.missing : r.rows);
      } else if (key !== last) {
        // JSON Lines / YAML documents on stdout: what to say instead goes to stderr.
        if ('missing' in r) (output === 'table' ? out : (args.err ?? process.stderr)).write(`${r.missing}\n`);
        else if (output === 'json') out.write(`${formatRowsLine(r.rows)}\n`);
        else if (output === 'yaml') out.write(`---\n${formatRows(r.rows, 'yaml')}`);
        else out.write(`${last === undefined ? '' : '\n'}${formatRows(r.rows, 'table')}\n`);
      }
      last = key;
      await new Promise<void>((resolve) => {
        const t = setTimeout(resolve, interval);
        stop.signal.addEventListener(
          'abort',
          () => {
            clearTimeout(t);
            resolve();
          },
          { once: true },
        );
      });
    }
  } finally {
    screen?.done();
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
    args.signal?.removeEventListener('abort', onSignal);
  }
  return 0;
}

/**
 * `status --live`: what Proxmox holds for this installation, read from the ownership markers of
 * every site (the inventory), with whether the state file knows each VM. Works without a state
 * file: that is what it is for (the state file is only a cache). Exit 1 when a site cannot be read
 * (the list would be incomplete).
 */
export async function liveStatus(args: StatusArgs): Promise<number> {
  if (args.watch) throw new UsageError('--live reads Proxmox once; it cannot be combined with --watch');
  if (args.kubeconfig)
    throw new UsageError('--live reads Proxmox through a ProviderConfig: pass --config, not --kubeconfig');
  const config = await statusConfig(args);
  if (!config)
    throw new UsageError('status --live reads Proxmox: pass --config FILE (the ProviderConfig with its Secret)');
  const installation = cliInstallationOf(config);
  const file = chooseState(args, config);
  const data = readStateFile<ProxmoxVM>(file);
  const view = await liveView(config, installation, data ? { file, objects: data.objects } : undefined);
  write(args.out, formatLive(view, args.output ?? 'table'));
  return view.errors.length ? 1 : 0;
}

/**
 * The live view of `installation`: per site, its VMs by marker (`ours`, and the first marker
 * format as `legacy`), the VMs of other installations counted, and copied markers (an operator's
 * clone of one of our VMs: the marker names another VMID). `state`: the state file, to say whether
 * it knows each VM (by uid, or by resource and VMID on the same site).
 */
export async function liveView(
  config: LoadedProviderConfig,
  installation: string,
  state?: { file: string; objects: ProxmoxVM[] },
): Promise<LiveView> {
  const sites = config.config.spec.sites;
  const only = sites.length === 1 ? sites[0]!.name : undefined;
  const objects = state?.objects ?? [];
  const uids = new Set(objects.map((o) => o.metadata.uid));
  const known = (site: string, key: string, vmid: number, uid: string) =>
    uids.has(uid) ||
    objects.some(
      (o) =>
        keyOf(o) === key &&
        externalName(o) === String(vmid) &&
        (o.status?.atProvider?.site ?? o.spec.forProvider.site ?? only) === site,
    );
  const view: LiveView = {
    installation,
    ...(state ? { stateFile: state.file } : {}),
    vms: [],
    elsewhere: [],
    copies: [],
    errors: [],
  };
  const perSite = await Promise.all(
    sites.map(async (s) => {
      const client = clientForSite(config, s.name);
      try {
        return { site: s.name, vms: await inventory(client) };
      } catch (e) {
        return { site: s.name, error: e instanceof Error ? e.message : String(e) };
      } finally {
        await client.close();
      }
    }),
  );
  const elsewhere = new Map<string, number>();
  for (const r of perSite) {
    if ('error' in r) {
      view.errors.push({ site: r.site, message: r.error ?? 'unknown error' });
      continue;
    }
    for (const vm of r.vms) {
      const m = vm.marker;
      if (!m) continue;
      const key = `${m.namespace ?? 'default'}/${m.name}`;
      const cls = classify(vm, installation);
      if (cls === 'ours' || cls === 'legacy')
        view.vms.push({
          name: key,
          site: r.site,
          node: vm.node,
          vmid: vm.vmid,
          state: vm.template ? 'template' : vm.status,
          lock: vm.lock ?? '',
          inState: state ? (known(r.site, key, vm.vmid, m.uid) ? 'yes' : 'no') : '—',
          marker: cls === 'ours' ? 'current' : 'legacy',
          uid: m.uid,
        });
      else if (cls === 'elsewhere') {
        const k = `${m.installation}\u0000${r.site}`;
        elsewhere.set(k, (elsewhere.get(k) ?? 0) + 1);
      } else if (cls === 'copy')
        view.copies.push({ site: r.site, node: vm.node, vmid: vm.vmid, name: key, writtenFor: m.vmid ?? 0 });
    }
  }
  for (const [k, n] of elsewhere) {
    const [inst, site] = k.split('\u0000') as [string, string];
    view.elsewhere.push({ installation: inst, site, vms: n });
  }
  view.vms.sort((a, b) => a.name.localeCompare(b.name) || a.site.localeCompare(b.site) || a.vmid - b.vmid);
  view.elsewhere.sort((a, b) => a.installation.localeCompare(b.installation) || a.site.localeCompare(b.site));
  return view;
}
