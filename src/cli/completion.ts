/**
 * `provider-proxmox completion bash|zsh|fish`: a shell completion script made from the commander
 * program itself (every command, its options, their choices; files where an option takes a
 * `<file>` or `<path>`), so it cannot fall behind the commands. Commander has no generator of its
 * own; the completion libraries for Node (@pnpm/tabtab, omelette) call the program back on every
 * TAB, which costs a Node start (~0.3 s here) per keypress and installs itself into rc files. A
 * static script answers at once and is installed the usual way (see the help text).
 */
import { Argument, type Command, type Option } from 'commander';

export const SHELLS = ['bash', 'zsh', 'fish'] as const;
export type Shell = (typeof SHELLS)[number];

/** What the generator needs of one option. */
export interface OptionSpec {
  short?: string;
  long?: string;
  description: string;
  /** It takes a value. */
  value: boolean;
  /** Its value is a file or directory (`<file>`, `<path>`, `<path...>`, `<dir>`). */
  file: boolean;
  choices?: string[];
}

export interface CommandSpec {
  name: string;
  description: string;
  options: OptionSpec[];
  /** The choices of its first argument, if it has them (`completion bash|zsh|fish`). */
  argChoices?: string[];
}

const HELP: OptionSpec = {
  short: '-h',
  long: '--help',
  description: 'display help for command',
  value: false,
  file: false,
};

function optionSpec(o: Option): OptionSpec {
  const arg = /<([^>]+)>|\[([^\]]+)\]/.exec(o.flags);
  const name = (arg?.[1] ?? arg?.[2] ?? '').replace(/\.\.\.$/, '');
  return {
    ...(o.short ? { short: o.short } : {}),
    ...(o.long ? { long: o.long } : {}),
    description: o.description,
    value: Boolean(o.required || o.optional),
    file: /^(file|path|dir|directory)$/i.test(name),
    ...(o.argChoices ? { choices: [...o.argChoices] } : {}),
  };
}

/** The commands of `program` and their options, as the scripts list them. */
export function commandSpecs(program: Command): CommandSpec[] {
  return program.commands
    .filter((c) => !(c as Command & { _hidden?: boolean })._hidden)
    .map((c) => ({
      name: c.name(),
      description: c.description(),
      options: [...c.options.filter((o) => !o.hidden).map(optionSpec), HELP],
      ...(c.registeredArguments[0]?.argChoices ? { argChoices: [...c.registeredArguments[0].argChoices] } : {}),
    }));
}

const GLOBAL: OptionSpec[] = [
  HELP,
  { short: '-V', long: '--version', description: 'output the version number', value: false, file: false },
];

const flagsOf = (o: OptionSpec) => [o.short, o.long].filter((f): f is string => Boolean(f));
/**
 * A description for a shell: its first sentence, without parenthesized asides and the characters
 * the scripts quote or separate with, at most 70 columns.
 */
const brief = (s: string) => {
  const first = (s.split(/(?<=\.)\s|;\s/)[0] ?? '').replace(/\s*\([^)]*\)/g, '');
  const open = first.indexOf('(');
  const text = (open >= 0 ? first.slice(0, open) : first)
    .replace(/:\s/g, ' - ')
    .replace(/[[\]'"`$\\:]/g, '')
    .trim();
  return text.length > 70 ? `${text.slice(0, 67).replace(/\s+\S*$/, '')}...` : text;
};
/** A shell function name from the program's (`provider-proxmox` -> `_provider_proxmox`). */
const fn = (bin: string) => `_${bin.replace(/[^A-Za-z0-9]/g, '_')}`;

export function bashScript(bin: string, cmds: CommandSpec[]): string {
  const words = (opts: OptionSpec[]) => opts.flatMap(flagsOf).join(' ');
  const cases = cmds.map((c) => {
    const values = c.options
      .filter((o) => o.value)
      .map((o) => {
        const action = o.choices
          ? `COMPREPLY=($(compgen -W "${o.choices.join(' ')}" -- "$cur")); return ;;`
          : o.file
            ? 'COMPREPLY=($(compgen -f -- "$cur")); return ;;'
            : 'return ;;';
        return `        ${flagsOf(o).join('|')}) ${action}`;
      });
    return [
      `    ${c.name})`,
      ...(values.length ? ['      case "$prev" in', ...values, '      esac'] : []),
      `      [[ "$cur" == -* ]] && COMPREPLY=($(compgen -W "${words(c.options)}" -- "$cur"))`,
      ...(c.argChoices
        ? [`      [[ "$cur" != -* ]] && COMPREPLY=($(compgen -W "${c.argChoices.join(' ')}" -- "$cur"))`]
        : []),
      '      ;;',
    ].join('\n');
  });
  const f = fn(bin);
  return `# ${bin} completion for bash. Load it with
#   source <(${bin} completion bash)
# or install it: ${bin} completion bash > ~/.local/share/bash-completion/completions/${bin}
${f}() {
  local cur="\${COMP_WORDS[COMP_CWORD]}" prev="\${COMP_WORDS[COMP_CWORD-1]}" cmd="" i
  COMPREPLY=()
  # The command is the first word that is not an option (the global options take no value).
  for ((i = 1; i < COMP_CWORD; i++)); do
    [[ "\${COMP_WORDS[i]}" != -* ]] && { cmd="\${COMP_WORDS[i]}"; break; }
  done
  case "$cmd" in
    "")
      COMPREPLY=($(compgen -W "${[...cmds.map((c) => c.name), 'help', ...GLOBAL.flatMap(flagsOf)].join(' ')}" -- "$cur"))
      ;;
    help)
      COMPREPLY=($(compgen -W "${cmds.map((c) => c.name).join(' ')}" -- "$cur"))
      ;;
${cases.join('\n')}
  esac
}
# -o default: where the script offers nothing (a manifest path, a value), bash completes file names.
complete -o default -F ${f} ${bin}
`;
}

export function zshScript(bin: string, cmds: CommandSpec[]): string {
  const spec = (o: OptionSpec) => {
    const flags = flagsOf(o);
    const arg = !o.value ? '' : o.choices ? `:value:(${o.choices.join(' ')})` : o.file ? ':file:_files' : ':value: ';
    const rest = `'[${brief(o.description)}]${arg}'`;
    // -f and --filename: either one, not both (the exclusion list, then both names).
    return flags.length > 1 ? `'(${flags.join(' ')})'{${flags.join(',')}}${rest}` : `${flags[0]}${rest}`;
  };
  const f = fn(bin);
  return `#compdef ${bin}
# ${bin} completion for zsh. Load it with
#   source <(${bin} completion zsh)
# or install it as _${bin} in a directory of $fpath.
${f}() {
  local state line
  local -a commands
  commands=(
${cmds.map((c) => `    '${c.name}:${brief(c.description)}'`).join('\n')}
    'help:display help for a command'
  )
  _arguments -C \\
${GLOBAL.map((o) => `    ${spec(o)} \\`).join('\n')}
    '1: :->command' \\
    '*:: :->args'
  case $state in
    command) _describe -t commands '${bin} command' commands ;;
    args)
      case $line[1] in
${cmds.map((c) => `        ${c.name}) _arguments \\\n${[...c.options.map((o) => `            ${spec(o)}`), ...(c.argChoices ? [`            '1:${c.name}:(${c.argChoices.join(' ')})'`] : [])].join(' \\\n')} ;;`).join('\n')}
        help) _describe -t commands '${bin} command' commands ;;
      esac
      ;;
  esac
}
if [[ "\${funcstack[1]}" == "_${bin}" ]]; then
  ${f} "$@"
else
  compdef ${f} ${bin}
fi
`;
}

export function fishScript(bin: string, cmds: CommandSpec[]): string {
  const names = cmds.map((c) => c.name).join(' ');
  const line = (cond: string, o: OptionSpec) => {
    const parts = [`complete -c ${bin} -n '${cond}'`];
    if (o.short) parts.push(`-s ${o.short.slice(1)}`);
    if (o.long) parts.push(`-l ${o.long.slice(2)}`);
    if (o.value) parts.push(o.choices ? `-x -a '${o.choices.join(' ')}'` : o.file ? '-r -F' : '-x');
    parts.push(`-d '${brief(o.description)}'`);
    return parts.join(' ');
  };
  return [
    `# ${bin} completion for fish. Load it with`,
    `#   ${bin} completion fish | source`,
    `# or install it: ${bin} completion fish > ~/.config/fish/completions/${bin}.fish`,
    `complete -c ${bin} -f`,
    ...GLOBAL.map((o) => line('__fish_use_subcommand', o)),
    ...cmds.map((c) => `complete -c ${bin} -n '__fish_use_subcommand' -a ${c.name} -d '${brief(c.description)}'`),
    `complete -c ${bin} -n '__fish_use_subcommand' -a help -d 'display help for a command'`,
    `complete -c ${bin} -n '__fish_seen_subcommand_from help' -a '${names}'`,
    ...cmds.flatMap((c) => c.options.map((o) => line(`__fish_seen_subcommand_from ${c.name}`, o))),
    ...cmds
      .filter((c) => c.argChoices)
      .map((c) => `complete -c ${bin} -n '__fish_seen_subcommand_from ${c.name}' -a '${c.argChoices!.join(' ')}'`),
    '',
  ].join('\n');
}

export function completionScript(shell: Shell, program: Command): string {
  const cmds = commandSpecs(program);
  const bin = program.name();
  return shell === 'bash' ? bashScript(bin, cmds) : shell === 'zsh' ? zshScript(bin, cmds) : fishScript(bin, cmds);
}

export function registerCompletion(program: Command): void {
  program
    .command('completion')
    .description('Print a shell completion script (bash, zsh or fish) for every command and option.')
    .addArgument(new Argument('<shell>', 'the shell').choices(SHELLS))
    .addHelpText(
      'after',
      `
Examples:
  source <(provider-proxmox completion bash)          # bash, this shell
  provider-proxmox completion bash > ~/.local/share/bash-completion/completions/provider-proxmox
  provider-proxmox completion zsh > "\${fpath[1]}/_provider-proxmox"
  provider-proxmox completion fish > ~/.config/fish/completions/provider-proxmox.fish`,
    )
    .action((shell: Shell) => {
      process.stdout.write(completionScript(shell, program));
    });
}
