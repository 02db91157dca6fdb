/**
 * Step 13: is the guest up? Its addresses (from the guest agent, else the static
 * cloudInit.ipConfig), a bounded wait for an agent that may never come (the stock Ubuntu cloud
 * image has none), and cloud-init's own result, read in the guest through the agent
 * (`cloud-init status`, as CAPMOX does) into the CloudInit condition.
 *
 * When Ready is True without an address: a running VM with `agent: false` and no static address
 * (nothing could report one), or one whose agent answered but whose guest has no address yet
 * (the step stays WaitingForAgent until agentTimeout). A VM whose agent never answered within
 * agentTimeout is AgentNotResponding (Ready False) and costs one agent call per poll interval
 * from then on, not a busy loop.
 */
import type { ProxmoxVM } from '../api/proxmoxvm.ts';
import { setCondition } from '../engine/resource.ts';
import { PermissionError, PveError } from '../proxmox/errors.ts';
import type { AgentInterface, VmStatus } from '../proxmox/types.ts';
import { atProvider, ready } from './conditions.ts';
import type { StepContext } from './context.ts';
import {
  guestBooted,
  guestExecExited,
  guestExecPollMs,
  guestExecRunning,
  guestMissed,
  guestPollMs,
  guestReached,
  guestStopped,
  waitsForScout,
} from './guest-timing.ts';
import type { ObservedVm } from './lookup.ts';
import { agentEnabled, parseUserData } from './spec.ts';

const DEFAULT_AGENT_TIMEOUT_MS = 10 * 60_000;

/** Reasons of a Ready False that no wait fixes in one run of apply (the guest must be fixed). */
export const GUEST_FAILURE_REASONS: ReadonlySet<string> = new Set(['AgentNotResponding', 'CloudInitFailed']);

/** `90s`, `10m`, `1h` in ms. */
export function durationMs(text: string | undefined, fallback: number): number {
  const m = /^([0-9]+)(s|m|h)$/.exec(text ?? '');
  if (!m) return fallback;
  return Number(m[1]) * (m[2] === 's' ? 1000 : m[2] === 'm' ? 60_000 : 3_600_000);
}

/** The static addresses of cloudInit.ipConfig (without their prefix length), in interface order. */
export function staticAddresses(r: ProxmoxVM): string[] {
  return (r.spec.forProvider.cloudInit?.ipConfig ?? [])
    .filter((c) => !c.dhcp && c.address)
    .map((c) => c.address!.split('/')[0]!);
}

/** The resolution of PVE's uptime (whole seconds). */
const UPTIME_RESOLUTION_MS = 1000;

/**
 * The addresses of a running VM into status: the agent's when it answers (undefined from
 * agentAddresses means it did not), else the static ones. `status` (read on a full observe) dates
 * the boot, which the agent wait and the cloud-init result are measured from; without it, our own
 * start that just ended does (`started`), or the uptime counts on from the last one known.
 * 'vm-not-running': a guest poll's agent call found the VM stopped (the caller reads it in full).
 */
export async function observeGuest(
  ctx: StepContext,
  r: ProxmoxVM,
  found: ObservedVm,
  cfg: Record<string, string> | undefined,
  status: VmStatus | undefined,
  state: string,
  how: {
    /** A guest poll (read-schedule.ts guestPoll): no config read, the agent is asked as the last one said. */
    guestPoll?: boolean;
    /** Our start task ended just now: a new boot, of uptime 0. */
    started?: boolean;
  } = {},
): Promise<'vm-not-running' | undefined> {
  const a = atProvider(r);
  const m = ctx.memory;
  if (state !== 'running') {
    delete a.ipAddresses;
    delete a.ipSource;
    m.uptimeMs = undefined;
    m.uptimeAt = undefined;
    m.agentAnswered = undefined;
    guestStopped(m);
    return undefined;
  }
  const now = ctx.site.now();
  // Counted on: from the last known uptime by this process's clock, or PVE's own in the bulk list
  // (pvestatd's, a status cycle late) when that is further on. Right after a boot the list still
  // shows the boot before's uptime, which is not this boot's until the list shows less: taken,
  // it made a VM just rebooted AgentNotResponding ("running for 788s").
  const listed = found.entry.status === 'running' && found.entry.uptime ? found.entry.uptime * 1000 : 0;
  if (m.listedBefore !== undefined && listed < m.listedBefore) m.listedBefore = undefined;
  const fromList = m.listedBefore === undefined ? listed : 0;
  const up =
    status?.uptime !== undefined
      ? status.uptime * 1000
      : how.started
        ? 0
        : m.uptimeMs !== undefined && m.uptimeAt !== undefined
          ? Math.max(m.uptimeMs + (now - m.uptimeAt), fromList)
          : undefined;
  if (up !== undefined) {
    // A new boot (the uptime went back, or the VM was seen stopped): agent and cloud-init are asked
    // again. PVE's uptime is whole seconds (qemu-server PVE/QemuServer.pm vmstatus: int of the QEMU
    // process's age), and counted on by this process's clock it runs up to a second ahead of the
    // next one PVE gives: only a step back of a second or more is a new boot. A step back within it read as one, and
    // the guest's cloud-init status was asked again of a VM that had not restarted.
    if (m.uptimeMs === undefined || up + UPTIME_RESOLUTION_MS <= m.uptimeMs || how.started) {
      m.boot = (m.boot ?? 0) + 1;
      m.agentAnswered = undefined;
      m.listedBefore = listed > up + UPTIME_RESOLUTION_MS ? listed : undefined;
      guestBooted(ctx);
    }
    m.uptimeMs = up;
    m.uptimeAt = now;
  }
  if (!cfg && !how.guestPoll) return undefined; // a bulk-list poll: nothing changed that the addresses depend on
  // Waiting for cloud-init, the addresses the agent gave are kept (the drift read refreshes them).
  if (how.guestPoll && m.agentAnswered && a.ipSource === 'agent' && a.step === 'WaitingForCloudInit') return undefined;
  const agentOn = cfg ? agentEnabled(cfg.agent) : m.lastFull?.agent === true;
  // (At uptime 0 no agent answers yet: the first ask waits for guest-timing.ts.)
  const askedAt = ctx.site.now();
  // (Nor while its kind's scout is asked for it: the scout's answer wakes it.)
  const ask = agentOn && !how.started && !waitsForScout(ctx, r, 'agent');
  const fromAgent = ask ? await agentAddresses(ctx, found.node, found.vmid) : undefined;
  if (fromAgent === 'vm-not-running') {
    if (cfg) return undefined; // read just now as running: the next observe sees what changed
    m.lastFull = undefined;
    return 'vm-not-running';
  }
  if (fromAgent !== undefined) {
    ctx.memory.agentAnswered = true;
    guestReached(ctx, r, 'agent', askedAt);
  } else if (ask) guestMissed(ctx, 'agent', askedAt);
  const fixed = staticAddresses(r);
  if (fromAgent?.length) {
    a.ipAddresses = fromAgent;
    a.ipSource = 'agent';
  } else if (fixed.length) {
    a.ipAddresses = fixed;
    a.ipSource = 'ipConfig';
  } else {
    delete a.ipAddresses;
    delete a.ipSource;
  }
  return undefined;
}

export interface GuestGate {
  step: string;
  /** Requeue soon (the guest is on its way); undefined: at the normal poll interval. */
  requeueAfterMs?: number;
}

/**
 * What still keeps a running VM from its first Ready, or undefined when nothing does. Sets the
 * step, the Ready condition and (through checkCloudInit) the CloudInit condition.
 */
export async function guestGate(
  ctx: StepContext,
  r: ProxmoxVM,
  found: ObservedVm,
  state: string,
): Promise<GuestGate | undefined> {
  const fp = r.spec.forProvider;
  const a = atProvider(r);
  if ((fp.powerState ?? 'running') !== 'running' || state !== 'running') return undefined;
  const vmid = found.vmid;
  const agentWanted = fp.agent !== false;
  // The wait counts the VM's uptime as PVE reports it (a restarted provider does not start over).
  const timeout = durationMs(fp.agentTimeout, DEFAULT_AGENT_TIMEOUT_MS);
  const waited = ctx.memory.uptimeMs ?? 0;
  if (agentWanted && !ctx.memory.agentAnswered && a.ipSource !== 'ipConfig') {
    if (waited < timeout) {
      a.step = 'WaitingForAgent';
      ready(r, 'True', 'Available', `VM ${vmid} is running; waiting for the guest agent to answer`);
      return { step: a.step, requeueAfterMs: Math.min(guestPollMs(ctx, r, 'agent'), timeout - waited) };
    }
    a.step = 'AgentNotResponding';
    ready(
      r,
      'False',
      'AgentNotResponding',
      `VM ${vmid} has been running for ${Math.round(waited / 1000)}s and its guest agent has not answered (agentTimeout ${fp.agentTimeout ?? '10m'}). Check: qemu-guest-agent is installed and running in the guest (the stock Ubuntu cloud image lacks it: add "packages: [qemu-guest-agent]" to userData, which needs the site's ssh for a snippet); the VM's agent option is on; the guest booted (console). Or set spec.forProvider.agent: false and give cloudInit.ipConfig a static address`,
    );
    return { step: a.step };
  }
  if (agentWanted && ctx.memory.agentAnswered && !a.ipAddresses?.length && waited < timeout) {
    a.step = 'WaitingForAgent';
    ready(r, 'True', 'Available', `VM ${vmid} is running; its guest agent answers but reports no address yet`);
    return { step: a.step, requeueAfterMs: guestPollMs(ctx, r, 'agent') };
  }
  if (agentWanted && ctx.memory.agentAnswered) return checkCloudInit(ctx, r, found);
  return undefined;
}

/** The result for this boot and user-data is known and final: no need to ask the guest again. */
function knownResult(ctx: StepContext, r: ProxmoxVM): boolean {
  const c = r.status?.atProvider?.cloudInit;
  if (!c || c.status === 'running') return false;
  if (c.for !== userDataId(r)) return false;
  if (ctx.memory.cloudInitBoot !== undefined) return ctx.memory.cloudInitBoot === ctx.memory.boot;
  // Another process (a restart, the next apply) asked during this boot: the boot began when it
  // said, give or take the seconds between uptime reads.
  if (ctx.memory.uptimeMs === undefined) return false;
  const same = Math.abs(Date.parse(c.bootedAt) - (ctx.site.now() - ctx.memory.uptimeMs)) < 90_000;
  if (same) ctx.memory.cloudInitBoot = ctx.memory.boot;
  return same;
}

function userDataId(r: ProxmoxVM): string {
  return r.status?.atProvider?.userDataSnippet ?? r.spec.forProvider.cloudInit?.userDataSnippet ?? 'native';
}

/** When this boot began, by this process's clock (to the second). */
function bootStamp(ctx: StepContext): string {
  const t = ctx.site.now() - (ctx.memory.uptimeMs ?? 0);
  return new Date(Math.floor(t / 1000) * 1000).toISOString();
}

/**
 * cloud-init's result in the guest, once per boot and user-data: `cloud-init status --format
 * json` through the agent (older cloud-init, which lacks --format, is asked `--long`). While it
 * runs, the step is WaitingForCloudInit; an error is CloudInitFailed with the failing modules.
 * A guest that cannot be asked (no exec privilege, no cloud-init) does not hold the VM back.
 */
async function checkCloudInit(ctx: StepContext, r: ProxmoxVM, found: ObservedVm): Promise<GuestGate | undefined> {
  const a = atProvider(r);
  const vmid = found.vmid;
  if (ctx.readOnly) return undefined; // a plan runs nothing in the guest
  if (!knownResult(ctx, r)) {
    const result = await cloudInitStatus(ctx, found);
    if (result.kind === 'unavailable') {
      cloudInitCondition(r, 'Unknown', 'StatusUnavailable', result.why);
      return undefined;
    }
    if (result.kind === 'pending') {
      a.step = 'WaitingForCloudInit';
      ready(r, 'True', 'Available', `VM ${vmid} is running; waiting for cloud-init's result in the guest`);
      // A `cloud-init status` running in the guest is asked about as the command it is.
      const running = ctx.memory.cloudInitExec;
      return {
        step: a.step,
        requeueAfterMs: running ? guestExecPollMs(ctx, running.at) : guestPollMs(ctx, r, 'cloudInit'),
      };
    }
    ctx.memory.cloudInitBoot = ctx.memory.boot;
    a.cloudInit = {
      status: result.status,
      ...(result.errors.length ? { errors: result.errors } : {}),
      for: userDataId(r),
      bootedAt: bootStamp(ctx),
    };
    if (result.status !== 'running') guestReached(ctx, r, 'cloudInit');
    else guestMissed(ctx, 'cloudInit');
  }
  const c = a.cloudInit!;
  if (c.status === 'running') {
    a.step = 'WaitingForCloudInit';
    cloudInitCondition(r, 'Unknown', 'Running', 'cloud-init is still running in the guest');
    ready(r, 'True', 'Available', `VM ${vmid} is running; cloud-init is still running in the guest`);
    return { step: a.step, requeueAfterMs: guestPollMs(ctx, r, 'cloudInit') };
  }
  if (c.status === 'error') {
    const what = c.errors?.length ? c.errors.join('; ') : 'cloud-init reported an error';
    cloudInitCondition(r, 'False', 'CloudInitFailed', what);
    a.step = 'CloudInitFailed';
    ready(
      r,
      'False',
      'CloudInitFailed',
      `cloud-init failed in VM ${vmid}: ${what}. Look at /var/log/cloud-init.log and /var/log/cloud-init-output.log in the guest; fix spec.forProvider.userData (a changed userData is a new snippet, applied at the next boot)`,
    );
    return { step: a.step };
  }
  // userDataMode NativeOnly with keys left out: that condition (set at create) says more.
  if (
    r.spec.forProvider.cloudInit?.userDataMode === 'NativeOnly' &&
    parseUserData(r.spec.forProvider.userData).unsupported.length
  )
    return undefined;
  cloudInitCondition(r, 'True', c.status === 'done' ? 'Done' : 'NotRun', `cloud-init: ${c.status}`);
  return undefined;
}

function cloudInitCondition(r: ProxmoxVM, status: 'True' | 'False' | 'Unknown', why: string, message: string): void {
  setCondition(
    r,
    { type: 'CloudInit', status, reason: why, message, observedGeneration: r.metadata.generation },
    Date.now(),
  );
}

type StatusResult =
  | { kind: 'pending' }
  | { kind: 'unavailable'; why: string }
  | { kind: 'done'; status: string; errors: string[] };

/**
 * One step of asking: start `cloud-init status` (remembering its PID), or read the status of the
 * one started before, at the next poll (a process takes a moment to run in the guest: asked at
 * once, it has not exited yet). Two agent calls per question; nothing is waited for inside a reconcile.
 */
async function cloudInitStatus(ctx: StepContext, found: ObservedVm): Promise<StatusResult> {
  const { node, vmid } = found;
  const m = ctx.memory;
  try {
    if (!m.cloudInitExec) {
      const { pid } = await ctx.client.agentExec(node, vmid, ['cloud-init', 'status', '--format', 'json']);
      m.cloudInitExec = { pid, json: true, at: ctx.site.now() };
      return { kind: 'pending' };
    }
    const exec = m.cloudInitExec;
    const askedAt = ctx.site.now();
    const st = await ctx.client.agentExecStatus(node, vmid, exec.pid);
    if (!st.exited) {
      guestExecRunning(ctx, exec.at, askedAt);
      return { kind: 'pending' };
    }
    m.cloudInitExec = undefined;
    guestExecExited(ctx, exec.at, askedAt);
    const out = st['out-data'] ?? '';
    if (exec.json && st.exitcode === 2 && /usage|unrecognized|invalid choice/i.test(`${out}${st['err-data'] ?? ''}`)) {
      // cloud-init before 22.x has no --format: ask the long text form next time.
      const { pid } = await ctx.client.agentExec(node, vmid, ['cloud-init', 'status', '--long']);
      m.cloudInitExec = { pid, json: false, at: ctx.site.now() };
      return { kind: 'pending' };
    }
    if (st.exitcode === 127 || /not found|No such file/i.test(st['err-data'] ?? ''))
      return { kind: 'unavailable', why: 'the guest has no cloud-init command' };
    const parsed = exec.json ? parseJsonStatus(out) : parseLongStatus(out);
    if (!parsed) return { kind: 'unavailable', why: `unreadable cloud-init status output: ${out.slice(0, 200)}` };
    return { kind: 'done', ...parsed };
  } catch (e) {
    m.cloudInitExec = undefined;
    if (e instanceof PermissionError)
      return {
        kind: 'unavailable',
        why: `cannot run cloud-init status through the guest agent: ${e.message} (it needs VM.GuestAgent.Unrestricted on PVE 9, VM.Monitor before)`,
      };
    const msg = e instanceof Error ? e.message : String(e);
    if (/not running|not available|timeout/i.test(msg)) return { kind: 'pending' };
    return { kind: 'unavailable', why: `cannot run cloud-init status through the guest agent: ${msg}` };
  }
}

function parseJsonStatus(out: string): { status: string; errors: string[] } | undefined {
  try {
    const j = JSON.parse(out) as { status?: unknown; errors?: unknown };
    if (typeof j.status !== 'string') return undefined;
    const errors = Array.isArray(j.errors) ? j.errors.map(String) : [];
    return { status: j.status, errors };
  } catch {
    return undefined;
  }
}

function parseLongStatus(out: string): { status: string; errors: string[] } | undefined {
  const status = /^status:\s*(.+)$/m.exec(out)?.[1]?.trim();
  if (!status) return undefined;
  const errors: string[] = [];
  const block = /^errors:\s*\n((?:[ \t]+-.*\n?)+)/m.exec(out)?.[1];
  for (const line of block?.split('\n') ?? []) {
    const e = line.replace(/^[ \t]+-\s*/, '').trim();
    if (e) errors.push(e);
  }
  return { status, errors };
}

/**
 * The agent's addresses (IPv4 first, then IPv6, no loopback or link-local); undefined when the
 * agent does not answer ("QEMU guest agent is not running"), 'vm-not-running' when the VM is not
 * ("VM N is not running": qemu-server `src/PVE/QemuServer/Agent.pm:111`, checked before the agent).
 */
export async function agentAddresses(
  ctx: StepContext,
  node: string,
  vmid: number,
): Promise<string[] | 'vm-not-running' | undefined> {
  let ifaces: AgentInterface[];
  try {
    ifaces = await ctx.client.agentNetworkInterfaces(node, vmid);
  } catch (e) {
    // (PVE's text is the error's reason; its message carries the request too.)
    const text = e instanceof PveError ? e.reason : e instanceof Error ? e.message : '';
    return /\bVM \d+ is not running/.test(text) ? 'vm-not-running' : undefined;
  }
  const out: string[] = [];
  for (const i of ifaces) {
    if (i.name === 'lo') continue;
    for (const ip of i['ip-addresses'] ?? [])
      if (ip['ip-address-type'] === 'ipv4' && !ip['ip-address'].startsWith('127.')) out.push(ip['ip-address']);
  }
  for (const i of ifaces) {
    if (i.name === 'lo') continue;
    for (const ip of i['ip-addresses'] ?? [])
      if (ip['ip-address-type'] === 'ipv6' && !ip['ip-address'].startsWith('fe80') && ip['ip-address'] !== '::1')
        out.push(ip['ip-address']);
  }
  return out;
}
