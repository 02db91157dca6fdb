/**
 * The import direction around src/workspace, read from the sources: local and fleet, the two
 * rooms of cluster-less commands, never import each other (what both need is src/workspace, and
 * src/cli wires one into the other where a command needs both: `plan`), and src/workspace imports
 * none of the rooms above it. Static imports, re-exports and dynamic `import()` all count.
 */
import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { join, relative, resolve } from 'node:path';
import { describe, it } from 'node:test';

const ROOT = join(import.meta.dirname, '..', '..');
const SRC = join(ROOT, 'src');

/** Every `.ts` file under src/<room>. */
function filesOf(room: string): string[] {
  const dir = join(SRC, room);
  return readdirSync(dir, { recursive: true, encoding: 'utf8' })
    .filter((f) => f.endsWith('.ts'))
    .map((f) => join(dir, f));
}

/** The rooms (first folder under src/) a file imports, with the specifier, relative imports only. */
function importsOf(file: string): Array<{ room: string; spec: string }> {
  const text = readFileSync(file, 'utf8');
  const specs = [
    ...text.matchAll(/^\s*(?:import|export)\s[^;]*?\sfrom\s+'([^']+)'/gms),
    ...text.matchAll(/\bimport\(\s*'([^']+)'\s*\)/g),
  ].map((m) => m[1]!);
  return specs
    .filter((s) => s.startsWith('.'))
    .map((spec) => ({ room: relative(SRC, resolve(file, '..', spec)).split('/')[0]!, spec }));
}

/** `file: spec` for every import of `room`'s files into one of `forbidden`. */
function violations(room: string, forbidden: string[]): string[] {
  return filesOf(room).flatMap((f) =>
    importsOf(f)
      .filter((i) => forbidden.includes(i.room))
      .map((i) => `${relative(ROOT, f)}: ${i.spec}`),
  );
}

describe('import direction: local, fleet and workspace', () => {
  it('the checker sees imports (src/local imports src/workspace)', () => {
    assert.ok(filesOf('local').some((f) => importsOf(f).some((i) => i.room === 'workspace')));
  });

  it('src/local does not import src/fleet', () => {
    assert.deepEqual(violations('local', ['fleet']), []);
  });

  it('src/fleet does not import src/local', () => {
    assert.deepEqual(violations('fleet', ['local']), []);
  });

  it('src/workspace imports neither the commands nor the runtimes (local, fleet, cli, kube)', () => {
    assert.deepEqual(violations('workspace', ['local', 'fleet', 'cli', 'kube']), []);
  });
});
