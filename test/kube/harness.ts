/**
 * Starts and stops a real kube-apiserver + etcd (the Go program in test/kube/harness/) for the
 * Kubernetes tests. The binary is built once by harness/build.sh and cached under .cache/.
 *
 *   const kube = await startKube();
 *   // kube.url, kube.kubeconfigPath (admin, bearer token), kube.token, kube.caPem
 *   await kube.stop();
 *
 * Set KUBE_HARNESS_BIN to use a prebuilt binary instead of running build.sh. toolBinary() gives the
 * other tools build.sh builds (kubectl, helm, promtool) the same way.
 */
import { type ChildProcess, execFile, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const HERE = dirname(fileURLToPath(import.meta.url));
const BUILD_SCRIPT = join(HERE, 'harness', 'build.sh');
const STDERR_TAIL_BYTES = 16 * 1024;

export interface Kube {
  /** https://127.0.0.1:PORT */
  url: string;
  /** Admin kubeconfig (bearer token of a system:masters user, CA data inline). */
  kubeconfigPath: string;
  /** The admin bearer token. */
  token: string;
  /** PEM of the CA that signed the apiserver's serving certificate. */
  caPem: string;
  /** The harness's data directory (etcd data, certificates, keys). Removed by stop(). */
  dataDir: string;
  /**
   * SIGTERM, wait for the exit (SIGKILL after 40 s), remove the data directory. Rejects, with the
   * harness's stderr tail, if the harness did not exit with status 0. Idempotent.
   */
  stop(): Promise<void>;
}

export interface StartKubeOptions {
  /** How long to wait for READY after the process started. Default 120 s. */
  startTimeoutMs?: number;
  /** How long build.sh may take (a cold build is minutes). Default 30 min. */
  buildTimeoutMs?: number;
  /** Extra kube-apiserver flags, e.g. ['--feature-gates=Foo=true']. */
  apiserverArgs?: string[];
  /** kube-apiserver log verbosity. Default 0. */
  verbosity?: number;
}

/** The test-only tools build.sh builds and caches (see harness/README.md). */
export type Tool = 'kube-harness' | 'kubectl' | 'helm' | 'promtool';

/** An environment variable per tool that names a prebuilt binary instead of running build.sh. */
const TOOL_ENV: Record<Tool, string> = {
  'kube-harness': 'KUBE_HARNESS_BIN',
  kubectl: 'KUBECTL_BIN',
  helm: 'HELM_BIN',
  promtool: 'PROMTOOL_BIN',
};

const toolPromises = new Map<Tool, Promise<string>>();

/**
 * Path of a tool: its *_BIN variable, or build.sh's (cached) output. A tool that cannot be built
 * rejects with build.sh's stderr, so the test that needs it fails saying why (never skips).
 */
export function toolBinary(tool: Tool, buildTimeoutMs = 30 * 60_000): Promise<string> {
  const fromEnv = process.env[TOOL_ENV[tool]];
  if (fromEnv) return Promise.resolve(resolve(fromEnv));
  let p = toolPromises.get(tool);
  if (!p) {
    p = new Promise<string>((ok, fail) => {
      execFile(
        'bash',
        [BUILD_SCRIPT, tool],
        { timeout: buildTimeoutMs, maxBuffer: 64 * 1024 * 1024 },
        (err, stdout, stderr) => {
          if (err) {
            toolPromises.delete(tool);
            fail(new Error(`building ${tool} failed (${err.message.split('\n')[0]}):\n${tail(stderr, 8192)}`));
            return;
          }
          const line = stdout
            .trim()
            .split('\n')
            .find((l) => l.startsWith(`${tool} `));
          if (!line) fail(new Error(`build.sh printed no path for ${tool}; stderr:\n${tail(stderr, 8192)}`));
          else ok(line.slice(tool.length + 1));
        },
      );
    });
    toolPromises.set(tool, p);
  }
  return p;
}

/** Path of the harness binary: KUBE_HARNESS_BIN, or build.sh's (cached) output. */
export function harnessBinary(buildTimeoutMs = 30 * 60_000): Promise<string> {
  return toolBinary('kube-harness', buildTimeoutMs);
}

const live = new Set<ChildProcess>();
let exitHookInstalled = false;
function installExitHook(): void {
  if (exitHookInstalled) return;
  exitHookInstalled = true;
  // A test runner that dies without calling stop() must not leave an apiserver behind.
  process.once('exit', () => {
    for (const child of live) child.kill('SIGKILL');
  });
}

export async function startKube(opts: StartKubeOptions = {}): Promise<Kube> {
  const bin = await harnessBinary(opts.buildTimeoutMs);
  const dataDir = await mkdtemp(join(tmpdir(), 'kube-harness-'));
  const kubeconfigPath = join(dataDir, 'admin.kubeconfig');
  const token = randomBytes(24).toString('hex');
  const startTimeoutMs = opts.startTimeoutMs ?? 120_000;

  const args = [
    `--data-dir=${join(dataDir, 'data')}`,
    `--kubeconfig=${kubeconfigPath}`,
    `--admin-token=${token}`,
    `--start-timeout=${Math.ceil(startTimeoutMs / 1000)}s`,
    `--v=${opts.verbosity ?? 0}`,
    ...(opts.apiserverArgs ?? []).map((a) => `--apiserver-arg=${a}`),
  ];
  const child = spawn(bin, args, { stdio: ['ignore', 'pipe', 'pipe'] });
  installExitHook();
  live.add(child);

  let stderrTail = '';
  child.stderr!.setEncoding('utf8');
  child.stderr!.on('data', (chunk: string) => {
    stderrTail = tail(stderrTail + chunk, STDERR_TAIL_BYTES);
  });
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((ok) => {
    child.once('exit', (code, signal) => {
      live.delete(child);
      ok({ code, signal });
    });
  });

  let ready = false;
  let stopping: Promise<void> | undefined;
  const stop = (): Promise<void> => {
    stopping ??= (async () => {
      let unclean: string | undefined;
      if (child.exitCode === null && child.signalCode === null) {
        child.kill('SIGTERM');
        const timer = setTimeout(() => child.kill('SIGKILL'), 40_000);
        const { code, signal } = await exited;
        clearTimeout(timer);
        if (code !== 0) unclean = `code ${code}, signal ${signal}`;
      }
      await rm(dataDir, { recursive: true, force: true });
      if (unclean && ready) {
        throw new Error(`kube harness did not stop cleanly (${unclean}); stderr tail:\n${tail(stderrTail, 8192)}`);
      }
    })();
    return stopping;
  };

  const url = await new Promise<string>((ok, fail) => {
    let stdoutBuf = '';
    const timer = setTimeout(() => {
      fail(new Error(`kube harness not ready within ${startTimeoutMs} ms; stderr tail:\n${tail(stderrTail, 8192)}`));
    }, startTimeoutMs + 5_000);
    child.stdout!.setEncoding('utf8');
    child.stdout!.on('data', (chunk: string) => {
      stdoutBuf += chunk;
      const m = /^READY (\S+)$/m.exec(stdoutBuf);
      if (m) {
        clearTimeout(timer);
        ok(m[1]!);
      }
    });
    child.once('error', (err) => {
      clearTimeout(timer);
      fail(new Error(`kube harness failed to start (${bin}): ${err.message}`));
    });
    void exited.then(({ code, signal }) => {
      clearTimeout(timer);
      fail(
        new Error(
          `kube harness exited before ready (code ${code}, signal ${signal}); stderr tail:\n${tail(stderrTail, 8192)}`,
        ),
      );
    });
  }).catch(async (err: unknown) => {
    await stop();
    throw err;
  });

  ready = true;
  const caPem = await readFile(join(dataDir, 'data', 'ca.crt'), 'utf8');
  return { url, kubeconfigPath, token, caPem, dataDir, stop };
}

function tail(s: string, n: number): string {
  return s.length <= n ? s : s.slice(s.length - n);
}
