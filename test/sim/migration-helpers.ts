/**
 * Helpers of the migration tests (migrate, move_disk, remote_migrate): POST a form, run a task to
 * its end and read its log, wait (by polling, never by sleeping) until a task's log shows a line,
 * and read what a client observes of a VM (its `/cluster/resources` row, a storage's volumes);
 * the topologies' common lines (a cluster's and a node's head) and a simulator started from one.
 */
import assert from 'node:assert/strict';
import type { Profile, SimCluster, Simulator } from '../../src/sim/index.ts';
import { parseTopology } from '../../src/sim/topology.ts';
import { type RawResponse, raw, startTestSim, waitTask } from '../helpers/sim.ts';

/** A topology's cluster entry up to its `nodes:` (port 0: any free one; 1: the next cluster's). */
export function clusterHead(name: string, port: 0 | 1): string {
  return `  - name: ${name}\n    listen: 127.0.0.1:${port}\n    nodes:\n`;
}

/** A node entry with the tests' usual size, up to its `storages:` list. */
export function nodeHead(name: string): string {
  return `      - name: ${name}\n        cpus: 8\n        memory: 64G\n        storages:\n`;
}

/** A simulator of `topology` (YAML, named `file` in errors) under `profile`, and its `site-1`. */
export async function startSim(
  profile: Profile,
  topology: string,
  file: string,
): Promise<{ sim: Simulator; sc: SimCluster; url: string }> {
  const sim = await startTestSim({ profile, topology: parseTopology(topology, file) });
  const sc = sim.cluster('site-1');
  return { sim, sc, url: sc.url };
}

export function data<T = unknown>(r: RawResponse): T {
  return (r.json as { data: T }).data;
}

export function post(url: string, path: string, form: Record<string, string>): Promise<RawResponse> {
  return raw(url, 'POST', path, { form });
}

/** POST that must answer a UPID. */
export async function start(url: string, path: string, form: Record<string, string>): Promise<string> {
  const r = await post(url, path, form);
  assert.equal(r.status, 200, `${path}: ${r.status} ${r.reason} ${r.text}`);
  const upid = data<string>(r);
  assert.match(upid, /^UPID:/);
  return upid;
}

export async function taskLog(url: string, node: string, upid: string): Promise<string[]> {
  const r = await raw(url, 'GET', `/nodes/${node}/tasks/${encodeURIComponent(upid)}/log?limit=0`);
  assert.equal(r.status, 200, r.reason);
  return data<Array<{ t: string }>>(r).map((l) => l.t);
}

/** Wait for a task; its exit status and log lines. */
export async function finish(url: string, node: string, upid: string): Promise<{ exit: string; log: string[] }> {
  const st = await waitTask(url, node, upid);
  return { exit: String(st.exitstatus), log: await taskLog(url, node, upid) };
}

/** Poll until a line of the task's log matches (the task runs at the test speed factor). */
export async function logUntil(url: string, node: string, upid: string, re: RegExp): Promise<string[]> {
  for (let i = 0; i < 5000; i++) {
    const log = await taskLog(url, node, upid);
    if (log.some((l) => re.test(l))) return log;
    await new Promise((resolve) => setImmediate(resolve));
  }
  throw new Error(`task ${upid}: no log line ${re}`);
}

/** Poll until `cond` holds (in-process state a task changes). */
export async function until(cond: () => boolean, what: string): Promise<void> {
  for (let i = 0; i < 20000; i++) {
    if (cond()) return;
    await new Promise((resolve) => setImmediate(resolve));
  }
  throw new Error(`timed out waiting for ${what}`);
}

/** The log without the `YYYY-MM-DD HH:MM:SS ` prefixes. */
export function bare(log: string[]): string[] {
  return log.map((l) => l.replace(/^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d /, ''));
}

export async function vmRow(url: string, vmid: number): Promise<Record<string, unknown> | undefined> {
  const r = await raw(url, 'GET', '/cluster/resources?type=vm');
  return data<Array<Record<string, unknown>>>(r).find((v) => v.vmid === vmid);
}

export async function volumes(url: string, node: string, storage: string): Promise<string[]> {
  const r = await raw(url, 'GET', `/nodes/${node}/storage/${storage}/content`);
  assert.equal(r.status, 200, `${node}/${storage}: ${r.reason}`);
  return data<Array<{ volid: string }>>(r)
    .map((v) => v.volid)
    .sort();
}

export async function storageUsed(url: string, node: string, storage: string): Promise<number> {
  const r = await raw(url, 'GET', `/nodes/${node}/storage/${storage}/status`);
  return data<{ used: number }>(r).used;
}

export async function config(url: string, node: string, vmid: number): Promise<Record<string, string>> {
  const r = await raw(url, 'GET', `/nodes/${node}/qemu/${vmid}/config`);
  assert.equal(r.status, 200, `config ${vmid} on ${node}: ${r.status} ${r.reason}`);
  return data<Record<string, string>>(r);
}

export const GiB = 1024 ** 3;
export const MiB = 1024 ** 2;
