/**
 * Phased rollout: phases from the `proxmox.sankofa.io/phase` annotation or a fleet file, plus
 * `proxmox.sankofa.io/depends-on`. A phase starts when every earlier phase is Ready (its gate);
 * a VM starts when its dependencies are Ready; at most `maxParallel` VMs of a phase are in
 * progress at once.
 *
 * Here, with the manifests, because both sides read it: apply (src/local) runs the rollout, while
 * validate and plan (src/fleet) check and show it. It is pure (no I/O beyond reading a fleet
 * file), so the runtime that calls nextAdmissions passes in where each resource stands.
 */
import { readFileSync } from 'node:fs';
import { parse } from 'yaml';
import type { ProxmoxVM } from '../api/proxmoxvm.ts';
import { internString } from '../engine/intern.ts';

export const PHASE_ANNOTATION = 'proxmox.sankofa.io/phase';
export const DEPENDS_ANNOTATION = 'proxmox.sankofa.io/depends-on';
/** Resources without a phase run in this phase, first. */
export const DEFAULT_PHASE = '0';

export interface Phase {
  name: string;
  /** Resource keys (`namespace/name`). */
  members: string[];
  maxParallel?: number;
}

export interface RolloutPlan {
  phases: Phase[];
  /** key -> keys it waits for. */
  dependsOn: Map<string, string[]>;
}

export interface FleetFile {
  phases: Array<{ name: string; members: string[]; maxParallel?: number }>;
}

export class RolloutError extends Error {}

/** A manifest's key, `namespace/name` (namespace `default` when it names none), interned as keyOf's. */
export function manifestKey(vm: { metadata: { name: string; namespace?: string } }): string {
  return internString(`${vm.metadata.namespace ?? 'default'}/${vm.metadata.name}`);
}

/** The names in a `depends-on` annotation value (comma-separated). */
export function parseDepends(value: string | undefined): string[] {
  return (value ?? '')
    .split(',')
    .map((x) => x.trim())
    .filter(Boolean);
}

/** Numeric phase names in numeric order, then the others alphabetically. */
export function comparePhases(a: string, b: string): number {
  const na = Number(a);
  const nb = Number(b);
  const an = a !== '' && Number.isFinite(na);
  const bn = b !== '' && Number.isFinite(nb);
  if (an && bn) return na - nb;
  if (an) return -1;
  if (bn) return 1;
  return a.localeCompare(b);
}

export function loadFleetFile(file: string): FleetFile {
  const v = parse(readFileSync(file, 'utf8')) as FleetFile;
  if (!v || !Array.isArray(v.phases))
    throw new RolloutError(`${file}: expected 'phases: [{name, members: [...], maxParallel?}]'`);
  for (const [i, p] of v.phases.entries()) {
    if (typeof p.name !== 'string' && typeof p.name !== 'number')
      throw new RolloutError(`${file}: phases[${i}].name is required`);
    if (!Array.isArray(p.members))
      throw new RolloutError(`${file}: phases[${i}].members must be a list of resource names`);
  }
  return v;
}

export function planRollout(vms: ProxmoxVM[], opts: { fleet?: FleetFile; maxParallel?: number } = {}): RolloutPlan {
  const byName = new Map<string, string>();
  for (const vm of vms) byName.set(vm.metadata.name, manifestKey(vm));
  const keys = new Set(vms.map(manifestKey));
  const phaseOf = new Map<string, string>();
  const limits = new Map<string, number>();
  if (opts.fleet) {
    for (const p of opts.fleet.phases) {
      if (p.maxParallel) limits.set(String(p.name), p.maxParallel);
      for (const m of p.members) {
        const key = byName.get(m) ?? (m.includes('/') ? m : undefined);
        if (!key || !keys.has(key))
          throw new RolloutError(`fleet file: phase ${p.name} lists '${m}', which is not among the manifests`);
        phaseOf.set(key, String(p.name));
      }
    }
  }
  for (const vm of vms) {
    const k = manifestKey(vm);
    if (!phaseOf.has(k)) phaseOf.set(k, vm.metadata.annotations?.[PHASE_ANNOTATION] ?? DEFAULT_PHASE);
  }
  // A fleet file's phases run in the order the file lists them; phases that only annotations name
  // come after them, in comparePhases order.
  const fileOrder = (opts.fleet?.phases ?? []).map((p) => String(p.name));
  const names = [
    ...fileOrder.filter((n, i) => fileOrder.indexOf(n) === i),
    ...[...new Set(phaseOf.values())].filter((n) => !fileOrder.includes(n)).sort(comparePhases),
  ].filter((n) => [...phaseOf.values()].includes(n));
  const rank = new Map(names.map((n, i) => [n, i]));
  const phases: Phase[] = names.map((name) => {
    const limit = limits.get(name) ?? opts.maxParallel;
    return {
      name,
      members: vms.map(manifestKey).filter((k) => phaseOf.get(k) === name),
      ...(limit ? { maxParallel: limit } : {}),
    };
  });
  const dependsOn = new Map<string, string[]>();
  for (const vm of vms) {
    const deps = parseDepends(vm.metadata.annotations?.[DEPENDS_ANNOTATION]).map((d) => {
      const key = byName.get(d) ?? d;
      if (!keys.has(key))
        throw new RolloutError(`${manifestKey(vm)} depends on '${d}', which is not among the manifests`);
      return key;
    });
    if (deps.length) dependsOn.set(manifestKey(vm), deps);
  }
  // A dependency in a later phase could never be met: the gate of the earlier phase waits for this VM.
  for (const [k, deps] of dependsOn) {
    for (const d of deps) {
      if (rank.get(phaseOf.get(d)!)! > rank.get(phaseOf.get(k)!)!)
        throw new RolloutError(
          `${k} (phase ${phaseOf.get(k)}) depends on ${d}, which is in the later phase ${phaseOf.get(d)}: it would wait forever`,
        );
    }
  }
  // Cycles make a rollout impossible: refuse them up front.
  const state = new Map<string, 1 | 2>();
  const visit = (k: string, path: string[]): void => {
    if (state.get(k) === 2) return;
    if (state.get(k) === 1) throw new RolloutError(`dependency cycle: ${[...path, k].join(' -> ')}`);
    state.set(k, 1);
    for (const d of dependsOn.get(k) ?? []) visit(d, [...path, k]);
    state.set(k, 2);
  };
  for (const k of dependsOn.keys()) visit(k, []);
  return { phases, dependsOn };
}

export type ResourceState = 'absent' | 'progressing' | 'ready' | 'failed';

export interface Admission {
  /** Keys to put into the store now. */
  admit: string[];
  /** The first phase whose gate is closed, and why. */
  blocked?: { phase: string; reason: string };
  /** Nothing more can happen: everything admitted is ready or failed and the rest is blocked. */
  stuck: boolean;
}

/** Which resources may start now, given the state of each. */
export function nextAdmissions(
  plan: RolloutPlan,
  stateOf: (key: string) => ResourceState,
  opts: { noWait?: boolean } = {},
): Admission {
  // Asked several times per key below; states do not change during one call.
  const known = new Map<string, ResourceState>();
  const state = (k: string): ResourceState => {
    const s = known.get(k) ?? stateOf(k);
    known.set(k, s);
    return s;
  };
  const admit: string[] = [];
  let blocked: Admission['blocked'];
  let gateOpen = true;
  for (const phase of plan.phases) {
    if (!gateOpen) break;
    let inProgress = phase.members.filter((k) => state(k) === 'progressing').length;
    for (const k of phase.members) {
      if (state(k) !== 'absent') continue;
      const deps = plan.dependsOn.get(k) ?? [];
      if (!deps.every((d) => state(d) === 'ready')) continue;
      if (phase.maxParallel && inProgress >= phase.maxParallel) continue;
      admit.push(k);
      inProgress++;
    }
    const failed = phase.members.filter((k) => state(k) === 'failed');
    const done = phase.members.every((k) => state(k) === 'ready');
    if (!done && !opts.noWait) {
      gateOpen = false;
      const waiting = phase.members.filter((k) => state(k) !== 'ready').length;
      blocked = {
        phase: phase.name,
        reason: failed.length
          ? `phase ${phase.name} has ${failed.length} failed VM(s): ${failed.map((k) => k.split('/')[1]).join(', ')}`
          : `phase ${phase.name}: ${waiting} VM(s) not ready yet`,
      };
    }
  }
  const states = plan.phases.flatMap((p) => p.members).map(state);
  const anyProgress = states.includes('progressing') || admit.length > 0;
  const stuck = !anyProgress && states.some((s) => s === 'absent' || s === 'failed');
  return { admit, ...(blocked ? { blocked } : {}), stuck };
}

/**
 * The resources a phased rollout can prepare ahead (src/local/runtime.ts prepare): the members not
 * started yet of the phase after the first one not all Ready, once every member of that one is
 * Ready or `booting` (its VM made and started: what is left is its guest's boot, for which the
 * next phase waits anyway). None while that phase has a member failed or not started, since its
 * gate may then never open.
 */
export function phaseToPrepare(
  plan: RolloutPlan,
  stateOf: (key: string) => ResourceState,
  booting: (key: string) => boolean,
): string[] {
  const i = plan.phases.findIndex((p) => p.members.some((k) => stateOf(k) !== 'ready'));
  const current = plan.phases[i];
  const next = plan.phases[i + 1];
  if (!current || !next) return [];
  const past = (k: string) => {
    const s = stateOf(k);
    return s === 'ready' || (s === 'progressing' && booting(k));
  };
  if (!current.members.every(past)) return [];
  return next.members.filter((k) => stateOf(k) === 'absent');
}
