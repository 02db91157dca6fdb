export type Profile = '6.4' | '7.4' | '8.4' | '9.2';
export type HttpMethod = 'GET' | 'POST' | 'PUT' | 'DELETE';

export type ParamType = 'string' | 'integer' | 'number' | 'boolean' | 'array' | 'object' | 'null' | 'any';

/**
 * One parameter (or one key of a property string), with PVE's own key names. Only what validation
 * needs is kept from the published schema.
 */
export interface ParamSchema {
  readonly type?: ParamType;
  readonly optional?: boolean;
  readonly enum?: readonly string[];
  readonly minimum?: number;
  readonly maximum?: number;
  readonly minLength?: number;
  readonly maxLength?: number;
  /** JavaScript regex source, converted from PVE's Perl pattern; matched like `m/^$pattern$/`. */
  readonly pattern?: string;
  /** A named format (`pve-vmid`, `pve-configid-list`...) or a property-string format. */
  readonly format?: string | PropertyStringFormat;
  /** Name of another key that must be present when this one is. */
  readonly requires?: string;
  readonly items?: ParamSchema;
  /** Property-string keys only: the key a value without `key=` belongs to. */
  readonly default_key?: boolean;
  /** Property-string keys only: this key is another name for `alias`. */
  readonly alias?: string;
  /** Property-string keys only: with `alias`, the key name itself is stored under `keyAlias` (`virtio=MAC` -> model). */
  readonly keyAlias?: string;
  /** `[n]` parameter families (`net[n]`): the highest accepted index. */
  readonly n?: number;
}

/** A property-string format: key -> schema (`net0: virtio,bridge=vmbr0`). */
export type PropertyStringFormat = Readonly<Record<string, ParamSchema>>;

export interface MethodSchema {
  readonly profile: Profile;
  /** Path template, e.g. `/nodes/{node}/qemu/{vmid}/config`. */
  readonly path: string;
  readonly method: HttpMethod;
  /** PVE `allowtoken` (API tokens may call it). */
  readonly allowToken: boolean;
  /** PVE `protected` (the method runs in the privileged pvedaemon). */
  readonly protected: boolean;
  /** `additionalProperties` of the parameter object: unknown parameters are accepted. */
  readonly additionalProperties: boolean;
  /**
   * The method declares no `properties` at all: PVE's validate() then checks nothing, so any
   * parameter is accepted (e.g. `GET /version?x=1`).
   */
  readonly noProperties: boolean;
  /** Parameters by name; families are keyed `net[n]` (see ParamSchema.n). */
  readonly params: Readonly<Record<string, ParamSchema>>;
}

/** Per-profile facts the named-format verifiers need. */
export interface FormatContext {
  readonly profile: Profile;
  /** Valid `boot: order=` devices (pve-qm-bootdev). */
  bootDevices(): ReadonlySet<string>;
  /** Valid drive names (pve-qm-bootdisk: is_valid_drivename). */
  driveNames(): ReadonlySet<string>;
}
