/**
 * An error answered the way pve-http-server answers it: the HTTP status, the first line of the
 * message as reason phrase, and (for 400) the per-parameter map.
 */
export class PveHttpError extends Error {
  readonly status: number;
  readonly errors: Record<string, string> | undefined;
  constructor(status: number, message: string, errors?: Record<string, string>) {
    super(message);
    this.status = status;
    this.errors = errors;
  }
}

/** A plain `die` in a PVE handler: 500 with the message as reason phrase. */
export function die(message: string): never {
  throw new PveHttpError(500, message);
}

/** `raise_param_exc`: 400 Parameter verification failed. */
export function paramError(errors: Record<string, string>): never {
  throw new PveHttpError(400, 'Parameter verification failed.', errors);
}
