#!/usr/bin/env node
// Runs the compiled CLI when the package was built (npm pack / published), otherwise the
// TypeScript sources directly (Node >= 22.18 strips types natively; the project pins Node 24).
import { existsSync } from 'node:fs';

const built = new URL('../dist/cli/main.js', import.meta.url);
await import(existsSync(built) ? built.href : new URL('../src/cli/main.ts', import.meta.url).href);
