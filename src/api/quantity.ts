/** Kubernetes-style quantities for memory and disk sizes (`4Gi`, `512Mi`, `20G`, `1Ti`, bare MiB/GiB numbers). */

const BINARY: Record<string, number> = { Ki: 1024, Mi: 1024 ** 2, Gi: 1024 ** 3, Ti: 1024 ** 4, Pi: 1024 ** 5 };
const DECIMAL: Record<string, number> = { k: 1e3, K: 1e3, M: 1e6, G: 1e9, T: 1e12, P: 1e15 };

export const QUANTITY_PATTERN = '^[0-9]+(\\.[0-9]+)?(Ki|Mi|Gi|Ti|Pi|k|K|M|G|T|P)?$';

/** A quantity's number and unit (parseQuantity, decimalSizeWarning). */
const QUANTITY_RE = /^([0-9]+(?:\.[0-9]+)?)(Ki|Mi|Gi|Ti|Pi|k|K|M|G|T|P)?$/;

/** Bytes of a quantity; a bare number is read in `bareUnit` bytes (MiB for memory, GiB for disks). */
export function parseQuantity(q: string | number, bareUnit: number): number | undefined {
  if (typeof q === 'number') return Number.isFinite(q) && q >= 0 ? Math.round(q * bareUnit) : undefined;
  const m = QUANTITY_RE.exec(q.trim());
  if (!m) return undefined;
  const n = Number(m[1]);
  const u = m[2];
  if (!u) return Math.round(n * bareUnit);
  return Math.round(n * (BINARY[u] ?? DECIMAL[u] ?? 1));
}

export const KiB = 1024;
export const MiB = 1024 ** 2;
export const GiB = 1024 ** 3;
export const TiB = 1024 ** 4;

export function formatBytes(b: number): string {
  if (b >= TiB && b % TiB === 0) return `${b / TiB}Ti`;
  if (b >= GiB && b % GiB === 0) return `${b / GiB}Gi`;
  if (b >= MiB && b % MiB === 0) return `${b / MiB}Mi`;
  if (b >= GiB) return `${(b / GiB).toFixed(1)}Gi`;
  return `${Math.round(b / MiB)}Mi`;
}

/**
 * A size written in decimal units (`4G`: 4,000,000,000 bytes, as Kubernetes reads a quantity),
 * which a Proxmox operator rarely means: PVE's own `4G` and "4 gigs" are GiB. Valid, so warned
 * about, not refused: what it is in bytes and in `shownIn` (memory: MiB, PVE's unit; disks: GiB),
 * and the binary spelling. Undefined for any other size.
 */
export function decimalSizeWarning(q: string | number | undefined, shownIn: 'MiB' | 'GiB'): string | undefined {
  if (typeof q !== 'string') return undefined;
  const m = QUANTITY_RE.exec(q.trim());
  if (!m?.[2] || !(m[2] in DECIMAL)) return undefined;
  const bytes = parseQuantity(q, 1)!;
  const unit = m[2]!.toUpperCase();
  const binary = `${m[1]}${unit === 'K' ? 'Ki' : `${unit}i`}`;
  const as = shownIn === 'GiB' && bytes >= GiB ? `${(bytes / GiB).toFixed(1)} GiB` : `${(bytes / MiB).toFixed(1)} MiB`;
  return `'${q}' is ${bytes.toLocaleString('en-US')} bytes, ${as} (${m[2]} is a power of 1000, as in Kubernetes); for ${m[1]} ${unit === 'K' ? 'KiB' : `${unit}iB`} write '${binary}'`;
}

/**
 * A ProxmoxVM spec's sizes in decimal units, each with its field and decimalSizeWarning's message:
 * memory (shown in MiB, PVE's unit), the boot disk and the extra disks (in GiB).
 */
export function decimalSizes(fp: {
  memory?: string | number | undefined;
  disk?: string | number | undefined;
  disks?: ReadonlyArray<{ size: string | number }> | undefined;
}): Array<{ field: string; message: string }> {
  const sizes: Array<[string, string | number | undefined, 'MiB' | 'GiB']> = [
    ['spec.forProvider.memory', fp.memory, 'MiB'],
    ['spec.forProvider.disk', fp.disk, 'GiB'],
    ...(fp.disks ?? []).map((d, i): [string, string | number, 'GiB'] => [
      `spec.forProvider.disks[${i}].size`,
      d.size,
      'GiB',
    ]),
  ];
  const out: Array<{ field: string; message: string }> = [];
  for (const [field, q, shownIn] of sizes) {
    const message = decimalSizeWarning(q, shownIn);
    if (message) out.push({ field, message });
  }
  return out;
}
