/**
 * The privileges each profile knows and the built-in roles made of them: the simulator's version
 * of pve-access-control's role table (PVE 9 split `VM.Monitor` into the `VM.GuestAgent.*` set).
 */
import type { ProfileFacts } from './profiles.ts';

const PRIVS_COMMON = [
  'Datastore.Allocate',
  'Datastore.AllocateSpace',
  'Datastore.AllocateTemplate',
  'Datastore.Audit',
  'Group.Allocate',
  'Permissions.Modify',
  'Pool.Allocate',
  'Pool.Audit',
  'Realm.Allocate',
  'Realm.AllocateUser',
  'SDN.Allocate',
  'SDN.Audit',
  'SDN.Use',
  'Sys.Audit',
  'Sys.Console',
  'Sys.Incoming',
  'Sys.Modify',
  'Sys.PowerMgmt',
  'Sys.Syslog',
  'User.Modify',
  'VM.Allocate',
  'VM.Audit',
  'VM.Backup',
  'VM.Clone',
  'VM.Config.CDROM',
  'VM.Config.CPU',
  'VM.Config.Cloudinit',
  'VM.Config.Disk',
  'VM.Config.HWType',
  'VM.Config.Memory',
  'VM.Config.Network',
  'VM.Config.Options',
  'VM.Console',
  'VM.Migrate',
  'VM.PowerMgmt',
  'VM.Snapshot',
  'VM.Snapshot.Rollback',
];
const PRIVS_V9 = [
  'VM.GuestAgent.Audit',
  'VM.GuestAgent.FileRead',
  'VM.GuestAgent.FileWrite',
  'VM.GuestAgent.FileSystemMgmt',
  'VM.GuestAgent.Unrestricted',
  'VM.Replicate',
];

export function privilegesOf(p: ProfileFacts): string[] {
  return p.guestAgentPrivs ? [...PRIVS_COMMON, ...PRIVS_V9].sort() : [...PRIVS_COMMON, 'VM.Monitor'].sort();
}

export function builtinRoles(p: ProfileFacts): Record<string, Set<string>> {
  const all = privilegesOf(p);
  const vm = all.filter((x) => x.startsWith('VM.'));
  return {
    Administrator: new Set(all),
    NoAccess: new Set(),
    PVEAuditor: new Set(all.filter((x) => x.endsWith('.Audit'))),
    PVEVMAdmin: new Set([...vm, 'Datastore.Audit', 'Pool.Audit', 'Sys.Audit']),
    PVEVMUser: new Set([
      'VM.Audit',
      'VM.Backup',
      'VM.Config.CDROM',
      'VM.Config.Cloudinit',
      'VM.Console',
      'VM.PowerMgmt',
      ...(p.guestAgentPrivs ? ['VM.GuestAgent.Audit'] : []),
    ]),
    PVEDatastoreUser: new Set(['Datastore.AllocateSpace', 'Datastore.Audit']),
    PVEDatastoreAdmin: new Set([
      'Datastore.Allocate',
      'Datastore.AllocateSpace',
      'Datastore.AllocateTemplate',
      'Datastore.Audit',
    ]),
    PVESDNUser: new Set(['SDN.Audit', 'SDN.Use']),
    PVEPoolUser: new Set(['Pool.Audit']),
    PVEPoolAdmin: new Set(['Pool.Allocate', 'Pool.Audit']),
  };
}
