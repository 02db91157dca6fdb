/**
 * What a site can do, derived from its version and the credentials (research section 5):
 *
 * | capability            | from                 |
 * |-----------------------|----------------------|
 * | importFrom            | PVE 7.2 (qemu-server 7.1-5) |
 * | importContent         | PVE 8.3 (`local:import/*.qcow2` as import-from source) |
 * | asyncResize           | PVE 8.0 (resize answers a UPID) |
 * | memoryString          | PVE 8.1 (`memory` is a string in GET config) |
 * | bridgeAccessCheck     | PVE 8.0 (SDN.Use needed on /sdn/zones/localnetwork/<bridge>) |
 * | guestAgentPrivileges  | PVE 9.0 (VM.GuestAgent.* instead of VM.Monitor) |
 * | errorMessageField     | PVE 8.3+ (libpve-http-server-perl 5.2.0), taken as 8.4 |
 * | genericAuthFailure    | PVE 9.1.5 (401 reason always `Authentication failed!`) |
 * | rootTicket            | credentials are root@pam with password (ticket): skiplock, unlock, absolute import paths |
 */
import type { VersionInfo } from './types.ts';

export interface PveVersion {
  major: number;
  minor: number;
  patch: number;
  /** As PVE reports it (`8.4.5`, `7.4-16`). */
  text: string;
}

export interface Capabilities {
  version: PveVersion;
  release: string;
  importFrom: boolean;
  importContent: boolean;
  asyncResize: boolean;
  memoryString: boolean;
  bridgeAccessCheck: boolean;
  guestAgentPrivileges: boolean;
  /** Privilege that lets read the guest agent's network interfaces. */
  agentAuditPrivilege: 'VM.GuestAgent.Audit' | 'VM.Monitor';
  errorMessageField: boolean;
  genericAuthFailure: boolean;
  haManagedOnCreate: boolean;
  /** root@pam authenticated with a ticket. */
  rootTicket: boolean;
  authId: string;
  authKind: 'token' | 'ticket';
  /** When these facts were discovered (client clock, ms). */
  discoveredAt: number;
}

/** `8.4.5`, `7.4-16`, `6.4-15`, `9.2.3` -> numbers. */
export function parseVersion(text: string): PveVersion {
  const m = /^(\d+)\.(\d+)(?:[.-](\d+))?/.exec(text.trim());
  if (!m) throw new TypeError(`unrecognised Proxmox VE version '${text}'`);
  return { major: Number(m[1]), minor: Number(m[2]), patch: Number(m[3] ?? 0), text: text.trim() };
}

export function atLeast(v: PveVersion, major: number, minor = 0, patch = 0): boolean {
  if (v.major !== major) return v.major > major;
  if (v.minor !== minor) return v.minor > minor;
  return v.patch >= patch;
}

export function capabilitiesFrom(
  info: VersionInfo,
  identity: { authId: string; kind: 'token' | 'ticket'; isRootTicket: boolean },
  discoveredAt: number,
): Capabilities {
  const v = parseVersion(info.version);
  const agent9 = atLeast(v, 9);
  return {
    version: v,
    release: info.release,
    importFrom: atLeast(v, 7, 2),
    importContent: atLeast(v, 8, 3),
    asyncResize: atLeast(v, 8),
    memoryString: atLeast(v, 8, 1),
    bridgeAccessCheck: atLeast(v, 8),
    guestAgentPrivileges: agent9,
    agentAuditPrivilege: agent9 ? 'VM.GuestAgent.Audit' : 'VM.Monitor',
    errorMessageField: atLeast(v, 8, 3),
    genericAuthFailure: atLeast(v, 9, 1, 5),
    haManagedOnCreate: atLeast(v, 9, 1),
    rootTicket: identity.isRootTicket,
    authId: identity.authId,
    authKind: identity.kind,
    discoveredAt,
  };
}

/** The capabilities as a short list for reports: `import-from, import content, async resize`. */
export function describeCapabilities(c: Capabilities): string[] {
  const out: string[] = [];
  out.push(c.importFrom ? 'import-from: yes' : 'import-from: no (PVE < 7.2: cloud images need a template)');
  out.push(c.importContent ? "'import' content volumes: yes" : "'import' content volumes: no (PVE < 8.3)");
  out.push(c.asyncResize ? 'resize: task' : 'resize: synchronous');
  out.push(`guest agent privilege: ${c.agentAuditPrivilege}`);
  out.push(c.rootTicket ? 'root@pam ticket: yes (unlock, absolute import paths)' : 'root@pam ticket: no');
  return out;
}
