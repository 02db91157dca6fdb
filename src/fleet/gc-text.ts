/**
 * How `gc` prints its findings: one table row per VM it lists, a long detail that several rows
 * share printed once under the table, and other installations' VMs as one line per site.
 */
import type { GcFinding } from './gc.ts';

/**
 * One line when every orphan candidate is a running VM of this installation with a uid the store
 * never held: then the store is most likely not the one that manages them (the wrong --state).
 */
export function wrongStoreNote(findings: GcFinding[], store = 'this state file'): string | undefined {
  const candidates = findings.filter((f) => f.kind === 'orphan' || f.kind === 'legacy-unknown');
  if (
    !candidates.length ||
    !candidates.every((f) => f.kind === 'orphan' && !f.uidKnown && !f.deletable && f.status !== 'stopped')
  )
    return undefined;
  return `All ${candidates.length} orphan candidate(s) are running VMs of this installation whose uids ${store} never held: it is probably not the state file that manages them (check --state); none of them is deleted.`;
}

export function formatGc(findings: GcFinding[], opts: { note?: string } = {}): string {
  const listed = findings.filter((f) => f.kind !== 'managed-elsewhere');
  const lines: string[] = [];
  if (!listed.length) lines.push('No orphaned, stuck or half-created VMs.');
  // A long detail that several rows share is printed once under the table, each row naming it
  // (29 VMs of another state file repeated the same 300 characters on every row).
  const details = listed.map((f) => f.action ?? f.detail);
  const times = new Map<string, number>();
  for (const d of details) times.set(d, (times.get(d) ?? 0) + 1);
  const shared: string[] = [];
  const shown = (d: string) => {
    if ((times.get(d) ?? 0) < 2 || d.length <= 60) return d;
    if (!shared.includes(d)) shared.push(d);
    return `see [${shared.indexOf(d) + 1}] below`;
  };
  if (listed.length) {
    const rows = listed.map((f, i) => [
      f.site,
      f.node,
      String(f.vmid),
      f.name,
      f.kind,
      f.owner ?? '',
      f.status,
      f.lock ?? '',
      shown(details[i]!),
    ]);
    const head = ['SITE', 'NODE', 'VMID', 'NAME', 'KIND', 'OWNER', 'STATUS', 'LOCK', 'DETAIL'];
    const w = head.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i]!.length)));
    const line = (r: string[]) =>
      r
        .map((c, i) => (i === r.length - 1 ? c : c.padEnd(w[i]!)))
        .join('   ')
        .trimEnd();
    lines.push(line(head), ...rows.map(line));
    if (shared.length) lines.push('', ...shared.map((d, i) => `[${i + 1}] ${d}`));
  }
  // Other installations' VMs: one line per site and installation (-o json lists each VM).
  const elsewhere = new Map<string, number>();
  for (const f of findings)
    if (f.kind === 'managed-elsewhere') {
      const k = `${f.site}\u0000${f.installation ?? ''}`;
      elsewhere.set(k, (elsewhere.get(k) ?? 0) + 1);
    }
  if (elsewhere.size) lines.push('');
  for (const [k, n] of [...elsewhere].sort(([a], [b]) => a.localeCompare(b))) {
    const [site, inst] = k.split('\u0000');
    lines.push(`${site}: ${n} VM(s) of installation '${inst}': managed elsewhere, never deleted from here`);
  }
  if (opts.note) lines.push('', opts.note);
  return lines.join('\n');
}
