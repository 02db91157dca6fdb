import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import {
  type HttpMethod,
  type MethodSchema,
  matchMethod,
  methodsOf,
  PerlDie,
  type Profile,
  type PropertyStringFormat,
  paramSchema,
  parsePropertyString,
  SCHEMA_PROFILES,
  validateParams,
} from '../../src/sim/schema/index.ts';

const NOT_DEFINED = 'property is not defined in schema and the schema does not allow additional properties';

function method(profile: Profile, verb: HttpMethod, path: string): MethodSchema {
  const m = matchMethod(profile, verb, path);
  assert.ok(m, `${profile}: ${verb} ${path} should exist`);
  return m.schema;
}

/** validate against POST /nodes/pve/qemu (create) with the path params the server would add */
function create(profile: Profile, raw: Record<string, unknown>) {
  return validateParams(method(profile, 'POST', '/nodes/pve/qemu'), { node: 'pve', vmid: '100', ...raw });
}

function configPost(profile: Profile, raw: Record<string, unknown>) {
  return validateParams(method(profile, 'POST', '/nodes/pve/qemu/100/config'), { node: 'pve', vmid: '100', ...raw });
}

describe('matchMethod', () => {
  for (const p of SCHEMA_PROFILES) {
    it(`${p}: finds templates and path params`, () => {
      const m = matchMethod(p, 'POST', '/nodes/pve/qemu/100/status/start');
      assert.ok(m);
      assert.equal(m.template, '/nodes/{node}/qemu/{vmid}/status/start');
      assert.deepEqual(m.pathParams, { node: 'pve', vmid: '100' });
      assert.equal(m.schema.method, 'POST');
      assert.equal(m.schema.profile, p);
    });

    it(`${p}: has no importdisk REST method`, () => {
      assert.equal(matchMethod(p, 'POST', '/nodes/pve/qemu/100/importdisk'), undefined);
    });

    it(`${p}: GET /cluster/nextid exists, POST does not`, () => {
      assert.ok(matchMethod(p, 'GET', '/cluster/nextid'));
      assert.equal(matchMethod(p, 'POST', '/cluster/nextid'), undefined);
    });

    it(`${p}: filtered paths are absent`, () => {
      // GET /nodes/{node}/lxc is served (src/sim/schema/gen-extra.ts); creating a container is not.
      assert.ok(matchMethod(p, 'GET', '/nodes/pve/lxc'));
      assert.equal(matchMethod(p, 'POST', '/nodes/pve/lxc'), undefined);
      assert.equal(matchMethod(p, 'POST', '/nodes/pve/qemu/100/vncproxy'), undefined);
      assert.equal(matchMethod(p, 'GET', '/cluster/ha/resources'), undefined);
    });
  }

  it('ignores empty path fragments and percent-decodes like pve-http-server', () => {
    const m = matchMethod('8.4', 'GET', '//nodes/pve//qemu/100/config/');
    assert.equal(m?.template, '/nodes/{node}/qemu/{vmid}/config');
    const t = matchMethod('8.4', 'GET', '/access/users/root%40pam/token/ci');
    assert.deepEqual(t?.pathParams, { userid: 'root@pam', tokenid: 'ci' });
  });

  it('allowToken and protected come from the schema', () => {
    assert.equal(method('8.4', 'POST', '/access/ticket').allowToken, false);
    assert.equal(method('9.2', 'POST', '/access/ticket').allowToken, false);
    assert.equal(method('8.4', 'GET', '/version').allowToken, true);
    assert.equal(method('8.4', 'POST', '/nodes/pve/qemu/100/config').protected, true);
  });

  it('methodsOf lists every kept method', () => {
    for (const p of SCHEMA_PROFILES) {
      const ms = methodsOf(p);
      assert.ok(ms.length > 150, `${p}: ${ms.length}`);
      assert.ok(ms.every((m) => m.profile === p));
      assert.ok(ms.some((m) => m.path === '/storage' && m.method === 'GET'));
      assert.ok(ms.some((m) => m.path === '/pools' && m.method === 'POST'));
    }
  });
});

describe('validateParams: top level', () => {
  for (const p of SCHEMA_PROFILES) {
    it(`${p}: unknown parameter`, () => {
      const r = create(p, { bogus: '1' });
      assert.deepEqual(r.errors, { bogus: NOT_DEFINED });
    });

    it(`${p}: form booleans must be 0 or 1`, () => {
      assert.deepEqual(create(p, { start: 'true' }).errors, { start: "type check ('boolean') failed - got 'true'" });
      const ok = create(p, { start: '1' });
      assert.equal(ok.errors, undefined);
      assert.equal(ok.params.start, 1);
    });

    it(`${p}: missing required parameter`, () => {
      const r = validateParams(method(p, 'POST', '/nodes/pve/qemu'), { node: 'pve' });
      assert.deepEqual(r.errors, { vmid: 'property is missing and it is not optional' });
    });

    it(`${p}: integer type check and coercion`, () => {
      assert.deepEqual(create(p, { cores: 'abc' }).errors, { cores: "type check ('integer') failed - got 'abc'" });
      const ok = create(p, { cores: '4', memory: '2048', name: 'web-1' });
      assert.equal(ok.errors, undefined);
      assert.deepEqual(ok.params, {
        node: 'pve',
        vmid: 100,
        cores: 4,
        memory: p >= '8.4' ? '2048' : 2048,
        name: 'web-1',
      });
    });

    it(`${p}: vmid=99 fails the pve-vmid format before the minimum is checked`, () => {
      // check_prop() runs format, pattern, lengths, then ranges: pve-vmid (^[1-9][0-9]{2,8}$) fires first
      assert.deepEqual(create(p, { vmid: '99' }).errors, {
        vmid: 'invalid format - value does not look like a valid VM ID\n',
      });
    });

    it(`${p}: minimum / maximum`, () => {
      assert.deepEqual(create(p, { cores: '0' }).errors, { cores: 'value must have a minimum value of 1' });
      assert.deepEqual(create(p, { cpuunits: '262145' }).errors, {
        cpuunits: 'value must have a maximum value of 262144',
      });
      assert.equal(create(p, { cpuunits: '262144' }).errors, undefined);
    });

    it(`${p}: enum`, () => {
      const r = create(p, { scsihw: 'bogus' });
      assert.match(
        r.errors?.scsihw ?? '',
        /^value 'bogus' does not have a value in the enumeration 'lsi, lsi53c810, virtio-scsi-pci, virtio-scsi-single, megasas, pvscsi'$/,
      );
    });

    it(`${p}: maxLength`, () => {
      const r = configPost(p, { digest: 'a'.repeat(65) });
      assert.deepEqual(r.errors, { digest: 'value may only be 40 characters long' });
    });

    it(`${p}: urlencoded sshkeys`, () => {
      const key = 'ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAI test@example';
      assert.deepEqual(create(p, { sshkeys: key }).errors, {
        sshkeys: `invalid format - invalid urlencoded string: ${key}\n`,
      });
      const ok = create(p, { sshkeys: encodeURIComponent(`${key}\n`) });
      assert.equal(ok.errors, undefined);
      assert.equal(ok.params.sshkeys, encodeURIComponent(`${key}\n`));
    });

    it(`${p}: delete is a pve-configid-list`, () => {
      assert.equal(configPost(p, { delete: 'net1,ide2;tags description' }).errors, undefined);
      assert.deepEqual(configPost(p, { delete: 'net1,9bad' }).errors, {
        delete: "invalid format - invalid configuration ID '9bad'\n",
      });
    });

    it(`${p}: tags, name, startup`, () => {
      assert.equal(
        create(p, { tags: 'prod;web,db', name: 'a.example.com', startup: 'order=3,up=10' }).errors,
        undefined,
      );
      assert.deepEqual(create(p, { tags: 'ok;b@d' }).errors, { tags: 'invalid format - invalid characters in tag\n' });
      assert.deepEqual(create(p, { name: 'under_score' }).errors, {
        name: 'invalid format - value does not look like a valid DNS name\n',
      });
      assert.deepEqual(create(p, { startup: 'first' }).errors, {
        startup: 'invalid format - unable to parse startup options\n',
      });
    });

    it(`${p}: [n] families are bounded`, () => {
      assert.equal(
        create(p, { net31: 'virtio', scsi30: 'local-lvm:1', ide3: 'none', ipconfig31: 'ip=dhcp' }).errors,
        undefined,
      );
      assert.deepEqual(create(p, { net32: 'virtio', scsi31: 'local-lvm:1', 'net[n]': 'x', net01: 'virtio' }).errors, {
        net32: NOT_DEFINED,
        scsi31: NOT_DEFINED,
        'net[n]': NOT_DEFINED,
        net01: NOT_DEFINED,
      });
      assert.equal(paramSchema(method(p, 'POST', '/nodes/pve/qemu'), 'usb13') !== undefined, p !== '6.4');
      assert.ok(paramSchema(method(p, 'POST', '/nodes/pve/qemu'), 'usb4'));
    });

    it(`${p}: JSON bodies`, () => {
      const r = create(p, { vmid: 101, cores: 2, name: 'x', onboot: 1 });
      assert.equal(r.errors, undefined);
      assert.deepEqual(r.params, { node: 'pve', vmid: 101, cores: 2, name: 'x', onboot: 1 });
      assert.deepEqual(create(p, { cores: 1.5 }).errors, { cores: "type check ('integer') failed - got '1.5'" });
      assert.deepEqual(create(p, { name: ['a', 'b'] }).errors, { name: "type check ('string') failed - got ARRAY" });
      assert.deepEqual(create(p, { name: { a: 1 } }).errors, { name: "type check ('string') failed - got HASH" });
      assert.deepEqual(create(p, { cores: true }).errors, {
        cores: "type check ('integer') failed - got JSON::PP::Boolean",
      });
      assert.equal(create(p, { name: null }).errors, undefined);
    });
  }

  it('JSON true/false: rejected before pve-common 8 (fix #4778), accepted and coerced to 1/0 from 8.x', () => {
    for (const p of ['6.4', '7.4'] as const) {
      assert.deepEqual(create(p, { start: true }).errors, {
        start: "type check ('boolean') failed - got JSON::PP::Boolean",
      });
    }
    for (const p of ['8.4', '9.2'] as const) {
      const r = create(p, { start: true, onboot: false });
      assert.equal(r.errors, undefined);
      assert.equal(r.params.start, 1);
      assert.equal(r.params.onboot, 0);
    }
  });

  it('8.x+: an array for a -list string parameter is joined with commas', () => {
    assert.equal(configPost('8.4', { delete: ['net1', 'ide2'] }).params.delete, 'net1,ide2');
    assert.deepEqual(configPost('7.4', { delete: ['net1', 'ide2'] }).errors, {
      delete: "type check ('string') failed - got ARRAY",
    });
  });

  it('a method without declared properties checks nothing (GET /version?x=1)', () => {
    for (const p of SCHEMA_PROFILES) {
      const m = method(p, 'GET', '/version');
      assert.equal(m.noProperties, true);
      assert.deepEqual(validateParams(m, { x: '1' }), { params: { x: '1' } });
    }
  });

  it('requires: message changed in pve-common 9', () => {
    const m = (p: Profile) => method(p, 'PUT', '/nodes/pve/qemu/100/config');
    assert.deepEqual(validateParams(m('8.4'), { node: 'pve', vmid: '100', force: '1' }).errors, {
      delete: "missing property - 'force' requires this property",
    });
    assert.deepEqual(validateParams(m('9.2'), { node: 'pve', vmid: '100', force: '1' }).errors, {
      delete: "missing property required by 'force'",
    });
  });

  it('pool ids nest from 8.x; storage ids', () => {
    const pool = (p: Profile, poolid: string) => validateParams(method(p, 'POST', '/pools'), { poolid }).errors;
    assert.equal(pool('8.4', 'a/b'), undefined);
    assert.deepEqual(pool('7.4', 'a/b'), { poolid: "invalid format - pool name 'a/b' contains invalid characters\n" });
    assert.deepEqual(pool('9.2', 'a/b/c/d'), {
      poolid: "invalid format - pool name 'a/b/c/d' nested too deeply (max levels = 3)\n",
    });
    const st = (p: Profile, storage: string) =>
      validateParams(method(p, 'GET', '/nodes/pve/storage'), { node: 'pve', storage }).errors;
    assert.deepEqual(st('8.4', 'a'), { storage: "invalid format - storage ID 'a' contains illegal characters\n" });
    assert.deepEqual(st('9.2', 'a'), {
      storage: "invalid format - storage ID 'a' cannot be shorter than 2 characters\n",
    });
  });

  it('__proto__ is an ordinary (unknown) parameter', () => {
    const raw = JSON.parse('{"__proto__":"x","node":"pve","vmid":"100"}') as Record<string, unknown>;
    const r = validateParams(method('8.4', 'POST', '/nodes/pve/qemu'), raw);
    assert.equal(Object.getOwnPropertyDescriptor(r.errors ?? {}, '__proto__')?.value, NOT_DEFINED);
    assert.deepEqual(create('8.4', { net0: 'virtio,__proto__=1' }).errors, {
      net0: `invalid format - format error\nnet0.__proto__: ${NOT_DEFINED}\n`,
    });
  });

  it('network formats', () => {
    const net = (raw: Record<string, unknown>) =>
      validateParams(method('8.4', 'POST', '/nodes/pve/network'), {
        node: 'pve',
        iface: 'vmbr1',
        type: 'bridge',
        ...raw,
      }).errors;
    assert.equal(net({ cidr: '10.0.0.1/24', gateway: '10.0.0.254', cidr6: 'fd00::1/64' }), undefined);
    assert.deepEqual(net({ cidr: '10.0.0.1/5' }), {
      cidr: 'invalid format - value does not look like a valid IPv4 CIDR network\n',
    });
    assert.deepEqual(net({ gateway: '10.0.0.256' }), {
      gateway: 'invalid format - value does not look like a valid IPv4 address\n',
    });
    assert.deepEqual(net({ cidr6: 'fd00::g/64' }), {
      cidr6: 'invalid format - value does not look like a valid IPv6 CIDR network\n',
    });
    assert.deepEqual(create('8.4', { net0: 'virtio=01:00:00:00:00:01' }).errors, {
      net0: 'invalid format - format error\nnet0.macaddr: invalid format - value does not look like a valid unicast MAC address\n\n',
    });
    assert.deepEqual(create('8.4', { net0: 'virtio,bridge=vm br0' }).errors, {
      net0: "invalid format - format error\nnet0.bridge: invalid format - invalid bridge ID 'vm br0'\n\n",
    });
    // Perl's `$` also matches before a final newline
    assert.equal(create('8.4', { name: 'web\n' }).errors, undefined);
  });

  it('userid / tokenid / node formats on path parameters', () => {
    const tok = validateParams(method('8.4', 'POST', '/access/users/root@pam/token/ci'), {
      userid: 'root@pam',
      tokenid: 'ci',
    });
    assert.equal(tok.errors, undefined);
    const bad = validateParams(method('8.4', 'GET', '/access/users/x'), { userid: 'nobody' });
    assert.deepEqual(bad.errors, { userid: "invalid format - value 'nobody' does not look like a valid user name\n" });
    const node = validateParams(method('8.4', 'GET', '/nodes/pve/status'), { node: 'bad_node' });
    assert.deepEqual(node.errors, { node: 'invalid format - value does not look like a valid node name\n' });
  });
});

describe('validateParams: property strings', () => {
  for (const p of SCHEMA_PROFILES) {
    it(`${p}: net0`, () => {
      assert.equal(create(p, { net0: 'virtio,bridge=vmbr0,tag=5' }).errors, undefined);
      assert.equal(create(p, { net0: 'virtio=BC:24:11:00:00:01,bridge=vmbr0,firewall=1' }).errors, undefined);
      assert.deepEqual(create(p, { net0: 'virtio,bridge=vmbr0,bogus=1' }).errors, {
        net0: `invalid format - format error\nnet0.bogus: ${NOT_DEFINED}\n`,
      });
      assert.deepEqual(create(p, { net0: 'virtio,bridge=vmbr0,tag=5000' }).errors, {
        net0: 'invalid format - format error\nnet0.tag: value must have a maximum value of 4094\n',
      });
      assert.deepEqual(create(p, { net0: 'bridge=vmbr0' }).errors, {
        net0: 'invalid format - format error\nnet0.model: property is missing and it is not optional\n',
      });
      assert.deepEqual(create(p, { net0: 'virtio,e1000' }).errors, {
        net0: 'invalid format - duplicate key in comma-separated list property: model\n',
      });
      assert.deepEqual(create(p, { net0: 'virtio,bridge=' }).errors, {
        net0: 'invalid format - missing key in comma-separated list property\n',
      });
      assert.deepEqual(create(p, { net0: 'virtio,firewall=maybe' }).errors, {
        net0: "invalid format - format error\nnet0.firewall: type check ('boolean') failed - got 'maybe'\n",
      });
    });

    it(`${p}: disks`, () => {
      assert.equal(create(p, { scsi0: 'local-lvm:32' }).errors, undefined);
      assert.equal(
        create(p, { ide2: 'local-lvm:cloudinit,media=cdrom', virtio0: 'local:100/vm-100-disk-0.qcow2' }).errors,
        undefined,
      );
      assert.deepEqual(create(p, { scsi0: 'local-lvm:32,cache=fast' }).errors, {
        scsi0:
          "invalid format - format error\nscsi0.cache: value 'fast' does not have a value in the enumeration 'none, writethrough, writeback, unsafe, directsync'\n",
      });
      assert.deepEqual(create(p, { scsi0: 'nostorage' }).errors, {
        scsi0: "invalid format - format error\nscsi0.file: invalid format - unable to parse volume ID 'nostorage'\n\n",
      });
    });

    it(`${p}: import-from exists from 7.x`, () => {
      const fmt = paramSchema(method(p, 'POST', '/nodes/pve/qemu'), 'scsi0')?.format as PropertyStringFormat;
      assert.equal(typeof fmt, 'object');
      assert.equal('import-from' in fmt, p !== '6.4');
      const r = create(p, { scsi0: 'local-lvm:0,import-from=local:import/noble.qcow2' });
      if (p === '6.4') {
        assert.deepEqual(r.errors, { scsi0: `invalid format - format error\nscsi0.import-from: ${NOT_DEFINED}\n` });
      } else {
        assert.equal(r.errors, undefined);
      }
    });

    it(`${p}: ipconfig (named hash format)`, () => {
      assert.equal(
        create(p, { ipconfig0: 'ip=10.0.0.5/24,gw=10.0.0.1', ipconfig1: 'ip=dhcp,ip6=auto' }).errors,
        undefined,
      );
      assert.deepEqual(create(p, { ipconfig0: 'ip=10.0.0.5' }).errors, {
        ipconfig0:
          'invalid format - format error\nipconfig0.ip: invalid format - value does not look like a valid ipv4 network configuration\n\n',
      });
      const req =
        p === '9.2'
          ? "missing property required by 'ipconfig0.gw'"
          : "missing property - 'ipconfig0.gw' requires this property";
      assert.deepEqual(create(p, { ipconfig0: 'gw=10.0.0.1' }).errors, {
        ipconfig0: `invalid format - format error\nipconfig0.ip: ${req}\n`,
      });
    });

    it(`${p}: boot order and agent`, () => {
      assert.equal(create(p, { boot: 'order=scsi0;ide2;net0', agent: '1' }).errors, undefined);
      assert.equal(create(p, { agent: 'enabled=1,fstrim_cloned_disks=1' }).errors, undefined);
      assert.deepEqual(create(p, { boot: 'order=scsi0;efidisk0' }).errors, {
        boot: "invalid format - format error\nboot.order: invalid format - invalid boot device 'efidisk0'\n\n",
      });
    });
  }

  it('parsePropertyString resolves aliases and booleans', () => {
    const fmt = paramSchema(method('8.4', 'POST', '/nodes/pve/qemu'), 'net0')!.format as PropertyStringFormat;
    assert.deepEqual(parsePropertyString('8.4', fmt, 'virtio=BC:24:11:00:00:01,bridge=vmbr0,firewall=yes', 'net0'), {
      model: 'virtio',
      macaddr: 'BC:24:11:00:00:01',
      bridge: 'vmbr0',
      firewall: '1',
    });
    assert.deepEqual(parsePropertyString('8.4', 'pve-qm-ipconfig', 'ip=dhcp'), { ip: 'dhcp' });
    assert.throws(
      () => parsePropertyString('8.4', fmt, 'virtio,bogus=1', 'net0'),
      (e: unknown) => e instanceof PerlDie && e.text === `format error\nnet0.bogus: ${NOT_DEFINED}\n`,
    );
    // 9.x: a second value for an aliased key
    const scsi = paramSchema(method('9.2', 'POST', '/nodes/pve/qemu'), 'scsi0')!.format as PropertyStringFormat;
    assert.throws(
      () => parsePropertyString('9.2', scsi, 'file=local:1,volume=local:2', 'scsi0'),
      (e: unknown) => e instanceof PerlDie && e.text === "key 'file' is already defined (via alias)\n",
    );
  });
});
