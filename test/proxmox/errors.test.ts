/** Every error class of the taxonomy, produced by the simulator (real answers, injected faults). */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import {
  AlreadyExistsError,
  AuthenticationError,
  ConflictError,
  classifyMessage,
  classifyResponse,
  LockedError,
  LockTimeoutError,
  NotFoundError,
  NotImplementedError,
  ParameterError,
  PermissionError,
  ProtocolError,
  type PveError,
  ServerError,
  TaskFailedError,
  UnavailableError,
} from '../../src/proxmox/errors.ts';
import * as Cluster from '../../src/proxmox/requests-cluster.ts';
import type { Simulator } from '../../src/sim/index.ts';
import { client, NODE, rejection, sim } from './helpers.ts';

let s: Simulator;
before(async () => {
  s = await sim('8.4');
});
after(async () => {
  await s.close();
});

async function createVm(vmid: number, extra: Record<string, string | number> = {}): Promise<void> {
  const { c } = client(s);
  await c.waitTask(await c.createVm(NODE, vmid, { name: `vm-${vmid}`, memory: 512, scsi0: 'local-lvm:1', ...extra }));
  await c.close();
}

describe('error taxonomy against the simulator', () => {
  it('authentication (401): a wrong token secret; not retried', async () => {
    const { c, rec } = client(s, {
      credentials: {
        kind: 'token',
        tokenId: 'root@pam!provider',
        secret: new (await import('../../src/proxmox/secret.ts')).Secret('wrong-secret-value'),
      },
    });
    const e = await rejection(c.version());
    assert.ok(e instanceof AuthenticationError);
    assert.equal(e.kind, 'authentication');
    assert.equal(e.status, 401);
    assert.equal(e.retryable, false);
    assert.match(e.reason, /invalid token value/);
    assert.equal(rec.events.length, 1, 'no retry of a 401 with a token');
    await c.close();
  });

  it('permission (403): a privilege-separated token without ACLs; ACL path and privilege parsed', async () => {
    const site = s.cluster('site-1');
    site.addUser('perm@pve', 'x');
    site.setAcl('/', 'perm@pve', 'PVEAuditor');
    const secret = site.addToken('perm@pve', 'ro', { privsep: true });
    const { c } = client(s, {
      credentials: {
        kind: 'token',
        tokenId: 'perm@pve!ro',
        secret: new (await import('../../src/proxmox/secret.ts')).Secret(secret),
      },
    });
    const e = await rejection(c.nodeStatus(NODE));
    assert.ok(e instanceof PermissionError, String(e));
    assert.equal(e.status, 403);
    assert.equal(e.aclPath, `/nodes/${NODE}`);
    assert.equal(e.privilege, 'Sys.Audit');
    assert.match(e.message, /Sys\.Audit is needed on \/nodes\/ml110-01/);
    // List endpoints filter instead of failing.
    assert.deepEqual(await c.clusterResources('vm'), []);
    await c.close();
  });

  it('parameter (400): per-parameter map', async () => {
    const { c } = client(s);
    const e = await rejection(c.createVm(NODE, 99, { name: 'bad name!', memory: 'lots' }));
    assert.ok(e instanceof ParameterError, String(e));
    assert.equal(e.status, 400);
    assert.ok(e.errors.vmid, 'vmid 99 is refused');
    assert.ok(e.errors.memory);
    assert.ok(e.errors.name);
    assert.match(e.message, /Parameter verification failed\./);
    await c.close();
  });

  it('not found: a missing VM config, an unknown task, an unknown node', async () => {
    const { c } = client(s);
    const vm = await rejection(c.vmStatus(NODE, 4242));
    assert.ok(vm instanceof NotFoundError);
    assert.equal(vm.resource, 'vm');
    assert.equal(vm.id, '4242');
    assert.equal(await c.findVmStatus(NODE, 4242), undefined);
    const task = await rejection(c.taskStatus('UPID:ml110-01:00000001:00000002:00000003:qmstart:100:root@pam:'));
    assert.ok(task instanceof NotFoundError);
    assert.equal(task.resource, 'task');
    const node = await rejection(c.nodeStatus('no-such-node'));
    assert.ok(node instanceof NotFoundError);
    assert.equal(node.resource, 'node');
    await c.close();
  });

  it('locked: `VM is locked (backup)` on a config write; retryable', async () => {
    await createVm(301);
    const fid = s.cluster('site-1').addFault({ kind: 'lock', vmid: 301, lock: 'backup', flock: false });
    const { c } = client(s);
    const e = await rejection(c.updateVmConfig(NODE, 301, { set: { description: 'x' } }));
    assert.ok(e instanceof LockedError, String(e));
    assert.equal(e.lock, 'backup');
    assert.equal(e.retryable, true);
    s.cluster('site-1').faults.remove(fid);
    await c.close();
  });

  it('locked inside a task: start of a locked VM fails the task with causeKind locked', async () => {
    await createVm(302);
    const fid = s.cluster('site-1').addFault({ kind: 'lock', vmid: 302, lock: 'migrate', flock: false });
    const { c } = client(s);
    const upid = await c.startVm(NODE, 302);
    const e = await rejection(c.waitTask(upid));
    assert.ok(e instanceof TaskFailedError, String(e));
    assert.equal(e.causeKind, 'locked');
    assert.equal(e.retryable, true);
    assert.equal(e.exitStatus, 'VM is locked (migrate)');
    assert.ok(e.logTail.some((l) => l.includes('TASK ERROR')));
    s.cluster('site-1').faults.remove(fid);
    await c.close();
  });

  it('lock timeout: the VM flock is held, a PUT config gives `got timeout`', async () => {
    await createVm(303);
    const fid = s.cluster('site-1').addFault({ kind: 'lock', vmid: 303, flock: true });
    const { c } = client(s);
    const e = await rejection(c.updateVmConfig(NODE, 303, { set: { description: 'y' } }, { sync: true }));
    assert.ok(e instanceof LockTimeoutError, String(e));
    assert.equal(e.lockFile, '/var/lock/qemu-server/lock-303.conf');
    assert.equal(e.retryable, true);
    s.cluster('site-1').faults.remove(fid);
    await c.close();
  });

  it('already exists: a duplicate create (500) and a taken nextid (400)', async () => {
    await createVm(304);
    const { c } = client(s);
    const e = await rejection(c.createVm(NODE, 304, { name: 'dup' }));
    assert.ok(e instanceof AlreadyExistsError, String(e));
    assert.equal(e.vmid, 304);
    assert.equal(e.node, NODE);
    const n = await rejection(c.call(Cluster.nextId(304)));
    assert.ok(n instanceof AlreadyExistsError);
    assert.equal(n.vmid, 304);
    assert.equal(await c.isVmidFree(304), false);
    assert.equal(await c.isVmidFree(305), true);
    await c.close();
  });

  it('conflict: a stale digest', async () => {
    await createVm(306);
    const { c } = client(s);
    const e = await rejection(c.updateVmConfig(NODE, 306, { set: { description: 'z' }, digest: '0'.repeat(40) }));
    assert.ok(e instanceof ConflictError, String(e));
    assert.equal(e.retryable, true);
    await c.close();
  });

  it('not implemented (501): a method PVE does not have', async () => {
    const { c } = client(s);
    const e = await rejection(
      c.call({
        method: 'POST',
        path: '/nodes/{node}/qemu/{vmid}/importdisk',
        pathParams: { node: NODE, vmid: 100 },
        params: {},
        idempotent: false,
        decode: (d) => d,
      }),
    );
    assert.ok(e instanceof NotImplementedError, String(e));
    assert.equal(e.status, 501);
    assert.match(e.reason, /^Method 'POST (\/api2\/json)?\/nodes\/ml110-01\/qemu\/100\/importdisk' not implemented$/);
    await c.close();
  });

  it('unavailable: 595 from an offline node; 503; connection reset', async () => {
    const site = s.cluster('site-1');
    const { c } = client(s);
    const f1 = site.addFault({ kind: 'node-offline', node: NODE });
    const e1 = await rejection(c.nodeStatus(NODE));
    assert.ok(e1 instanceof UnavailableError, String(e1));
    assert.equal(e1.status, 595);
    assert.equal(e1.retryable, true);
    site.faults.remove(f1);

    const f2 = site.addFault({
      kind: 'request',
      method: 'GET',
      path: '/nodes/{node}/storage',
      status: 503,
      message: 'Service Unavailable',
      count: -1,
    });
    const e2 = await rejection(c.nodeStorages(NODE));
    assert.ok(e2 instanceof UnavailableError);
    assert.equal(e2.status, 503);
    site.faults.remove(f2);

    // For the whole read, retries included: at speed 1000 a 60 s outage is 60 ms of real time, and
    // under a loaded run the last retry came after it and was answered. Removed below in any case.
    const f3 = site.addFault({ kind: 'unavailable', ms: 3_600_000, mode: 'reset' });
    const e3 = await rejection(c.version());
    assert.ok(e3 instanceof UnavailableError, String(e3));
    assert.equal(e3.status, undefined);
    assert.ok(e3.failures.length >= 1);
    site.faults.remove(f3);
    await c.close();
  });

  it('server: a handler refusal without a specific class (`VM N is running - destroy failed`)', async () => {
    await createVm(307);
    const { c } = client(s);
    await c.waitTask(await c.startVm(NODE, 307));
    const e = await rejection(c.deleteVm(NODE, 307));
    assert.ok(e instanceof ServerError, String(e));
    assert.equal(e.retryable, false);
    assert.equal(e.reason, 'VM 307 is running - destroy failed');
    await c.close();
  });

  it('task failed: an injected task failure, exit status kept', async () => {
    const site = s.cluster('site-1');
    const fid = site.addFault({
      kind: 'task',
      type: 'qmcreate',
      action: 'fail',
      message: 'storage migration failed: disk full',
    });
    const { c } = client(s);
    const upid = await c.createVm(NODE, 308, { name: 'tf', scsi0: 'local-lvm:1' });
    const check = await c.checkTask(upid);
    // non-blocking: may still be running; wait for the end
    const e = check.state === 'failed' ? check.error : await rejection(c.waitTask(upid));
    assert.ok(e instanceof TaskFailedError, String(e));
    assert.equal(e.exitStatus, 'storage migration failed: disk full');
    assert.equal(e.causeKind, 'server');
    assert.equal(e.retryable, false);
    assert.match(e.message, /task qmcreate 308 failed: storage migration failed: disk full/);
    site.faults.remove(fid);
    await c.close();
  });

  it('an injected error on any path maps by status and message', async () => {
    const site = s.cluster('site-1');
    const { c } = client(s, { retry: { attempts: 1 } });
    const cases: Array<[number, string, new (...a: never[]) => PveError]> = [
      [500, "can't lock file '/var/lock/qemu-server/lock-100.conf' - got timeout", LockTimeoutError],
      [500, 'VM is locked (clone)', LockedError],
      [403, 'Permission check failed (/vms/100, VM.Allocate)', PermissionError],
      [401, 'invalid token value!', AuthenticationError],
      [500, 'something else broke', ServerError],
      [502, 'Bad Gateway', UnavailableError],
      [596, 'Broken pipe', UnavailableError],
      [404, 'Not Found', ProtocolError],
    ];
    for (const [status, message, cls] of cases) {
      const fid = site.addFault({
        kind: 'request',
        method: 'GET',
        path: '/cluster/resources',
        status,
        message,
        count: 1,
      });
      const e = await rejection(c.clusterResources());
      assert.ok(e instanceof cls, `${status} ${message} -> ${String(e)}`);
      assert.equal((e as PveError).status, status);
      site.faults.remove(fid);
    }
    await c.close();
  });
});

describe('classification (unit)', () => {
  const ctx = { site: 's', method: 'GET', path: '/x' };
  it('PVE 7.x error: reason only in the status line, no message field', () => {
    const e = classifyResponse({ ...ctx, status: 500 }, 'VM is locked (create)', { data: null });
    assert.ok(e instanceof LockedError);
    assert.equal(e.lock, 'create');
  });
  it('PVE 8.4+: message field wins over the status line; trailing newline dropped', () => {
    const e = classifyResponse({ ...ctx, status: 500 }, 'x', {
      data: null,
      message: "VM 100 already exists on node 'pve'\n",
    });
    assert.ok(e instanceof AlreadyExistsError);
    assert.equal(e.reason, "VM 100 already exists on node 'pve'");
  });
  it('clone target exists', () => {
    assert.equal(classifyMessage('unable to create VM 101: config file already exists')?.kind, 'already-exists');
  });
  it('CSRF failure is an authentication error', () => {
    const e = classifyResponse({ ...ctx, status: 401 }, 'Permission denied - invalid csrf token', undefined);
    assert.ok(e instanceof AuthenticationError);
    assert.match(e.message, /invalid csrf token/);
  });
  it('token on a ticket-only endpoint (403, or 401 on older servers)', () => {
    const reason = "URI '/api2/json/access/users' not available with API token, need proper ticket.";
    const e = classifyResponse({ ...ctx, status: 403 }, reason, { data: null });
    assert.ok(e instanceof PermissionError);
    assert.equal(e.needsTicket, true);
    assert.match(e.message, /needs user \+ password authentication/);
    const e401 = classifyResponse({ ...ctx, status: 401 }, reason, undefined);
    assert.ok(e401 instanceof AuthenticationError);
    assert.equal(e401.needsTicket, true);
  });
  it('missing pool is a 403 without ACL path', () => {
    const e = classifyResponse({ ...ctx, status: 403 }, "Permission check failed (pool 'x' does not exist)", {
      data: null,
    });
    assert.ok(e instanceof PermissionError);
    assert.equal(e.aclPath, undefined);
  });
  it('task WARNINGS are not errors; task errors classify their text', () => {
    const e = new TaskFailedError(
      ctx,
      'UPID:pve:00000001:00000002:00000003:qmclone:9000:root@pam:',
      "can't lock file '/x' - got timeout",
    );
    assert.equal(e.causeKind, 'lock-timeout');
    assert.equal(e.retryable, true);
    assert.match(e.message, /task qmclone 9000 failed/);
  });
});

describe('a migration that aborted: its cause from the log line before its exit status', () => {
  const ctx = { site: 'site-1', method: 'GET', path: '/nodes/{node}/tasks/{upid}/status' };
  const upid = 'UPID:pve-a:00001234:0000ABCD:6500AAAA:qmigrate:100:root@pam:';
  it("`migration aborted` with the target's quorum refusal -> no-quorum, retryable, the cause in the message", () => {
    const e = new TaskFailedError(ctx, upid, 'migration aborted', [
      '2026-12-07 12:00:00 remote: started tunnel worker',
      '2026-12-07 12:00:01 ERROR: migration aborted (duration 00:00:01): 500 cluster not ready - no quorum?',
      'TASK ERROR: migration aborted',
    ]);
    assert.equal(e.causeKind, 'no-quorum');
    assert.equal(e.retryable, true);
    assert.equal(e.exitStatus, 'migration aborted');
    assert.match(e.message, /task qmigrate 100 failed: migration aborted: 500 cluster not ready - no quorum\?$/);
  });
  it('any other cause is shown and keeps its class; a log without the line leaves the exit status alone', () => {
    const local = new TaskFailedError(ctx, upid, 'migration aborted', [
      "2025-06-29 20:53:55 ERROR: migration aborted (duration 00:00:00): can't migrate VM which uses local devices: usb1",
      'TASK ERROR: migration aborted',
    ]);
    assert.equal(local.causeKind, 'server');
    assert.equal(local.retryable, false);
    assert.match(local.message, /migration aborted: can't migrate VM which uses local devices: usb1$/);
    const bare = new TaskFailedError(ctx, upid, 'migration aborted', ['TASK ERROR: migration aborted']);
    assert.match(bare.message, /task qmigrate 100 failed: migration aborted$/);
  });
});
