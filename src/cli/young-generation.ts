/**
 * The long-running commands bound V8's young generation: main.ts restarts the process in place
 * (process.execve: the same PID, terminal, stdio and signals) with `--max-semi-space-size`, before
 * anything else is loaded. V8 grows each semi-space up to 64 MB under an apply's allocation rate,
 * 128 MB of new space, and the flag is read only when the heap is set up: `v8.setFlagsFromString`
 * after start-up changes nothing (bench/local-apply.ts measured the same RSS either way). The
 * installed CLI, applying 3,000 VMs: peak RSS 319 -> 186-189 MB; 10,000 VMs: 403 -> 278-283 MB (see
 * docs/architecture.md). The controller's image passes the same flag itself (Dockerfile), and so
 * does anyone who gives Node a semi-space size of their own (on its command line or in
 * NODE_OPTIONS): then nothing is restarted. Where Node has no execve (Windows), the command runs
 * as it is, with V8's own sizing. Brief commands (validate, status, plan, --help) are not
 * restarted: a restart costs a second Node start-up, about 40 ms.
 */

/** The semi-space size, in MB: as the controller's (test/kube/support.ts CONTROLLER_NODE_FLAGS says why 8). */
export const SEMI_SPACE_MB = 8;

/** Commands that run for minutes or for good, and hold a resource's state per VM meanwhile. */
export const LONG_RUNNING_COMMANDS: ReadonlySet<string> = new Set(['apply', 'delete', 'demo', 'sim', 'controller']);

const FLAG = '--max-semi-space-size';

/**
 * Node's options with the semi-space bounded, or undefined when Node's semi-space size is set
 * already (in `execArgv` or in NODE_OPTIONS): what a long-running command runs with.
 */
export function boundedNodeOptions(execArgv: readonly string[], nodeOptions: string | undefined): string[] | undefined {
  const set = (a: string) => a === FLAG || a.startsWith(`${FLAG}=`);
  if (execArgv.some(set) || (nodeOptions ?? '').split(/\s+/).some(set)) return undefined;
  return [`${FLAG}=${SEMI_SPACE_MB}`, ...execArgv];
}

/**
 * The argv to restart this process with (Node and its options first), or undefined when the command
 * is brief or Node's semi-space size is set already. `argv` is process.argv: node, the script, then
 * the command's arguments.
 */
export function boundedRestartArgs(
  argv: readonly string[],
  execArgv: readonly string[],
  nodeOptions: string | undefined,
): string[] | undefined {
  const command = argv[2];
  if (command === undefined || !LONG_RUNNING_COMMANDS.has(command)) return undefined;
  const options = boundedNodeOptions(execArgv, nodeOptions);
  return options && [argv[0]!, ...options, ...argv.slice(1)];
}

/**
 * The environment to restart with: glibc's malloc limited to 2 arenas, and its mmap threshold
 * fixed at its initial 128 KiB, unless the user chose either. Each thread that allocates (V8's GC
 * helpers, libuv's pool, SQLite's writes) otherwise gets an arena of its own, up to 8 per core,
 * whose freed memory stays resident: 13 MB of an apply's peak RSS at 5,000 VMs (215 -> 202 MB).
 * And glibc raises the threshold each time a mapped block is freed (up to 32 MiB), after which
 * such blocks come from the arenas and stay resident when freed: fixed, an apply of 10,000 VMs
 * peaked at 226-230 MiB against 231-245 (bench/local-apply.ts, two quiet runs each), its CPU the
 * same within the runs' noise. Other C libraries ignore both variables.
 */
export function boundedRestartEnv(env: NodeJS.ProcessEnv): NodeJS.ProcessEnv {
  return {
    ...env,
    ...(env.MALLOC_ARENA_MAX ? {} : { MALLOC_ARENA_MAX: '2' }),
    ...(env.MALLOC_MMAP_THRESHOLD_ ? {} : { MALLOC_MMAP_THRESHOLD_: '131072' }),
  };
}

/** Restart this process with the young generation bounded when boundedRestartArgs says so; else return. */
export function boundYoungGeneration(): void {
  const args = boundedRestartArgs(process.argv, process.execArgv, process.env.NODE_OPTIONS);
  if (!args || typeof process.execve !== 'function' || process.platform === 'win32') return;
  try {
    process.execve(process.execPath, args, boundedRestartEnv(process.env));
  } catch {
    // execve refused (a seccomp profile, a file system gone): the command runs with V8's own sizing.
  }
}
