/**
 * Shared by the faults-*.test.ts files (the simulator's fault injection, observed from a client):
 * a simulator with two stopped VMs to aim faults at, the `/_sim/` control API, and the few Proxmox
 * calls the tests make.
 */
import assert from 'node:assert/strict';
import type { SimCluster, Simulator } from '../../src/sim/index.ts';
import { type RawResponse, raw, startTestSim, TOKEN, waitTask } from '../helpers/sim.ts';

export const NODE = 'ml110-01';
export const TOKEN_AUTH = `PVEAPIToken=${TOKEN}`;

export interface SimApiResponse {
  status: number;
  reason: string;
  /** `{ data: null }` when the body is empty (401). */
  json: { data: unknown; message?: string; errors?: Record<string, string> };
}

/** A call to the `/_sim/` control API (JSON in, JSON out). */
export async function simApi(
  cluster: SimCluster,
  method: string,
  path: string,
  body?: unknown,
  headers: Record<string, string> = { Authorization: TOKEN_AUTH },
): Promise<SimApiResponse> {
  const res = await fetch(`${cluster.url}${path}`, {
    method,
    headers: { ...headers, ...(body !== undefined ? { 'Content-Type': 'application/json' } : {}) },
    ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
  });
  const text = await res.text();
  return { status: res.status, reason: res.statusText, json: text ? JSON.parse(text) : { data: null } };
}

export function data<T>(r: RawResponse): T {
  return (r.json as { data: T }).data;
}

export async function createVm(
  url: string,
  vmid: number,
  extra: Record<string, string> = {},
  node = NODE,
): Promise<string> {
  const r = await raw(url, 'POST', `/nodes/${node}/qemu`, {
    form: {
      vmid: String(vmid),
      name: `f-${vmid}`,
      memory: '512',
      scsi0: 'local-lvm:1',
      net0: 'virtio,bridge=vmbr0',
      agent: '1',
      ...extra,
    },
  });
  assert.equal(r.status, 200, `${r.status} ${r.reason}`);
  return data<string>(r);
}

export async function createVmOk(url: string, vmid: number): Promise<void> {
  assert.equal((await waitTask(url, NODE, await createVm(url, vmid))).exitstatus, 'OK');
}

export async function taskStatus(
  url: string,
  upid: string,
  node = NODE,
): Promise<{ status: string; exitstatus?: string }> {
  return data(await raw(url, 'GET', `/nodes/${node}/tasks/${encodeURIComponent(upid)}/status`));
}

export async function taskLog(url: string, upid: string, node = NODE): Promise<string[]> {
  const r = await raw(url, 'GET', `/nodes/${node}/tasks/${encodeURIComponent(upid)}/log?limit=500`);
  return data<Array<{ t: string }>>(r).map((l) => l.t);
}

export async function power(url: string, vmid: number, action: 'start' | 'stop'): Promise<string> {
  const r = await raw(url, 'POST', `/nodes/${NODE}/qemu/${vmid}/status/${action}`);
  assert.equal(r.status, 200, `${r.status} ${r.reason}`);
  return data<string>(r);
}

/**
 * A simulator and its site-1 with VMs 150 and 151 (stopped). One per file, shared by its tests: each
 * test clears the faults and counters first, and creates any other VM it needs at its own VMID.
 */
export async function startFaultSim(): Promise<{ sim: Simulator; c: SimCluster; url: string }> {
  const sim = await startTestSim();
  const c = sim.cluster('site-1');
  const url = c.url;
  await createVmOk(url, 150);
  await createVmOk(url, 151);
  return { sim, c, url };
}
