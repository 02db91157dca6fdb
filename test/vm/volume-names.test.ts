/**
 * A disk's volume as its storage's listing names it (src/vm/spec.ts listedAs), which the look for
 * disks that are gone (disk-missing.ts) and for a stale size (disk-size.ts) compare with: lvm-thin
 * lists a linked clone's LV by its own name (pve-storage LvmThinPlugin.pm:170-181 at 0c56bad), a
 * directory storage and RBD by the whole path (Plugin.pm:1663-1668, RBDPlugin.pm:756-761). The
 * simulator lists the whole path for every type, so only this test holds the lvm-thin case.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { listedAs } from '../../src/vm/spec.ts';

describe('a volume as its storage lists it', () => {
  it("an lvm-thin linked clone's config volid and its listing's are one volume", () => {
    assert.equal(listedAs('local-lvm:base-9000-disk-0/vm-100-disk-0'), listedAs('local-lvm:vm-100-disk-0'));
  });
  it('a directory storage and RBD: the whole path listed, the same volume', () => {
    const dir = 'local:9000/base-9000-disk-0.qcow2/100/vm-100-disk-0.qcow2';
    assert.equal(listedAs(dir), listedAs(dir));
    assert.equal(listedAs('ceph:base-9000-disk-0/vm-100-disk-0'), listedAs('ceph:base-9000-disk-0/vm-100-disk-0'));
  });
  it('other disks, or the same name on another storage, are not the same volume', () => {
    assert.notEqual(listedAs('local-lvm:vm-100-disk-0'), listedAs('local-lvm:vm-100-disk-1'));
    assert.notEqual(listedAs('local-lvm:vm-100-disk-0'), listedAs('ceph:vm-100-disk-0'));
  });
});
