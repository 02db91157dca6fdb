/** A small seedable PRNG (mulberry32) so that MACs, addresses and ids are reproducible in tests. */
export class Rng {
  private state: number;
  constructor(seed: number) {
    this.state = seed >>> 0;
  }
  next(): number {
    this.state = (this.state + 0x6d2b79f5) >>> 0;
    let t = this.state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  }
  int(maxExclusive: number): number {
    return Math.floor(this.next() * maxExclusive);
  }
  hex(chars: number): string {
    let s = '';
    for (let i = 0; i < chars; i++) s += this.int(16).toString(16);
    return s;
  }
  uuid(): string {
    const h = this.hex(32);
    return `${h.slice(0, 8)}-${h.slice(8, 12)}-4${h.slice(13, 16)}-${((this.int(4) + 8) as number).toString(16)}${h.slice(17, 20)}-${h.slice(20, 32)}`;
  }
}
