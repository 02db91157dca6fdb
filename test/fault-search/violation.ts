/**
 * How the fault search's checks say an invariant broke: an InvariantViolation, which the runner
 * reports with the schedule's journal (invariants.ts, operator.ts).
 */
export class InvariantViolation extends Error {
  readonly invariant: string;
  constructor(invariant: string, details: string) {
    super(`${invariant}: ${details}`);
    this.name = 'InvariantViolation';
    this.invariant = invariant;
  }
}

export function violated(invariant: string, details: string): never {
  throw new InvariantViolation(invariant, details);
}
