/**
 * The real command-line tools of the Kubernetes suite (kubectl, helm, promtool, built from Go
 * modules by harness/build.sh and cached), run as a platform engineer runs them: a child process
 * with a kubeconfig, its exit code, stdout and stderr. A tool that cannot be built makes the test
 * fail with build.sh's message.
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import type { Kube, Tool } from './harness.ts';
import { toolBinary } from './harness.ts';

export interface RunResult {
  code: number;
  stdout: string;
  stderr: string;
}

export interface RunOptions {
  kube?: Kube;
  /** Text on standard input. */
  input?: string;
  cwd?: string;
  timeoutMs?: number;
  env?: Record<string, string>;
}

/** Run a tool; never throws on a non-zero exit (see `ok`). */
export async function run(tool: Tool, args: string[], opts: RunOptions = {}): Promise<RunResult> {
  const bin = await toolBinary(tool);
  return new Promise((resolve, reject) => {
    const child = execFile(
      bin,
      args,
      {
        cwd: opts.cwd,
        timeout: opts.timeoutMs ?? 120_000,
        maxBuffer: 64 * 1024 * 1024,
        env: {
          PATH: process.env['PATH'] ?? '/usr/bin:/bin',
          HOME: process.env['HOME'] ?? '/tmp',
          ...(opts.kube ? { KUBECONFIG: opts.kube.kubeconfigPath } : {}),
          // Helm keeps its caches and repositories config here; nothing from the user's own.
          ...(tool === 'helm' && opts.kube
            ? {
                HELM_CACHE_HOME: `${opts.kube.dataDir}/helm/cache`,
                HELM_CONFIG_HOME: `${opts.kube.dataDir}/helm/config`,
                HELM_DATA_HOME: `${opts.kube.dataDir}/helm/data`,
              }
            : {}),
          ...opts.env,
        },
      },
      (err, stdout, stderr) => {
        if (err && typeof (err as { code?: unknown }).code !== 'number') {
          reject(new Error(`${tool} ${args.join(' ')}: ${err.message}\n${stderr}`));
          return;
        }
        resolve({ code: err ? Number((err as { code: number }).code) : 0, stdout, stderr });
      },
    );
    if (opts.input !== undefined) child.stdin!.end(opts.input);
    else child.stdin?.end();
  });
}

/** Run a tool that must exit 0; returns stdout. */
export async function ok(tool: Tool, args: string[], opts: RunOptions = {}): Promise<string> {
  const r = await run(tool, args, opts);
  assert.equal(r.code, 0, `${tool} ${args.join(' ')} exited ${r.code}:\n${r.stderr}\n${r.stdout.slice(0, 4000)}`);
  return r.stdout;
}

/** kubectl against the harness (admin kubeconfig). */
export function kubectl(kube: Kube, args: string[], opts: Omit<RunOptions, 'kube'> = {}): Promise<string> {
  return ok('kubectl', args, { ...opts, kube });
}

/** helm against the harness (admin kubeconfig; Helm's own state under the harness's data dir). */
export function helm(kube: Kube, args: string[], opts: Omit<RunOptions, 'kube'> = {}): Promise<string> {
  return ok('helm', args, { ...opts, kube });
}

/**
 * A kubeconfig file for `token` (a ServiceAccount's) against the harness: the controller runs with
 * exactly the rights of that ServiceAccount.
 */
export function tokenKubeconfig(kube: Kube, token: string, file: string): string {
  writeFileSync(
    file,
    JSON.stringify({
      apiVersion: 'v1',
      kind: 'Config',
      clusters: [
        {
          name: 'harness',
          cluster: { server: kube.url, 'certificate-authority-data': Buffer.from(kube.caPem).toString('base64') },
        },
      ],
      users: [{ name: 'sa', user: { token } }],
      contexts: [{ name: 'sa', context: { cluster: 'harness', user: 'sa' } }],
      'current-context': 'sa',
    }),
  );
  return file;
}

/**
 * kubectl's table output as one record per row, keyed by the header's column names. Cells are cut
 * at the header's column offsets (kubectl aligns every column under its header), so an empty cell
 * stays empty instead of shifting the row.
 */
export function table(text: string): Array<Record<string, string>> {
  const [header, ...rows] = text.trimEnd().split('\n');
  assert.ok(header, 'kubectl printed no table');
  const cols = [...header.matchAll(/\S+/g)].map((m) => ({ name: m[0], at: m.index }));
  return rows.map((line) =>
    Object.fromEntries(cols.map((c, i) => [c.name, line.slice(c.at, cols[i + 1]?.at ?? line.length).trim()])),
  );
}

/**
 * `kubectl wait --for=<cond> <target>`; on a timeout the error carries `kubectl describe` of the
 * target (conditions and events say why).
 */
export async function kubectlWait(kube: Kube, target: string[], condition: string, timeout = '90s'): Promise<void> {
  const r = await run('kubectl', ['wait', `--for=${condition}`, ...target, `--timeout=${timeout}`], { kube });
  if (r.code === 0) return;
  const described = await run('kubectl', ['describe', ...target.filter((a) => a !== '--all')], { kube });
  assert.fail(
    `kubectl wait --for=${condition} ${target.join(' ')}: ${r.stderr.trim()}\n${described.stdout.slice(-6000)}`,
  );
}
