/**
 * The fleet file of `apply --fleet`, checked as validate checks manifests: every problem at once,
 * each as `file:line:column: field: message` with what is allowed and a "did you mean" where a
 * name is close (a `maxParalel: 2` was silently ignored, and a member misspelled was reported
 * without its line). The positions and the suggestions are the manifests' own
 * (src/workspace/documents.ts, manifests.ts); the phases themselves are still read by
 * loadFleetFile and planned by planRollout (src/workspace/phases.ts).
 */
import { didYouMean, formatProblem, type ManifestProblem, readManifestFile } from '../workspace/manifests.ts';
import { manifestKey } from '../workspace/phases.ts';

const TOP_KEYS = ['phases'];
const PHASE_KEYS = ['name', 'members', 'maxParallel'];
const SHAPE = "expected 'phases: [{name, members: [...], maxParallel?}]'";

/** The resources a fleet file may list: the manifests' VMs. */
interface Member {
  metadata: { name: string; namespace?: string };
}

/** Every problem of the fleet file `file` for the manifests `vms`; none when apply can use it. */
export function fleetFileProblems(file: string, vms: readonly Member[]): ManifestProblem[] {
  const problems: ManifestProblem[] = [];
  const docs = readManifestFile(file, problems);
  if (problems.length) return problems;
  const doc = docs[0];
  if (!doc || docs.length > 1)
    return [{ file, ...(docs[1] ? { line: docs[1].line } : {}), message: `${SHAPE}, in one YAML document` }];
  const at = (field: string, message: string, key = true) => {
    const pos = doc.lineOf(field, { key });
    problems.push({ file, ...(pos ? { line: pos.line, column: pos.column } : {}), field, message });
  };
  const unknown = (field: string, key: string, allowed: string[]) => {
    const hint = didYouMean(key, allowed);
    at(field, `unknown field '${key}'${hint ? ` (did you mean '${hint}'?)` : ''}; allowed: ${allowed.join(', ')}`);
  };
  for (const k of Object.keys(doc.value)) if (!TOP_KEYS.includes(k)) unknown(k, k, TOP_KEYS);
  const phases = doc.value.phases;
  if (!Array.isArray(phases)) {
    at('phases', `${phases === undefined ? 'missing' : 'not a list'}: ${SHAPE}`, phases === undefined);
    return problems;
  }
  const names = vms.map((v) => v.metadata.name);
  const byName = new Map(vms.map((v) => [v.metadata.name, manifestKey(v)]));
  const keys = new Set(vms.map(manifestKey));
  const listedIn = new Map<string, string>();
  for (const [i, p] of phases.entries()) {
    const f = `phases[${i}]`;
    if (typeof p !== 'object' || p === null || Array.isArray(p)) {
      at(f, `a phase is a mapping: {name, members: [...], maxParallel?}`, false);
      continue;
    }
    const phase = p as Record<string, unknown>;
    for (const k of Object.keys(phase)) if (!PHASE_KEYS.includes(k)) unknown(`${f}.${k}`, k, PHASE_KEYS);
    const name = phase.name;
    if (typeof name !== 'string' && typeof name !== 'number')
      at(`${f}.name`, 'required: the phase name (a number or a name, as the phase annotation takes)');
    if (phase.maxParallel !== undefined && !(Number.isInteger(phase.maxParallel) && Number(phase.maxParallel) > 0))
      at(
        `${f}.maxParallel`,
        `${JSON.stringify(phase.maxParallel)} is not a whole number > 0; leave it out for no limit`,
        false,
      );
    const members = phase.members;
    if (!Array.isArray(members)) {
      at(
        `${f}.members`,
        'required: a list of resource names (metadata.name, or namespace/name)',
        members === undefined,
      );
      continue;
    }
    for (const [j, m] of members.entries()) {
      const mf = `${f}.members[${j}]`;
      const key = typeof m === 'string' ? (byName.get(m) ?? (m.includes('/') ? m : undefined)) : undefined;
      if (!key || !keys.has(key)) {
        const hint = typeof m === 'string' ? didYouMean(m, names) : undefined;
        at(
          mf,
          `${JSON.stringify(m)} is not a ProxmoxVM among the manifests${hint ? ` (did you mean '${hint}'?)` : ''}`,
          false,
        );
        continue;
      }
      const earlier = listedIn.get(key);
      if (earlier !== undefined) at(mf, `'${m}' is listed in phase ${earlier} already; a VM is in one phase`, false);
      else listedIn.set(key, String(name));
    }
  }
  return problems.sort((a, b) => (a.line ?? 0) - (b.line ?? 0) || (a.column ?? 0) - (b.column ?? 0));
}

/** The problems as the message of the usage error apply stops with, one line each. */
export function formatFleetProblems(problems: readonly ManifestProblem[]): string {
  return problems.map(formatProblem).join('\n');
}
