/** A stand-in stdout for commands under test: collects what they write (a terminal when `tty`). */
export function capture(tty = false): { out: NodeJS.WriteStream; text: () => string; writes: string[] } {
  const writes: string[] = [];
  const out = {
    isTTY: tty,
    columns: 200,
    write(s: string) {
      writes.push(s);
      return true;
    },
  } as unknown as NodeJS.WriteStream;
  return { out, text: () => writes.join(''), writes };
}
