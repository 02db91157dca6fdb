/** `--token USER@REALM!TOKENID=SECRET` (kept apart so that the CLI can check it without loading the simulator). */
export function parseTokenArg(arg: string): { userid: string; tokenid: string; secret: string } {
  const m = /^([^!\s]+@[^!\s]+)!([A-Za-z][A-Za-z0-9._-]*)=(\S+)$/.exec(arg);
  if (!m) throw new Error(`invalid --token '${arg.replace(/=.*/, '=…')}': expected USER@REALM!TOKENID=SECRET`);
  return { userid: m[1]!, tokenid: m[2]!, secret: m[3]! };
}
