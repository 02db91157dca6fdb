/**
 * PVE API fidelity checks 9-12 and 29 (../shared/research/pve-api-fidelity.md, section 7):
 * parameter validation, the version-dependent `message` field, 501 for methods PVE does not
 * have, nextid, and the error response framing (Connection: close, reason = first line).
 */
import assert from 'node:assert/strict';
import { Agent, request } from 'node:http';
import { after, before, describe, it } from 'node:test';
import type { Simulator } from '../../src/sim/index.ts';
import { ALL_PROFILES, assertError, createVm, data, JSON_CT, NODE } from '../helpers/fidelity.ts';
import { type RawResponse, raw, startTestSim, TOKEN } from '../helpers/sim.ts';

const hasMessage = (profile: string) => profile === '8.4' || profile === '9.2';
const jsonBool = hasMessage;

function errors(r: RawResponse): Record<string, string> {
  return (r.json as { errors: Record<string, string> }).errors;
}

/** node:http with a keep-alive client, to read the Connection header the server chose. */
const keepAlive = new Agent({ keepAlive: true });
function rawHttp(
  url: string,
  method: string,
  path: string,
): Promise<{ status: number; reason: string; headers: Record<string, unknown> }> {
  return new Promise((resolve, reject) => {
    const req = request(
      `${url}/api2/json${path}`,
      { method, headers: { Authorization: `PVEAPIToken=${TOKEN}` }, agent: keepAlive },
      (res) => {
        res.resume();
        res.on('end', () =>
          resolve({ status: res.statusCode ?? 0, reason: res.statusMessage ?? '', headers: res.headers }),
        );
      },
    );
    req.on('error', reject);
    req.end();
  });
}

after(() => keepAlive.destroy());

for (const profile of ALL_PROFILES) {
  describe(`fidelity checks 9-12, 29, profile ${profile}`, () => {
    let sim: Simulator;
    let url: string;
    before(async () => {
      sim = await startTestSim({ profile });
      url = sim.cluster('site-1').url;
    });
    after(() => sim.close());

    it('#9 an unknown parameter is rejected (additionalProperties 0)', async () => {
      const r = await raw(url, 'POST', `/nodes/${NODE}/qemu`, { form: { vmid: '150', bogus: '1' } });
      assertError(r, 400, 'Parameter verification failed.');
      assert.equal(r.headers.get('content-type'), JSON_CT);
      assert.deepEqual(errors(r), {
        bogus: 'property is not defined in schema and the schema does not allow additional properties',
      });
      assert.equal((r.json as { data: unknown }).data, null);
    });

    it(`#9 form start=true: type check ('boolean') failed; JSON false is ${jsonBool(profile) ? 'accepted' : 'rejected'}`, async () => {
      const r = await raw(url, 'POST', `/nodes/${NODE}/qemu`, { form: { vmid: '150', start: 'true' } });
      assertError(r, 400, 'Parameter verification failed.');
      assert.equal(errors(r).start, "type check ('boolean') failed - got 'true'");
      // JSON booleans pass check_type from pve-common 8.0.4 (fix #4778); before, they are refs.
      const j = await raw(url, 'POST', `/nodes/${NODE}/qemu`, { json: { vmid: 150, start: false } });
      if (jsonBool(profile)) {
        assert.equal(j.status, 200, `${j.reason} ${j.text}`);
        assert.match(data<string>(j), /:qmcreate:150:/);
      } else {
        assertError(j, 400, 'Parameter verification failed.');
        assert.equal(errors(j).start, "type check ('boolean') failed - got JSON::PP::Boolean");
      }
      // JSON 0/1 (and form 0/1) are booleans everywhere.
      const n = await raw(url, 'POST', `/nodes/${NODE}/qemu`, { json: { vmid: 151, start: 0 } });
      assert.equal(n.status, 200, `${n.reason} ${n.text}`);
    });

    it('#9 vmid=99 and other range violations', async () => {
      // pve-vmid is `integer, format pve-vmid, minimum 100`, and JSONSchema::check_prop checks the
      // format (^[1-9][0-9]{2,8}$) before the minimum: 99 fails as a format error.
      const r = await raw(url, 'POST', `/nodes/${NODE}/qemu`, { form: { vmid: '99' } });
      assertError(r, 400, 'Parameter verification failed.');
      assert.equal(errors(r).vmid, 'invalid format - value does not look like a valid VM ID\n');
      const cores = await raw(url, 'POST', `/nodes/${NODE}/qemu`, { form: { vmid: '152', cores: '0' } });
      assertError(cores, 400, 'Parameter verification failed.');
      assert.equal(errors(cores).cores, 'value must have a minimum value of 1');
      const typ = await raw(url, 'POST', `/nodes/${NODE}/qemu`, { form: { vmid: 'abc' } });
      assert.equal(errors(typ).vmid, "type check ('integer') failed - got 'abc'");
      const missing = await raw(url, 'POST', `/nodes/${NODE}/qemu`, { form: { name: 'x' } });
      assertError(missing, 400, 'Parameter verification failed.');
      assert.equal(errors(missing).vmid, 'property is missing and it is not optional');
    });

    it(`#10 error bodies ${hasMessage(profile) ? 'carry' : 'do not carry'} "message"`, async () => {
      const e500 = await raw(url, 'GET', `/nodes/${NODE}/qemu/4242/config`);
      assertError(e500, 500, `Configuration file 'nodes/${NODE}/qemu-server/4242.conf' does not exist`);
      const e400 = await raw(url, 'POST', `/nodes/${NODE}/qemu`, { form: { vmid: '99' } });
      const e501 = await raw(url, 'POST', `/nodes/${NODE}/qemu/4242/importdisk`, { form: { source: 'x' } });
      if (hasMessage(profile)) {
        assert.deepEqual(e500.json, {
          data: null,
          message: `Configuration file 'nodes/${NODE}/qemu-server/4242.conf' does not exist\n`,
        });
        assert.equal((e400.json as { message: string }).message, 'Parameter verification failed.\n');
        // rest_handler's own 501 text is not a die: no trailing newline.
        assert.equal(
          (e501.json as { message: string }).message,
          `Method 'POST /nodes/${NODE}/qemu/4242/importdisk' not implemented`,
        );
      } else {
        assert.deepEqual(e500.json, { data: null });
        assert.deepEqual(Object.keys(e400.json as object).sort(), ['data', 'errors']);
        assert.deepEqual(e501.json, { data: null });
      }
    });

    it('#11 POST .../importdisk is 501 not implemented', async () => {
      const r = await raw(url, 'POST', `/nodes/${NODE}/qemu/100/importdisk`, {
        form: { source: 'local:iso/ubuntu-22.04-cloud.img', storage: 'local-lvm' },
      });
      assertError(r, 501, `Method 'POST /nodes/${NODE}/qemu/100/importdisk' not implemented`);
      assert.equal((r.json as { data: unknown }).data, null);
      assert.equal(r.headers.get('content-type'), JSON_CT);
    });

    it('#12 nextid is a JSON string; a taken ?vmid= is 400 with errors.vmid', async () => {
      const r = await raw(url, 'GET', '/cluster/nextid');
      assert.equal(r.status, 200);
      assert.equal(r.text.includes('"data":"'), true, r.text);
      // 150/151 may have been created above; the first free id is 100 either way.
      assert.equal(data(r), '100');
      const taken = await raw(url, 'GET', '/cluster/nextid?vmid=9000');
      assertError(taken, 400, 'Parameter verification failed.');
      assert.deepEqual(taken.json, {
        errors: { vmid: 'VM 9000 already exists' },
        data: null,
        ...(hasMessage(profile) ? { message: 'Parameter verification failed.\n' } : {}),
      });
      const free = await raw(url, 'GET', '/cluster/nextid?vmid=4321');
      assert.equal(data(free), '4321');
      // The create lock makes the id taken at once.
      await createVm(url, { vmid: '100' });
      assert.equal(data(await raw(url, 'GET', '/cluster/nextid')), '101');
    });

    it('#29 errors carry Connection: close; the reason phrase is the first line', async () => {
      for (const [method, path, status] of [
        ['GET', `/nodes/${NODE}/qemu/4242/config`, 500],
        ['GET', '/cluster/nextid?vmid=9000', 400],
        ['POST', `/nodes/${NODE}/qemu/4242/importdisk`, 501],
      ] as const) {
        const r = await rawHttp(url, method, path);
        assert.equal(r.status, status);
        assert.equal(r.headers.connection, 'close', `${method} ${path}`);
      }
      const ok = await rawHttp(url, 'GET', '/version');
      assert.notEqual(ok.headers.connection, 'close');
      const noAuth = await new Promise<{ status: number; connection: unknown }>((resolve, reject) => {
        const req = request(`${url}/api2/json/version`, { agent: keepAlive }, (res) => {
          res.resume();
          res.on('end', () => resolve({ status: res.statusCode ?? 0, connection: res.headers.connection }));
        });
        req.on('error', reject);
        req.end();
      });
      assert.deepEqual(noAuth, { status: 401, connection: 'close' });

      const c = sim.cluster('site-1');
      const id = c.addFault({
        kind: 'request',
        method: 'GET',
        path: `/nodes/${NODE}/qemu/9000/status/current`,
        status: 500,
        message: 'first line of the error\nsecond line\n',
      });
      try {
        const r = await raw(url, 'GET', `/nodes/${NODE}/qemu/9000/status/current`);
        assertError(r, 500, 'first line of the error');
        if (hasMessage(profile))
          assert.equal((r.json as { message: string }).message, 'first line of the error\nsecond line\n');
      } finally {
        c.faults.remove(id);
      }
      // A real handler error: the reason phrase is the message itself.
      const dup = await raw(url, 'POST', `/nodes/${NODE}/qemu`, { form: { vmid: '9000' } });
      assertError(dup, 500, `unable to create VM 9000 - VM 9000 already exists on node '${NODE}'`);
    });
  });
}
