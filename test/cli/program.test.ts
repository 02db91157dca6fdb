/**
 * src/cli/program.ts registers only the named command's group when a run names a command
 * (COMMAND_GROUPS). That must change nothing a user sees: the table names exactly the commands
 * each register function adds, every command but `completion` is in it, and each command's help
 * (its usage, options, choices and defaults, which its parsing and its errors come from) is the
 * same from its group alone as from the whole program. Anything else gets the whole program.
 * Before its action every command but validate sizes V8's heap for a long run.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { Command } from 'commander';
import { buildProgram, COMMAND_GROUPS, sizeHeapForLongRuns } from '../../src/cli/program.ts';

const argv = (...args: string[]) => ['node', 'provider-proxmox', ...args];
const names = (p: Command) => p.commands.map((c) => c.name()).sort();

describe('the program: a named command registers its group alone', () => {
  const whole = buildProgram(argv('--help'));

  it('the table names each command its register function adds, and every command but completion', () => {
    for (const register of new Set(Object.values(COMMAND_GROUPS))) {
      const p = new Command('provider-proxmox');
      register(p);
      const inTable = Object.keys(COMMAND_GROUPS).filter((n) => COMMAND_GROUPS[n] === register);
      assert.deepEqual(names(p), inTable.sort());
      for (const c of p.commands) assert.deepEqual(c.aliases(), [], `${c.name()}: an alias is not in the table`);
    }
    assert.deepEqual(names(whole), [...Object.keys(COMMAND_GROUPS), 'completion'].sort());
  });

  it("each command's help is the same from its group as from the whole program", () => {
    for (const name of Object.keys(COMMAND_GROUPS)) {
      const alone = buildProgram(argv(name, '-f', 'x'));
      assert.ok(names(alone).includes(name));
      assert.ok(names(alone).length < names(whole).length, name);
      const help = (p: Command) => p.commands.find((c) => c.name() === name)!.helpInformation();
      assert.equal(help(alone), help(whole), name);
    }
  });

  it('anything but a command name gets every command', () => {
    for (const args of [
      [],
      ['--help'],
      ['-V'],
      ['help', 'validate'],
      ['completion', 'bash'],
      ['valdate'],
      ['__proto__'],
    ])
      assert.deepEqual(names(buildProgram(argv(...args))), names(whole), args.join(' '));
  });
});

describe('the heap: sized for long runs before every action but a brief command', () => {
  it('every command of the program but validate sets the heap growth flag', () => {
    const p = buildProgram(argv('--help'));
    const sized: string[] = [];
    const real = process.getBuiltinModule;
    process.getBuiltinModule = ((id: string) =>
      id === 'node:v8'
        ? { setFlagsFromString: (flag: string) => sized.push(flag) }
        : real(id)) as typeof process.getBuiltinModule;
    try {
      for (const c of p.commands) sizeHeapForLongRuns(p, c);
    } finally {
      process.getBuiltinModule = real;
    }
    assert.equal(sized.length, p.commands.length - 1);
    assert.ok(
      sized.every((f) => f === '--heap-growing-percent=20'),
      sized.join(' '),
    );
  });
});
