/**
 * What a simulator fault is: the specification a test or `/_sim/faults` gives (FaultSpec), and
 * how a fault that was added stands (ActiveFault, TaskFault). Faults (src/sim/faults.ts) matches
 * them to requests and tasks; docs/simulator.md lists them for users.
 */

/** What selects requests for the request-like faults (request, reply-lost, applied-late). */
export interface RequestMatch {
  method?: string;
  /** A concrete path (`/nodes/pve/qemu`), a template (`/nodes/{node}/qemu/{vmid}/status/start`) or `re:<regex>`. */
  path: string;
  /** Only requests carrying this parameter (and value, when given). */
  param?: { name: string; value?: string };
  nth?: number;
  count?: number;
}

export type FaultSpec =
  /** Matching requests are answered at once with `status` and `message`, before authentication and validation. */
  | ({ kind: 'request'; status: number; message: string } & RequestMatch)
  /**
   * The request is applied in full (handler run, worker started), then the connection is reset
   * before any byte of the answer: the client cannot know whether it was applied.
   */
  | ({ kind: 'reply-lost' } & RequestMatch)
  /**
   * The request is held without an answer; after `delayMs` simulated ms (scaled by the speed
   * factor), or when the fault is removed, it is processed (authentication, validation, handler)
   * and the connection is then closed without an answer, whether or not the client still waits.
   */
  | ({ kind: 'applied-late'; delayMs: number } & RequestMatch)
  | {
      kind: 'task';
      type?: string;
      id?: string;
      node?: string;
      /**
       * `fail`: the task ends with `TASK ERROR: <message>`. `stall`: it is held. `die`: the worker
       * vanishes (node reboot, OOM kill): the task stops with the exit status `unexpected status`,
       * its log has no `TASK` line, and nothing is cleaned up; only its flocks go with the process.
       */
      action: 'fail' | 'stall' | 'die';
      message?: string;
      /**
       * `fail`/`die` before the worker does anything (`start`) or after its work (`end`, default).
       * `fail` at `start` undoes what the handler set up (a create or clone leaves no VM); `die` at
       * `start` leaves it (a create's `lock: create` placeholder). `die` at `end` comes after the
       * work but before the final config write and unlock (a create keeps its placeholder and
       * its disks, a clone its config with `lock: clone`).
       */
      at?: 'start' | 'end';
      /**
       * `stall`/`die` at the task's Nth simulated wait (1-based; the waits are the steps of the
       * durations table: a new disk, a copy quarter, a linked clone, the boot...) instead of `at`.
       * `die` strikes as the wait begins; `stall` holds once the wait's time has passed, before
       * the work that follows it. A `stall` without `step` holds at the first wait (or at the
       * end, if the task never waits).
       */
      step?: number;
      nth?: number;
      count?: number;
      /** `stall`: release after this many simulated ms (default: until the fault is removed). */
      durationMs?: number;
    }
  /** Delay matching requests by `ms` simulated ms (scaled by the speed factor); `count` requests (default: all). */
  | { kind: 'latency'; ms: number; method?: string; path?: string; count?: number }
  | { kind: 'lock'; vmid: number; lock?: string; flock?: boolean }
  | { kind: 'node-offline'; node: string }
  /**
   * The node loses power (a crash, a hard reset): it is offline as with `node-offline`, every
   * worker running on it dies (as task action `die`: `unexpected status`, nothing cleaned up),
   * every VM on it stops without a shutdown, and its SSH sessions are cut, its port closed. A
   * request it was handling gets no answer. Removing the fault boots the node: online again with
   * a new boot time, and pve-guests' `startall` runs (removes leftover backup locks, starts the
   * `onboot` VMs that HA does not manage, in startup order).
   */
  | { kind: 'node-crash'; node: string }
  /**
   * pvestatd on the node hangs (a storage it stats does not answer, a dead NFS mount): its VMs'
   * statistics in /cluster/resources (name, status, metrics) stay as of its last tick, and a VM
   * made since has none (`status: unknown`, no name); `lock` and `tags` still follow the config.
   */
  | { kind: 'stats-stalled'; node: string }
  | { kind: 'storage-full'; node: string; storage: string }
  /** The whole API (not `/_sim/`) resets connections or answers 503 for `ms` simulated ms, or until removed. */
  | { kind: 'unavailable'; ms: number; mode?: 'reset' | '503' }
  /**
   * The node's SSH port refuses connections (sshd stopped): ECONNREFUSED; open sessions stay, unless
   * `dropSessions` (sshd killed with its sessions, the node rebooting): they are cut as it begins.
   */
  | { kind: 'ssh-refused'; node: string; dropSessions?: boolean }
  /** Every SSH login to the node fails (keys and passwords alike), as a changed authorized_keys would. */
  | { kind: 'ssh-auth'; node: string };

export interface ActiveFault {
  id: number;
  spec: FaultSpec;
  seen: number;
  fired: number;
  /** The `path` of a request or latency fault, compiled once (it is tested on every request). */
  pathRe?: RegExp;
  release?: () => void;
  released: Promise<void>;
  /**
   * A `lock` fault whose worker died with its node (`node-crash`): its flock went with the
   * process, and its removal leaves the config lock, as a dead worker does.
   */
  holderDied?: boolean;
  /** A task stall: set once a task reached it (held there until the fault is removed): for tests that step a worker. */
  reached?: boolean;
}

export interface TaskFault {
  action: 'fail' | 'stall' | 'die';
  message: string;
  at: 'start' | 'end';
  /** Acts at the task's Nth simulated wait (stall, die). */
  step?: number;
  fault: ActiveFault;
  durationMs?: number;
  /** Set when the task first reaches this stall. */
  stalled?: Promise<void>;
}

/** What a held `applied-late` request does next: run late, or (simulator shutting down) drop. */
export type LateOutcome = 'run' | 'drop';
