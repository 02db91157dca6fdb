/**
 * UPIDs: `UPID:<node>:<pid 8 hex>:<pstart 8-9 hex>:<starttime 8 hex>:<type>:<id>:<user>:`
 * (PVE::Tools upid_decode). The user may be a token (`root@pam!provider`). A clone's id is the
 * *source* vmid.
 */
export interface Upid {
  upid: string;
  node: string;
  pid: number;
  pstart: number;
  /** Unix seconds. */
  starttime: number;
  type: string;
  id: string;
  /** `user@realm` (without the token part). */
  user: string;
  tokenId: string | undefined;
}

const UPID_RE =
  /^UPID:([a-zA-Z0-9]([a-zA-Z0-9-]*[a-zA-Z0-9])?):([0-9A-Fa-f]{8}):([0-9A-Fa-f]{8,9}):([0-9A-Fa-f]{8}):([^:\s]+):([^:\s]*):([^:\s]+):$/;

export function parseUpid(upid: string): Upid | undefined {
  const m = UPID_RE.exec(upid);
  if (!m) return undefined;
  const who = m[8]!;
  const bang = who.indexOf('!');
  return {
    upid,
    node: m[1]!,
    pid: Number.parseInt(m[3]!, 16),
    pstart: Number.parseInt(m[4]!, 16),
    starttime: Number.parseInt(m[5]!, 16),
    type: m[6]!,
    id: m[7]!,
    user: bang >= 0 ? who.slice(0, bang) : who,
    tokenId: bang >= 0 ? who.slice(bang + 1) : undefined,
  };
}

/** Like parseUpid, but throws a TypeError naming the problem. */
export function mustParseUpid(upid: string): Upid {
  const u = parseUpid(upid);
  if (!u) throw new TypeError(`not a Proxmox VE task id (UPID): ${JSON.stringify(upid.slice(0, 120))}`);
  return u;
}

/**
 * The outcome of a finished task from its exit status: `OK` and `WARNINGS: N` are successes
 * (the latter with N warnings); anything else is the error text.
 */
export function exitOutcome(exitstatus: string): { ok: true; warnings: number } | { ok: false; error: string } {
  const s = exitstatus.trim();
  if (s === 'OK') return { ok: true, warnings: 0 };
  const w = /^WARNINGS: (\d+)$/.exec(s);
  if (w) return { ok: true, warnings: Number(w[1]) };
  return { ok: false, error: s };
}

/**
 * Whether a task's exit status (or an error text carrying it) says its worker vanished before it
 * wrote its end (a node crash or restart, an OOM kill): PVE then reads `unexpected status`
 * (pve-common src/PVE/UPID.pm:83).
 */
export function workerDied(status: string): boolean {
  return /\bunexpected status\b/.test(status);
}
