/**
 * Shared by controller-fleet.kube.ts and controller-lifecycle.kube.ts, which run the controller
 * in-process against a real kube-apiserver + etcd and the in-process simulator: the same simulator
 * and controller options in both (so each file's own cluster behaves as the one they shared), a
 * small ProxmoxVM, and what is kept of the controller's log.
 */
import { writeFileSync } from 'node:fs';
import { join, parse } from 'node:path';
import type { KubeApi } from '../../src/kube/api.ts';
import type { ControllerOptions } from '../../src/kube/controller.ts';
import { type Simulator, startSimulator } from '../../src/sim/index.ts';
import { API, type Obj, SYSTEM_NS } from './support.ts';

export const NS = 'tests';
export const IMAGE = 'local:import/ubuntu-22.04-cloud.qcow2';

/** A small ProxmoxVM on site-1 (1 vCPU, 512 MiB, 4 GiB). */
export function smallVm(
  name: string,
  extra: { spec?: Record<string, unknown>; metadata?: Record<string, unknown> } = {},
): Obj {
  const { forProvider, ...specRest } = (extra.spec ?? {}) as { forProvider?: Record<string, unknown> };
  return {
    apiVersion: API,
    kind: 'ProxmoxVM',
    metadata: { name, namespace: NS, ...extra.metadata },
    spec: {
      forProvider: {
        site: 'site-1',
        node: 'ml110-01',
        cpu: 1,
        memory: '512Mi',
        disk: '4Gi',
        storage: 'local-lvm',
        network: 'vmbr0',
        image: IMAGE,
        ...forProvider,
      },
      providerConfigRef: { name: 'default' },
      ...specRest,
    },
  };
}

export function startControllerSim(): Promise<Simulator> {
  return startSimulator({
    ephemeralPorts: true,
    speed: 1000,
    authFailDelayMs: 0,
    tokens: ['root@pam!kube=5e1f0c7a-0000-4000-8000-00000000c0de'],
    seed: 7,
  });
}

/** Leader election with short leases, as deployed; the orphan scan only when a test runs it. */
export function controllerOptions(o: {
  api: KubeApi;
  healthPort: number;
  metricsPort: number;
  /** Receives the log, info and up. */
  logs: string[];
}): ControllerOptions {
  return {
    api: o.api,
    namespace: SYSTEM_NS,
    identity: 'in-process',
    leaderElection: true,
    leaseDurationMs: 4000,
    renewDeadlineMs: 3000,
    retryPeriodMs: 1000,
    taskPollMs: 50,
    orphanScanMs: 0,
    workers: 8,
    backoff: { baseMs: 100, capMs: 5000 },
    createFailureScheduleMs: [1000, 2000, 5000],
    healthPort: o.healthPort,
    metricsPort: o.metricsPort,
    healthHost: '127.0.0.1',
    log: (level, msg, fields) => {
      if (level !== 'debug') o.logs.push(`${level} ${msg} ${JSON.stringify(fields ?? {})}`);
    },
  };
}

/**
 * For the after hook: KUBE_TEST_LOG=file keeps the controller's log (info and up) for a closer look,
 * one file per test file (`file` with `-<topic>` before its extension: the files run one after the
 * other and would overwrite each other's); its last errors are printed.
 */
export function keepLog(logs: string[], topic: string): void {
  const file = process.env.KUBE_TEST_LOG;
  if (file) {
    const { dir, name, ext } = parse(file);
    writeFileSync(join(dir, `${name}-${topic}${ext}`), logs.join('\n'));
  }
  const problems = logs.filter((l) => l.startsWith('error'));
  if (problems.length) console.log(`controller errors:\n${problems.slice(-30).join('\n')}`);
}
