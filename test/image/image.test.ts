/**
 * ProxmoxImage against the simulator: download-url with the checksum onto every node (once on a
 * shared storage), adoption of a file that is already there, and every refusal: a checksum
 * mismatch (the task's error), a storage without the content type, a version without `import`
 * content, and a deletion while a template refers to the image.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { getCondition } from '../../src/engine/resource.ts';
import { planImages } from '../../src/image/plan.ts';
import { simConfig } from '../vm/harness.ts';
import { image, isReady, NODES, syncedReason, template, World } from './harness.ts';

const DOWNLOAD = 'POST /nodes/{node}/storage/{storage}/download-url';

describe('ProxmoxImage on PVE 9.2', () => {
  let w: World;
  before(async () => {
    w = await World.start();
  });
  after(() => w.stop());

  it('downloads the image to every online node with its checksum verified by Proxmox', async () => {
    const f = w.files.add('/jammy.img', Buffer.alloc(300_000, 7));
    const before = w.count(DOWNLOAD);
    const key = w.applyImage(
      image('ubuntu', { url: f.url, checksum: { algorithm: 'sha256', value: f.sha256 }, fileName: 'jammy.qcow2' }),
    );
    const r = await w.waitImage(key, isReady, 'the image Ready');
    const a = r.status!.atProvider!;
    assert.equal(a.volid, 'local:import/jammy.qcow2', 'import content: PVE 9.2 has it');
    assert.deepEqual(a.nodes, [...NODES]);
    assert.deepEqual(a.downloaded, [...NODES]);
    assert.equal(a.adopted, undefined);
    assert.equal(a.size, f.size);
    assert.equal(r.metadata.annotations?.['crossplane.io/external-name'], 'local:import/jammy.qcow2');
    assert.equal(w.count(DOWNLOAD) - before, 2, 'one download per node');
    for (const n of NODES)
      assert.ok(
        w.volumes(n, 'local').some((v) => v.volid === 'local:import/jammy.qcow2' && v.size === f.size),
        `the file is on ${n}`,
      );
  });

  it('plan says what apply would do: download, adopt, or the refusal, changing nothing', async () => {
    const before = w.count(DOWNLOAD);
    const plans = await planImages(
      [
        image('new', { url: 'http://127.0.0.1:1/new.img', fileName: 'new.qcow2' }),
        image('there', { url: 'http://127.0.0.1:1/existing.qcow2' }),
        image('lvm', { url: 'http://127.0.0.1:1/x.img', fileName: 'x.qcow2', storage: 'local-lvm' }),
      ],
      [template('tpl', { imageRef: { name: 'new' } })],
      simConfig(w.sim),
    );
    assert.deepEqual(
      plans.map((p) => [p.key, p.action, p.nodes.join(',')]),
      [
        ['default/new', 'download', 'pve1,pve2'],
        ['default/there', 'adopt', 'pve1,pve2'],
        ['default/lvm', 'refused', ''],
        ['default/tpl', 'build', 'pve1,pve2'],
      ],
    );
    assert.match(plans[2]!.message, /storage 'local-lvm' on node pve1 does not hold 'import' files/);
    assert.equal(w.count(DOWNLOAD), before);
  });

  it('adopts a file of that name that is already there, and says its checksum is not verified', async () => {
    const f = w.files.add('/existing.qcow2', Buffer.alloc(1000, 1));
    const before = w.count(DOWNLOAD);
    const key = w.applyImage(image('existing', { url: f.url, checksum: { algorithm: 'sha256', value: f.sha256 } }));
    const r = await w.waitImage(key, isReady, 'the image Ready');
    const a = r.status!.atProvider!;
    assert.equal(a.volid, 'local:import/existing.qcow2');
    assert.deepEqual(a.adopted, [...NODES]);
    assert.equal(w.count(DOWNLOAD) - before, 0, 'nothing downloaded');
    assert.match(getCondition(r, 'Ready')!.message!, /adopted the existing file .*checksum was not verified/);
  });

  it('refuses a checksum mismatch with the task error, and Proxmox keeps no file', async () => {
    const f = w.files.add('/bad.img', Buffer.alloc(5000, 3));
    const key = w.applyImage(
      image('bad', { url: f.url, checksum: { algorithm: 'sha512', value: 'ab'.repeat(64) }, fileName: 'bad.qcow2' }),
    );
    const r = await w.waitImage(key, (o) => syncedReason(o) === 'ChecksumMismatch', 'ChecksumMismatch');
    const msg = getCondition(r, 'Synced')!.message!;
    assert.match(msg, /checksum mismatch: got '[0-9a-f]{128}' != expect '(ab){64}'/);
    assert.match(msg, /Fix spec\.forProvider\.checksum/);
    for (const n of NODES) assert.ok(!w.volumes(n, 'local').some((v) => v.volid === 'local:import/bad.qcow2'));
    await w.waitFor(
      () => w.image(key),
      () => w.rt.stateOfImage('ProxmoxImage', key) === 'failed',
      'apply stops waiting for it',
    );
  });

  it('refuses a storage without the content type before downloading anything', async () => {
    const f = w.files.add('/x.img', Buffer.alloc(100, 1));
    const before = w.count(DOWNLOAD);
    const key = w.applyImage(
      image('wrong-storage', {
        url: f.url,
        checksum: { algorithm: 'sha256', value: f.sha256 },
        storage: 'local-lvm',
        fileName: 'x.qcow2',
      }),
    );
    const r = await w.waitImage(key, (o) => syncedReason(o) === 'StorageContentMissing', 'StorageContentMissing');
    assert.match(
      getCondition(r, 'Synced')!.message!,
      /storage 'local-lvm' on node pve1 .*does not hold 'import' files/,
    );
    assert.equal(w.count(DOWNLOAD), before);
  });

  it('refuses a file name the content type does not allow, naming the field', async () => {
    const f = w.files.add('/noble.img', Buffer.alloc(100, 1));
    const key = w.applyImage(
      image('bad-name', { url: f.url, checksum: { algorithm: 'sha256', value: f.sha256 }, content: 'import' }),
    );
    const r = await w.waitImage(key, (o) => syncedReason(o) === 'InvalidSpec', 'InvalidSpec');
    assert.match(
      getCondition(r, 'Synced')!.message!,
      /spec\.forProvider\.url: file name 'noble\.img' is not allowed for import content/,
    );
  });

  it('downloads once onto a shared storage', async () => {
    const f = w.files.add('/shared.img', Buffer.alloc(2000, 9));
    const before = w.count(DOWNLOAD);
    const key = w.applyImage(
      image('shared', {
        url: f.url,
        checksum: { algorithm: 'sha256', value: f.sha256 },
        storage: 'shared-nfs',
        fileName: 'shared.qcow2',
      }),
    );
    const r = await w.waitImage(key, isReady, 'the image Ready');
    assert.equal(w.count(DOWNLOAD) - before, 1);
    assert.deepEqual(r.status!.atProvider!.nodes, [...NODES]);
    assert.equal(r.status!.atProvider!.shared, true);
    assert.equal(r.status!.atProvider!.adopted, undefined);
  });

  it('is deleted only once no template refers to it, and then removed from every node', async () => {
    const f = w.files.add('/del.img', Buffer.alloc(800, 5));
    const key = w.applyImage(
      image('del', { url: f.url, checksum: { algorithm: 'sha256', value: f.sha256 }, fileName: 'del.qcow2' }),
    );
    await w.waitImage(key, isReady, 'the image Ready');
    // A template that refers to it but cannot be built (its storage is missing): it holds the image.
    const tkey = w.applyTemplate(template('holder', { imageRef: { name: 'del' }, storage: 'nope' }));
    w.rt.images.markDeleted(key);
    const r = await w.waitImage(key, (o) => syncedReason(o) === 'ImageInUse', 'ImageInUse');
    assert.match(getCondition(r, 'Synced')!.message!, /ProxmoxTemplate default\/holder still refer to this image/);
    for (const n of NODES) assert.ok(w.volumes(n, 'local').some((v) => v.volid === 'local:import/del.qcow2'));
    w.rt.templates.markDeleted(tkey);
    await w.waitFor(
      () => w.image(key) ?? ({} as never),
      (o) => !o.metadata,
      'the image gone',
    );
    for (const n of NODES) assert.ok(!w.volumes(n, 'local').some((v) => v.volid === 'local:import/del.qcow2'));
  });
});

describe('ProxmoxImage on PVE 7.4 (no import content)', () => {
  let w: World;
  before(async () => {
    w = await World.start({ profile: '7.4' });
  });
  after(() => w.stop());

  it('refuses content import: the version has no import content type', async () => {
    const f = w.files.add('/a.img', Buffer.alloc(100, 1));
    const before = w.count(DOWNLOAD);
    const key = w.applyImage(
      image('imp', {
        url: f.url,
        checksum: { algorithm: 'sha256', value: f.sha256 },
        content: 'import',
        fileName: 'a.qcow2',
      }),
    );
    const r = await w.waitImage(key, (o) => syncedReason(o) === 'ImportContentUnsupported', 'ImportContentUnsupported');
    assert.match(getCondition(r, 'Synced')!.message!, /PVE 7\.4-\d+ .* has no 'import' content type \(added in 8\.3\)/);
    assert.equal(w.count(DOWNLOAD), before);
  });

  it('defaults to iso content there', async () => {
    const f = w.files.add('/jammy.img', Buffer.alloc(100, 2));
    const key = w.applyImage(image('iso', { url: f.url, checksum: { algorithm: 'sha256', value: f.sha256 } }));
    const r = await w.waitImage(key, isReady, 'the image Ready');
    assert.equal(r.status!.atProvider!.volid, 'local:iso/jammy.img');
  });
});
