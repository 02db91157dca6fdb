/**
 * The confirmation apply and delete ask for before they change anything, as Terraform does: on a
 * terminal a prompt that takes only "yes"; without a terminal (CI, a pipe) --yes is required, so
 * that nothing is changed by a command nobody could answer.
 */
import { Option } from 'commander';

/**
 * `-y, --yes` and `--auto-approve` (Terraform's name) are the same on every command that asks
 * before it changes or destroys anything (apply, delete, gc --delete), so that the flag one of
 * them suggests works on all of them. `what`: what the flag lets go ahead.
 */
export function yesOption(what: string): Option {
  return new Option('-y, --yes', what);
}

export function autoApproveOption(): Option {
  return new Option('--auto-approve', 'the same as --yes (as Terraform names it)');
}

export function confirmer(opts: {
  yes?: boolean | undefined;
  /** `apply`, `delete`. */
  command: string;
  /** The question, e.g. "Apply these changes?". */
  question: string;
}): (() => Promise<boolean>) | undefined {
  if (opts.yes) return undefined;
  return async () => {
    if (!process.stdin.isTTY) {
      const { UsageError } = await import('../workspace/arguments.ts');
      throw new UsageError(
        `${opts.command} would change VMs and there is no terminal to confirm it: pass --yes (or --auto-approve) to go ahead without a prompt`,
      );
    }
    // Loaded on use: every command's wiring imports this module, few of them ask.
    const { createInterface } = await import('node:readline/promises');
    const rl = createInterface({ input: process.stdin, output: process.stderr });
    try {
      const answer = await rl.question(`${opts.question} Only 'yes' is accepted: `);
      return answer.trim() === 'yes';
    } finally {
      rl.close();
    }
  };
}
