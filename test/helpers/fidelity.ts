/**
 * Helpers for the PVE API fidelity checks (test/sim/fidelity-*.test.ts): ticket login, ticket
 * headers, create-and-wait, task log and status readers. Everything goes over HTTP through `raw`.
 */
import assert from 'node:assert/strict';
import type { Profile } from '../../src/sim/index.ts';
import { type RawResponse, ROOT_PASSWORD, raw, waitTask } from './sim.ts';

export const NODE = 'ml110-01';
export const ALL_PROFILES: Profile[] = ['6.4', '7.4', '8.4', '9.2'];
export const JSON_CT = 'application/json;charset=UTF-8';

export function data<T = unknown>(r: RawResponse): T {
  return (r.json as { data: T }).data;
}

export interface Ticket {
  ticket: string;
  csrf: string;
}

export async function login(url: string, password = ROOT_PASSWORD, username = 'root@pam'): Promise<Ticket> {
  const r = await raw(url, 'POST', '/access/ticket', {
    form: { username, password },
    headers: { Authorization: null },
  });
  assert.equal(r.status, 200, `login failed: ${r.status} ${r.reason}`);
  const d = data<{ ticket: string; CSRFPreventionToken: string }>(r);
  return { ticket: d.ticket, csrf: d.CSRFPreventionToken };
}

/** Headers for ticket auth (cookie), with the CSRF header unless `csrf` is false. */
export function ticketHeaders(t: Ticket, csrf = true): Record<string, string | null> {
  return {
    Authorization: null,
    Cookie: `PVEAuthCookie=${encodeURIComponent(t.ticket)}`,
    ...(csrf ? { CSRFPreventionToken: t.csrf } : {}),
  };
}

/** POST /nodes/{node}/qemu; asserts 200 and returns the UPID. */
export async function createVm(url: string, form: Record<string, string>, headers?: Record<string, string | null>) {
  const r = await raw(url, 'POST', `/nodes/${NODE}/qemu`, { form, ...(headers ? { headers } : {}) });
  assert.equal(r.status, 200, `create ${form.vmid}: ${r.status} ${r.reason} ${r.text}`);
  return data<string>(r);
}

/** Create and wait for the qmcreate task; asserts it ended OK. */
export async function createVmAndWait(url: string, form: Record<string, string>): Promise<void> {
  const upid = await createVm(url, form);
  const st = await waitTask(url, NODE, upid);
  assert.equal(st.exitstatus, 'OK', `create ${form.vmid}`);
}

export async function taskStatus(url: string, upid: string): Promise<Record<string, unknown>> {
  const r = await raw(url, 'GET', `/nodes/${NODE}/tasks/${encodeURIComponent(upid)}/status`);
  assert.equal(r.status, 200, r.reason);
  return data<Record<string, unknown>>(r);
}

export async function taskLog(url: string, upid: string, query = ''): Promise<RawResponse> {
  return raw(url, 'GET', `/nodes/${NODE}/tasks/${encodeURIComponent(upid)}/log${query}`);
}

export async function taskLines(url: string, upid: string): Promise<string[]> {
  const r = await taskLog(url, upid, '?limit=0');
  return data<Array<{ n: number; t: string }>>(r).map((l) => l.t);
}

/** Wait for a task and return its exit status. */
export async function finish(url: string, upid: string): Promise<string | undefined> {
  return (await waitTask(url, NODE, upid)).exitstatus;
}

export async function vmConfig(url: string, vmid: number): Promise<Record<string, unknown>> {
  const r = await raw(url, 'GET', `/nodes/${NODE}/qemu/${vmid}/config`);
  assert.equal(r.status, 200, `config ${vmid}: ${r.status} ${r.reason}`);
  return data<Record<string, unknown>>(r);
}

/** POST a power action and wait for its task; returns the exit status. */
export async function power(url: string, vmid: number, action: 'start' | 'stop' | 'shutdown' | 'reboot') {
  const r = await raw(url, 'POST', `/nodes/${NODE}/qemu/${vmid}/status/${action}`);
  assert.equal(r.status, 200, `${action} ${vmid}: ${r.status} ${r.reason}`);
  return finish(url, data<string>(r));
}

/** An error answer: status, reason phrase, and (for JSON bodies) `errors`. */
export function assertError(r: RawResponse, status: number, reason: string | RegExp): void {
  assert.equal(r.status, status, `expected ${status}, got ${r.status} ${r.reason} ${r.text}`);
  if (typeof reason === 'string') assert.equal(r.reason, reason);
  else assert.match(r.reason, reason);
}
