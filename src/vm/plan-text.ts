/**
 * A plan as an operator reads it: one line per resource that changes, its fields below it, the
 * warnings once, then the counts (`apply`, `apply --dry-run`, `fleet plan`). The plans themselves
 * are made in plan.ts; this file only words them.
 */
import type { FieldChange, PlanAction, ResourcePlan } from './plan.ts';

const MARK: Record<PlanAction, string> = {
  create: '+',
  adopt: '=',
  update: '~',
  'update-reboot': '~',
  reboot: '↻',
  replace: '±',
  'retire-duplicate': '-',
  'no-op': ' ',
  refused: '!',
};

function describeChange(f: FieldChange): string {
  const what = f.field && f.field !== f.key ? `${f.key} (${f.field})` : f.key;
  return `${what}: ${f.from ?? '(unset)'} -> ${f.to}${f.detail ? ` (${f.detail})` : ''}${f.reboot ? ' (at the next boot)' : ''}`;
}

/** The plans' warnings, each once (a site without quorum is every plan's there). */
export function planWarnings(plans: ResourcePlan[]): string[] {
  return [...new Set(plans.flatMap((p) => (p.warning ? [p.warning] : [])))].map((w) => `  ! warning: ${w}`);
}

/**
 * The plan as an operator reads it: one line per resource that changes (with `unchanged`, every
 * resource), its fields below it, then the counts (unless `summary: false`). `suffix` adds to a
 * resource's line (the rollout's "after ..."). `header`: a title over the changes, only when there
 * is one (a plan without changes is its summary line alone).
 */
export function describePlans(
  plans: ResourcePlan[],
  opts: {
    unchanged?: boolean;
    summary?: boolean;
    warnings?: boolean;
    header?: boolean;
    suffix?: (p: ResourcePlan) => string;
  } = {},
): string[] {
  const lines: string[] = opts.header && plans.some((p) => p.action !== 'no-op') ? ['Changes, read from Proxmox:'] : [];
  for (const p of plans) {
    if (p.action === 'no-op' && !opts.unchanged) continue;
    const where = p.vmid !== undefined ? ` (VM ${p.vmid}${p.node ? ` on ${p.node}` : ''})` : '';
    const head = `  ${MARK[p.action]} ${p.action.padEnd(13)} ${p.key}${where}${opts.suffix?.(p) ?? ''}`;
    if (p.action === 'refused') lines.push(`${head}: ${p.reason}: ${p.message ?? ''}`);
    else if (p.action === 'adopt') lines.push(`${head}: found by its ownership marker; nothing is created`);
    else if (p.action === 'create') lines.push(p.message ? `${head}: ${p.message}` : head);
    else if (p.action === 'no-op') lines.push(head);
    else if (p.action === 'reboot')
      lines.push(`${head}: reboots to apply ${p.pending.join(', ')} (rebootPolicy: IfNeeded)`);
    else {
      lines.push(head);
      for (const f of p.changes) lines.push(`      ${describeChange(f)}`);
      if (p.pending.length) lines.push(`      already pending until the next boot: ${p.pending.join(', ')}`);
    }
  }
  if (opts.summary === false) return lines;
  if (opts.warnings !== false) lines.push(...planWarnings(plans));
  const n = (a: PlanAction) => plans.filter((p) => p.action === a).length;
  const reboots = n('update-reboot');
  lines.push(
    `Plan: ${n('create')} to create, ${n('adopt')} to adopt, ${n('update') + reboots} to update${reboots ? ` (${reboots} only at the next boot)` : ''}, ${n('reboot')} to reboot, ${n('no-op')} unchanged${n('replace') ? `, ${n('replace')} to replace (data loss)` : ''}${n('retire-duplicate') ? `, ${n('retire-duplicate')} duplicate VM(s) to destroy` : ''}${n('refused') ? `, ${n('refused')} refused` : ''}.`,
  );
  return lines;
}

/** Whether applying the plans changes anything. */
export function plansChange(plans: ResourcePlan[]): boolean {
  return plans.some((p) => p.action !== 'no-op' && p.action !== 'refused');
}
