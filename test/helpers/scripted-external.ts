/**
 * A small scripted "external system" for engine tests: a real in-memory object map, and an
 * ExternalClient that behaves like the Proxmox one where it matters for the invariants:
 * every object carries an ownership marker (the resource UID) written in the create call; observe
 * finds the object by external name and falls back to the marker; update and delete verify the
 * marker; a name taken by someone else is a conflict, never a blind retry.
 */
import {
  ANNOTATION_EXTERNAL_NAME,
  externalName,
  type Managed,
  policyAllows,
  setAnnotation,
  setCondition,
} from '../../src/engine/resource.ts';
import {
  type Connector,
  type ExternalClient,
  type ExternalObservation,
  ReasonedError,
} from '../../src/engine/types.ts';

export interface VMParams {
  name: string;
  cpu: number;
  memory?: number;
}
export interface VMObservation {
  id?: string;
  cpu?: number;
}
export type TestVM = Managed<VMParams, VMObservation>;

export interface ExtObject {
  id: string;
  marker: string;
  name: string;
  cpu: number;
  memory: number;
}

type Op = 'connect' | 'prepare' | 'observe' | 'create' | 'update' | 'delete';

export class ExternalSystem {
  readonly objects = new Map<string, ExtObject>();
  nextId = 100;
  readonly calls: Array<{ op: Op; key: string }> = [];
  /** Errors to throw on the next call of an operation (consumed once). */
  readonly failNext: Partial<Record<Op, Error>> = {};
  /** Errors to throw on every call of an operation. */
  readonly failAlways: Partial<Record<Op, Error>> = {};
  /** The create call creates the object, then fails (a partial create). */
  failAfterCreate: Error | undefined;
  /** Observation lags: objects are invisible to observe (like a stale /cluster/resources). */
  invisible = false;
  /** Delete is asynchronous: it is issued but the object stays until `finishDeletes()`. */
  asyncDelete = false;
  private readonly deleting = new Set<string>();

  callsOf(op: Op): number {
    return this.calls.filter((c) => c.op === op).length;
  }
  ownedBy(uid: string): ExtObject[] {
    return [...this.objects.values()].filter((o) => o.marker === uid);
  }
  finishDeletes(): void {
    for (const id of this.deleting) this.objects.delete(id);
    this.deleting.clear();
  }
  record(op: Op, key: string): void {
    this.calls.push({ op, key });
    const once = this.failNext[op];
    if (once) {
      delete this.failNext[op];
      throw once;
    }
    const always = this.failAlways[op];
    if (always) throw always;
  }
  isDeleting(id: string): boolean {
    return this.deleting.has(id);
  }
  markDeleting(id: string): void {
    this.deleting.add(id);
  }
}

function keyOfVM(r: TestVM): string {
  return r.metadata.namespace ? `${r.metadata.namespace}/${r.metadata.name}` : r.metadata.name;
}

export interface ScriptedOptions {
  /** Choose the external name before create (deterministic-name mode, as for Proxmox VMIDs). */
  deterministic: boolean;
  now: () => number;
}

export class ScriptedClient implements ExternalClient<TestVM> {
  private readonly sys: ExternalSystem;
  private readonly opts: ScriptedOptions;
  prepareCreate?: (r: TestVM) => Promise<{ externalName: string }>;

  constructor(sys: ExternalSystem, opts: ScriptedOptions) {
    this.sys = sys;
    this.opts = opts;
    if (opts.deterministic) {
      this.prepareCreate = async (r) => {
        this.sys.record('prepare', keyOfVM(r));
        return { externalName: String(this.sys.nextId++) };
      };
    }
  }

  /** Our object for this resource: by external name, else by marker. */
  private find(r: TestVM): { obj: ExtObject | undefined; adopted: boolean } {
    const name = externalName(r);
    if (name !== undefined) {
      const obj = this.sys.objects.get(name);
      if (obj) {
        if (obj.marker !== r.metadata.uid) {
          throw new ReasonedError('NotOwned', `external object ${name} belongs to ${obj.marker}, not to this resource`);
        }
        return { obj, adopted: false };
      }
    }
    const byMarker = [...this.sys.objects.values()].filter((o) => o.marker === r.metadata.uid);
    if (byMarker.length > 1)
      throw new ReasonedError('Ambiguous', `${byMarker.length} objects carry this resource's marker`);
    const obj = byMarker[0];
    if (obj && name !== obj.id) {
      setAnnotation(r, ANNOTATION_EXTERNAL_NAME, obj.id);
      return { obj, adopted: true };
    }
    return { obj, adopted: false };
  }

  async observe(r: TestVM): Promise<ExternalObservation> {
    this.sys.record('observe', keyOfVM(r));
    if (this.sys.invisible) return { exists: false, upToDate: false };
    const { obj, adopted } = this.find(r);
    if (!obj) return { exists: false, upToDate: false };
    let lateInitialized = adopted;
    if (r.spec.forProvider.memory === undefined && policyAllows(r.spec.managementPolicies, 'LateInitialize')) {
      r.spec.forProvider.memory = obj.memory;
      lateInitialized = true;
    }
    r.status ??= {};
    r.status.atProvider = { id: obj.id, cpu: obj.cpu };
    setCondition(
      r,
      { type: 'Ready', status: 'True', reason: 'Available', observedGeneration: r.metadata.generation },
      this.opts.now(),
    );
    return {
      exists: true,
      upToDate: obj.cpu === r.spec.forProvider.cpu && obj.memory === r.spec.forProvider.memory,
      lateInitialized,
      connectionDetails: { address: `10.0.0.${obj.id}` },
      ...(this.sys.isDeleting(obj.id) ? { requeueAfterMs: 1000 } : {}),
    };
  }

  async create(r: TestVM): Promise<{ connectionDetails?: Record<string, string> }> {
    this.sys.record('create', keyOfVM(r));
    const id = externalName(r) ?? String(this.sys.nextId++);
    const existing = this.sys.objects.get(id);
    if (existing) {
      // "already exists": resolved by the marker, never by a blind retry
      if (existing.marker !== r.metadata.uid) throw new ReasonedError('NameTaken', `external name ${id} is taken`);
      return {};
    }
    const p = r.spec.forProvider;
    this.sys.objects.set(id, { id, marker: r.metadata.uid, name: p.name, cpu: p.cpu, memory: p.memory ?? 1024 });
    setAnnotation(r, ANNOTATION_EXTERNAL_NAME, id);
    if (this.sys.failAfterCreate) throw this.sys.failAfterCreate;
    return { connectionDetails: { password: 'initial' } };
  }

  async update(r: TestVM): Promise<{ requeueAfterMs?: number }> {
    this.sys.record('update', keyOfVM(r));
    const { obj } = this.find(r);
    if (!obj) throw new Error('update of a missing object');
    obj.cpu = r.spec.forProvider.cpu;
    if (r.spec.forProvider.memory !== undefined) obj.memory = r.spec.forProvider.memory;
    return {};
  }

  async delete(r: TestVM): Promise<{ requeueAfterMs?: number }> {
    this.sys.record('delete', keyOfVM(r));
    const { obj } = this.find(r);
    if (!obj) return {};
    if (this.sys.asyncDelete) {
      this.sys.markDeleting(obj.id);
      return { requeueAfterMs: 5000 };
    }
    this.sys.objects.delete(obj.id);
    return {};
  }
}

export class ScriptedConnector implements Connector<TestVM> {
  private readonly sys: ExternalSystem;
  private readonly opts: ScriptedOptions;
  constructor(sys: ExternalSystem, opts: ScriptedOptions) {
    this.sys = sys;
    this.opts = opts;
  }
  async connect(r: TestVM): Promise<ExternalClient<TestVM>> {
    this.sys.record('connect', keyOfVM(r));
    return new ScriptedClient(this.sys, this.opts);
  }
}

/** A resource; `memory: null` leaves memory unset so that observe late-initializes it. */
export function testVM(
  name: string,
  over: { cpu?: number; memory?: number | null; annotations?: Record<string, string> } = {},
): TestVM {
  const memory = over.memory === undefined ? 1024 : over.memory;
  return {
    apiVersion: 'test.proxmox.sankofa.io/v1alpha1',
    kind: 'TestVM',
    metadata: { name, namespace: 'default', uid: `uid-${name}`, generation: 1, annotations: { ...over.annotations } },
    spec: { forProvider: { name, cpu: over.cpu ?? 2, ...(memory === null ? {} : { memory }) } },
  };
}
